"""Atomic writes leave the permissions a plain write would: the umask is respected, not mkstemp's 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dormouse.config.schema import load_config
from dormouse.run.checkpoint import atomic_save, atomic_write_text
from dormouse.train.loop import train


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077, 0o027])
def test_new_files_get_0666_minus_the_umask(tmp_path: Path, umask, mask: int):
    umask(mask)
    atomic_write_text(tmp_path / "report.md", "x")
    atomic_save({"a": 1}, tmp_path / "step.pt")
    expected = 0o666 & ~mask  # what open(path, "w") gives, by POSIX
    for name in ("report.md", "step.pt"):
        got = mode(tmp_path / name)
        assert got == expected, f"{name}: mode deviation={got:o} bound={expected:o} (octal)"


def test_replacing_a_file_keeps_its_mode(tmp_path: Path, umask):
    umask(0o022)
    target = tmp_path / "results.json"
    target.write_text("old")
    target.chmod(0o640)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and mode(target) == 0o640


def test_a_run_directory_has_one_mode_for_atomic_and_plain_files(tmp_path: Path, umask):
    umask(0o027)
    train(load_config(["preset=tiny", "train.steps=2", "train.eval_every=2", "data.eval_bytes=256",
                       f"run.dir={tmp_path}", "run.name=r", "logging.progress=off"]))
    run = tmp_path / "r"
    plain = mode(run / "train.log")  # written with open(): the reference
    assert plain == 0o640
    for path in (run / "config.yaml", run / "provenance.json", *(run / "checkpoints").glob("*.pt")):
        got = mode(path)
        assert got == plain, f"{path.name}: mode deviation={got:o} bound={plain:o} (octal)"
