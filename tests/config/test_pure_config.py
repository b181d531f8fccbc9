"""Composing and validating a config is pure: it reads the config files and nothing else.

The checks that need the machine (a file the config names, CUDA, the kernel the device runs) belong to the
preflight (dormouse/train/preflight.py), which `validate` and `train` run before they create anything. A file
check that slips back into the composition would make `dormouse ab --plan`, a sweep's plan and every caller
of ``validate`` depend on the machine that composes, not the one that runs.
"""

from __future__ import annotations

import importlib.resources
import os
import sys
from pathlib import Path

import hydra
import pytest
import torch

import dormouse.conf
from dormouse.config.schema import compose_config, load_config, validate

# Hydra reads its own bundled configs (hydra/conf: the launcher, sweeper, logging defaults) on every compose.
HYDRA_CONF = Path(hydra.__file__).parent / "conf"
IMPORT_SUFFIXES = (".py", ".pyc", ".so", ".pth")  # what the interpreter opens to import a module


class FileAccessGuard:
    """Records every path opened, listed or stat-ed while ``on``: ``open``, ``os.listdir`` and ``os.scandir``
    through an audit hook (installed once per process, since an audit hook cannot be removed, and gated on
    ``on``), ``os.stat``/``os.lstat``/``os.access`` (which raise no audit event, and under ``Path.exists``,
    ``os.path.isfile`` and friends) through a patch the test undoes."""

    installed: FileAccessGuard | None = None

    def __init__(self) -> None:
        self.on = False
        self.touched: list[tuple[str, str]] = []

    @classmethod
    def get(cls) -> FileAccessGuard:
        if cls.installed is None:
            cls.installed = cls()
            sys.addaudithook(cls.installed._audit)
        return cls.installed

    def _audit(self, event: str, args: tuple) -> None:
        if self.on and event in ("open", "os.listdir", "os.scandir"):
            self.record(event, args[0] if args else None)

    def record(self, what: str, path: object) -> None:
        if isinstance(path, int):  # an already open descriptor
            return
        self.touched.append((what, os.path.abspath(os.fsdecode(path if path is not None else "."))))

    def wrap(self, name: str, real):
        def guarded(path, *args, **kwargs):
            if self.on:
                self.record(name, path)
            return real(path, *args, **kwargs)
        return guarded


def allowed(path: str, roots: list[str]) -> bool:
    """The package's own conf/ (and Hydra's bundled one), or a module the interpreter imports."""
    return any(path == r or path.startswith(r + os.sep) for r in roots) or path.endswith(IMPORT_SUFFIXES)


CONFIGS = [
    [],
    *([f"preset={p.name.removesuffix('.yaml')}"] for p in importlib.resources.files("dormouse.conf")
      .joinpath("preset").iterdir() if p.name.endswith(".yaml")),
    ["data.path=/no/such/corpus.txt", "train.resume=/no/such/step_00000004.pt"],
    ["data.path=/no/such/folder", "train.device=cuda:1", "model.use_attnres=true", "model.kernel=triton"],
    ["preset=tiny", "data.path='~/no-such-corpus'", "train.device=cuda", "model.kernel=triton"],
]


def test_composing_a_config_touches_no_file(monkeypatch: pytest.MonkeyPatch):
    """Compose and validate the default, each shipped preset, and overrides naming data files and checkpoints
    that do not exist (with CUDA and the fused kernel asked for), under a guard that records every file
    access: only the package's conf/ directory (and Hydra's own bundled conf/, which Hydra reads on every
    compose) may be read, plus the interpreter's imports (module files); anything else fails. The composed
    configs are valid: whether those files exist, and whether CUDA is there, is the preflight's to say. It
    never asks ``torch.cuda.is_available``. (A user's own preset file, ``preset=./my.yaml``, is read by
    composition on purpose and is not composed here.)"""
    compose_config([])  # the first compose imports Hydra's plugins; an import is not what this pins
    roots = [os.path.abspath(p) for p in dormouse.conf.__path__] + [str(HYDRA_CONF)]
    asked_cuda: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked_cuda.append("is_available") or False)
    guard = FileAccessGuard.get()
    for name in ("stat", "lstat", "access"):
        monkeypatch.setattr(os, name, guard.wrap(f"os.{name}", getattr(os, name)))
    guard.touched.clear()
    guard.on = True
    try:
        problems = {" ".join(o): validate(compose_config(o)) for o in CONFIGS}
        load_config(["preset=tiny", "data.path=/no/such/corpus.txt"])  # compose and validate, in one
    finally:
        guard.on = False
    assert problems == {" ".join(o): [] for o in CONFIGS}
    assert [t for t in guard.touched if not allowed(t[1], roots)] == []
    assert any(allowed(t[1], roots) and "preset" in t[1] for t in guard.touched), "the guard saw no conf/ read"
    assert asked_cuda == []


def test_a_file_check_in_the_composition_is_caught_by_the_guard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The guard itself: ``Path.exists`` of a data file and the read of a text file, inside the guarded span,
    are recorded and not allowed; the same under conf/ would be."""
    notes = tmp_path / "notes.txt"
    notes.write_text("x")
    guard = FileAccessGuard.get()
    monkeypatch.setattr(os, "stat", guard.wrap("os.stat", os.stat))
    guard.touched.clear()
    guard.on = True
    try:
        (tmp_path / "corpus.txt").exists()
        notes.read_text()
    finally:
        guard.on = False
    assert [t for t in guard.touched if not allowed(t[1], [])] == [("os.stat", str(tmp_path / "corpus.txt")),
                                                                    ("open", str(notes))]
    assert [t for t in guard.touched if not allowed(t[1], [str(tmp_path)])] == []
