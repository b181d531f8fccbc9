"""What computes a run, as one comparable value. Re-running published runs at a later commit moved single runs by
0.007–0.013 bpb (fused multiply-adds, a reordered score), the size of a small effect, so every run records this
fingerprint and the runner adds no run computed by other code. It hashes the package's and the kernels' ``*.py``,
the conf tree (without the registrations and launchers), the embedded corpus, every loaded plugin's files (read at
:func:`compute` time, so an edit since loading counts) and the torch and Python versions. ``dormouse/ab/`` is left
out: it hands a run only its composed config, which the registration hash binds. The git commit is recorded for the
report but not compared: it misses uncommitted edits."""

from __future__ import annotations

import hashlib
import importlib
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dormouse.arms.plugins import file_digests, loaded_plugins

# Not part of what computes a run: the comparison machinery itself, the registrations and launchers.
_SKIP_PACKAGE = {"ab", "conf"}  # dormouse/conf is the conf/ tree, hashed as its own root
_SKIP_CONF = {"ab", "launcher"}
PLUGIN_PREFIX = "plugin/"  # a loaded plugin's file: plugin/<module>/<path relative to the plugin's root>


@dataclass(frozen=True)
class Fingerprint:
    """``sha256`` over ``files`` (relative path -> sha256 of its bytes), ``torch`` and ``python``."""

    sha256: str
    torch: str
    python: str
    commit: str
    files: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "torch": self.torch, "python": self.python, "commit": self.commit,
                "files": dict(self.files)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fingerprint:
        return cls(str(d.get("sha256")), str(d.get("torch")), str(d.get("python")), str(d.get("commit")),
                   dict(d.get("files") or {}))


def conf_dir() -> Path:
    """The conf tree runs are composed from: ``dormouse/conf`` in a wheel, the repository's ``conf/`` in an editable
    install (pyproject's package-dir). Raises ``RuntimeError`` when it has no ``config.yaml``."""
    conf = Path(importlib.import_module("dormouse.conf").__file__ or "").resolve().parent
    if not (conf / "config.yaml").is_file():
        raise RuntimeError(f"the dormouse.conf package at {conf} has no config.yaml: the code fingerprint "
                           "cannot cover the configs; reinstall with `pip install -e .`")
    return conf


def _roots() -> list[tuple[str, Path, set[str], str]]:
    """(label, directory, top-level subdirectories to skip, glob) of every tree that computes a run."""
    import dormouse
    import dormouse_kernels

    pkg = Path(dormouse.__file__).resolve().parent
    conf = conf_dir()
    return [("dormouse", pkg, _SKIP_PACKAGE, "*.py"),
            ("dormouse/corpus", pkg / "corpus", set(), "*.gz"),  # the embedded corpus a run trains on
            ("kernels", Path(dormouse_kernels.__file__).resolve().parent, set(), "*.py"),
            ("conf", conf, _SKIP_CONF, "*.yaml")]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plugin_digests() -> dict[str, str]:
    """``plugin/<module>/<relative path> -> sha256`` of every loaded plugin's source files, read now (a file gone
    since is left out)."""
    out: dict[str, str] = {}
    for plugin in loaded_plugins():
        digests = file_digests(plugin.module, Path(plugin.file))
        out.update({f"{PLUGIN_PREFIX}{plugin.module}/{rel}": sha for rel, sha in digests.items()})
    return out


def plugin_sources(fp: Fingerprint) -> dict[str, dict[str, str]]:
    """``module -> {relative path: sha256}`` of each plugin ``fp`` covers."""
    out: dict[str, dict[str, str]] = {}
    for key, sha in fp.files.items():
        if key.startswith(PLUGIN_PREFIX):
            module, rel = key[len(PLUGIN_PREFIX):].split("/", 1)
            out.setdefault(module, {})[rel] = sha
    return out


def changed_plugins(old: Fingerprint, new: Fingerprint) -> list[str]:
    """The plugins whose source differs between two fingerprints (edited, loaded in one only)."""
    before, after = plugin_sources(old), plugin_sources(new)
    return sorted(m for m in before.keys() | after.keys() if before.get(m) != after.get(m))


def dormouse_changed(old: Fingerprint, new: Fingerprint) -> bool:
    """Whether anything but plugins differs: dormouse's own files, the torch or the Python version."""
    def own(fp: Fingerprint) -> dict[str, str]:
        return {k: v for k, v in fp.files.items() if not k.startswith(PLUGIN_PREFIX)}

    return (old.torch, old.python) != (new.torch, new.python) or own(old) != own(new) or not old.files


def source_digests() -> dict[str, str]:
    """``label/relative/path -> sha256`` of every file that computes a run."""
    out: dict[str, str] = {}
    for label, root, skip, pattern in _roots():
        for path in sorted(root.rglob(pattern)):
            rel = path.relative_to(root)
            if rel.parts[0] in skip or "__pycache__" in rel.parts:
                continue
            out[f"{label}/{rel.as_posix()}"] = _digest(path)
    out.update(plugin_digests())
    return out


def compute() -> Fingerprint:
    """This process's fingerprint (reads the files now: an edit since the last call is seen)."""
    import torch

    from dormouse.train.start import git_commit

    files = source_digests()
    blob = "\n".join(f"{k} {v}" for k, v in sorted(files.items()))
    blob += f"\ntorch {torch.__version__}\npython {platform.python_version()}\n"
    return Fingerprint(hashlib.sha256(blob.encode()).hexdigest(), str(torch.__version__),
                       platform.python_version(), git_commit(), files)


def differences(old: Fingerprint, new: Fingerprint, limit: int = 6) -> list[str]:
    """What differs between two fingerprints, in words: versions, then changed, added and removed files."""
    out: list[str] = []
    if old.torch != new.torch:
        out.append(f"torch {old.torch} -> {new.torch}")
    if old.python != new.python:
        out.append(f"python {old.python} -> {new.python}")
    changed = sorted(k for k in old.files.keys() & new.files.keys() if old.files[k] != new.files[k])
    added = sorted(new.files.keys() - old.files.keys())
    removed = sorted(old.files.keys() - new.files.keys())
    for what, names in (("changed", changed), ("added", added), ("removed", removed)):
        if names:
            shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
            out.append(f"{what}: {shown}")
    if not out and old.sha256 != new.sha256:
        out.append("the recorded fingerprint lists no files (written by an older dormouse)")
    return out
