"""What a perturbation's red run depended on, and its fingerprint: the rule that lets CI re-run only what changed.

A perturbation's result (its gate went red, by how much, and restored green) is a function of what the run
read: the perturbed file, every other file of the repo that the gate run opened (its Python modules, their
YAML and JSON inputs), the perturbation itself and the torch it ran on. Everything else in the repo can
change without changing that result. So the runner records, with each result, the set of repo files its red
run opened, and the **fingerprint**: a SHA-256 over the perturbation, torch's and Python's versions and the
contents of those files. ``python -m tests.falsification --changed`` recomputes each fingerprint from the repo
as it is now and re-runs only the perturbations whose fingerprint moved (or that have no record): the others
would read exactly the bytes they read when they went red, so they would go red again by the same amount.

How the reads are seen: the temporary tree gets a ``sitecustomize.py`` (:data:`SITECUSTOMIZE`), which Python
imports at start-up from the tree on ``PYTHONPATH``, in the gate run and in every Python process that run
starts (a CLI run in a subprocess, a launcher's worker). It installs an audit hook (PEP 578) on the ``open``
event, raised for every ``open()`` and every import of a source file, and appends each opened path under
the tree to the file named by ``$FALSIFY_READS``. What a gate learns without opening a file is not seen:
a directory listing (a new file in a folder a gate globs) changes no fingerprint, which is why a full run
(no ``--changed``) remains the way to regenerate the whole record.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

READS_ENV = "FALSIFY_READS"  # the file each process of a gate run appends its opened paths to
TREE_ENV = "FALSIFY_TREE"  # the temporary tree whose files count

SITECUSTOMIZE = r'''
"""Written by tests/falsification/reads.py into a falsification tree: report every file opened under it."""
import os
import sys

_LOG = os.environ.get("FALSIFY_READS")
_TREE = os.environ.get("FALSIFY_TREE")
if _LOG and _TREE:
    _PREFIX = os.path.normpath(_TREE) + os.sep
    _SEEN = set()

    def _falsify_reads_hook(event, args):
        if event != "open" or not args or isinstance(args[0], int) or args[0] is None:
            return
        try:
            path = os.fsdecode(args[0])
        except TypeError:
            return
        path = os.path.normpath(os.path.join(os.getcwd(), path)) if not os.path.isabs(path) \
            else os.path.normpath(path)
        if path.startswith(_PREFIX) and path not in _SEEN:
            _SEEN.add(path)
            with open(_LOG, "a") as log:  # the log lies outside the tree, so this open is not recorded
                log.write(path[len(_PREFIX):] + "\n")

    sys.addaudithook(_falsify_reads_hook)
'''

# Files the runner itself writes: reading them never decides a gate, and counting them would make every
# recording change every fingerprint that read them.
NOT_DEPENDENCIES: frozenset[str] = frozenset({"tests/falsification/record.json", "docs/falsification.md"})


def environment() -> dict[str, str]:
    """What the run computed with, beyond the repo: a new torch can move a gate's numbers."""
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "absent"
    return {"torch": torch, "python": ".".join(platform.python_version_tuple()[:2])}


def repo_paths(tree_relative: list[str], layout: dict[str, str], root: Path) -> list[str]:
    """The repo files behind the tree-relative paths a run opened (tree layout -> repo layout), sorted.

    ``layout`` maps a repo folder to its place in the tree (``conf`` -> ``dormouse/conf``); the longest tree
    prefix wins, so ``dormouse/conf/x`` is ``conf/x``, not ``dormouse/conf/x``. Paths that are not copies of a
    repo file (what the run wrote, the tree's own sitecustomize.py) are dropped."""
    by_prefix = sorted(((tree, repo) for repo, tree in layout.items()), key=lambda kv: -len(kv[0]))
    out: set[str] = set()
    for rel in tree_relative:
        repo_rel = rel
        for tree, repo in by_prefix:
            if rel.startswith(tree + "/"):
                repo_rel = repo + rel[len(tree):]
                break
        if repo_rel not in NOT_DEPENDENCIES and (root / repo_rel).is_file():
            out.add(repo_rel)
    return sorted(out)


def fingerprint(perturbation: dict[str, Any], files: list[str], read: Callable[[str], bytes | None],
                env: dict[str, str]) -> str:
    """SHA-256 over the perturbation, ``env`` and the contents ``read`` gives for ``files`` and the perturbed file
    (unperturbed; None, a file that is gone, counts as such)."""
    h = hashlib.sha256()
    keys = ("name", "file", "function", "old", "new", "gates")
    h.update(json.dumps({k: perturbation[k] for k in keys}, sort_keys=True).encode())
    h.update(json.dumps(env, sort_keys=True).encode())
    for rel in sorted(set(files) | {perturbation["file"]}):
        data = read(rel)
        digest = "missing" if data is None else hashlib.sha256(data).hexdigest()
        h.update(f"\n{rel}\0{digest}".encode())
    return h.hexdigest()
