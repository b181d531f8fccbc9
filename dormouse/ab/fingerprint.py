"""What computes a run, as one comparable value: a comparison runs on one version of that code.

Re-running published pairs at a later commit moved single runs by 0.007-0.013 bpb (issue 22: fused
multiply-adds and a reordered AttnRes score change the last bits, and 2800 steps amplify them), the size of
a small effect. A sequential comparison resumes over days, so every pair records the fingerprint of the code
that trained it (:mod:`dormouse.ab.pairjob`), and the runner refuses to add a run computed by other code
(:func:`differences` says what differs) unless the user restarts the comparison.

The fingerprint hashes every source that computes a run:

- the package's ``*.py`` (every subpackage and loose module of ``dormouse/``) and the kernels' (``kernels/``,
  the ``dormouse_kernels`` package);
- the config files a run is composed from (``conf/**/*.yaml`` where the installed package has them,
  :func:`conf_dir`), except the registrations and launchers;
- the embedded corpus a run trains on;
- every plugin this process has loaded (:func:`dormouse.arms.plugins.loaded_plugins`), each of its source
  files as ``plugin/<module>/<path relative to the plugin>``: a plugin arm's code computes its runs as much
  as a built-in arm's does, and lives outside the package, so an edit to it would otherwise join a resumed
  comparison unseen. The files are read at :func:`compute` time, not taken from the sha256 recorded when
  the plugin was loaded, so an edit since then is seen, and :func:`differences` names the file;
- the versions of torch and Python.

``dormouse/ab/`` is left out: it plans, launches and reports, and what it hands a run is the run's composed
config, which the registration hash already binds. The git commit is recorded beside the fingerprint for
the report, but is not what is compared: uncommitted edits change what a run computes and the commit does
not see them (nor a plugin outside the repository).
"""

from __future__ import annotations

import hashlib
import importlib
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dormouse.arms.plugins import loaded_plugins, source_files

# Not part of what computes a run: the comparison machinery itself, the registrations and launchers.
_SKIP_PACKAGE = {"ab", "conf"}  # dormouse/conf is the conf/ tree, hashed as its own root
_SKIP_CONF = {"ab", "launcher"}


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
    """The conf tree runs are composed from, where the installed package has it: the ``dormouse.conf``
    package (Hydra's ``pkg://dormouse.conf``) is ``dormouse/conf`` in a wheel but the repository's top-level
    ``conf/`` in an editable install (pyproject's package-dir maps it). Looking for ``dormouse/conf`` beside
    the sources found nothing in an editable checkout, and the fingerprint silently left every config out.
    Raises ``RuntimeError`` when the tree has no ``config.yaml``."""
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
    """``plugin/<module>/<relative path> -> sha256`` of every loaded plugin's source files, read now. A file
    gone since the plugin was loaded is left out (:func:`differences` says it was removed)."""
    out: dict[str, str] = {}
    for plugin in loaded_plugins():
        module_file = Path(plugin.file)
        for path in source_files(module_file):
            if path.is_file():
                out[f"plugin/{plugin.module}/{path.relative_to(module_file.parent).as_posix()}"] = _digest(path)
    return out


def source_digests() -> dict[str, str]:
    """``label/relative/path -> sha256`` of every file that computes a run (see the module docstring)."""
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
