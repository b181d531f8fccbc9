"""The falsification record on disk: ``tests/falsification/record.json``, one entry per perturbation that went red
and restored green, with the repo files its red run read and their fingerprint (tests/falsification/reads.py).

``python -m tests.falsification --record`` merges a run's results into it (a red, restored result replaces the
perturbation's entry; any other outcome removes it, so that the next ``--changed`` run tries it again; a
perturbation that no longer exists is dropped) and rewrites docs/falsification.md from it.
``python -m tests.falsification --changed`` reads it to choose what to re-run.

The file lists each read path once (``files``) and each entry's reads as indices into that list: 380
perturbations read ~100 files each, mostly the same ones.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .reads import fingerprint

HOME = Path(__file__).resolve().parent
RECORD = HOME / "record.json"
MARKDOWN = HOME.parents[1] / "docs" / "falsification.md"  # the record for a reader, written from RECORD
FORMAT = 1


def load(path: Path) -> dict[str, dict[str, Any]]:
    """Perturbation name -> its recorded entry (``reads`` as repo paths); {} when there is no record yet."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: format {data.get('format')!r}, this runner reads format {FORMAT}; "
                         f"regenerate it with a full run: python -m tests.falsification --record")
    files: list[str] = data["files"]
    return {name: {**entry, "reads": [files[k] for k in entry["reads"]]} for name, entry in data["results"].items()}


def save(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Write the record atomically (a temporary file in the same folder, then a rename)."""
    files = sorted({f for e in entries.values() for f in e["reads"]})
    index = {f: k for k, f in enumerate(files)}
    results = {name: {**e, "reads": [index[f] for f in e["reads"]]} for name, e in sorted(entries.items())}
    text = json.dumps({"format": FORMAT, "files": files, "results": results}, indent=1, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def current_bytes(root: Path):  # noqa: ANN201 - a reader for reads.fingerprint
    """Read a repo-relative file from ``root`` as it is now (None when it is gone)."""

    def read(rel: str) -> bytes | None:
        path = root / rel
        return path.read_bytes() if path.is_file() else None

    return read


def up_to_date(perturbation: dict[str, Any], entry: dict[str, Any] | None, root: Path, env: dict[str, str]) -> bool:
    """True when the recorded red run read exactly what a run now would: same perturbation, torch, bytes."""
    if entry is None or not entry.get("fingerprint"):
        return False
    return fingerprint(perturbation, entry["reads"], current_bytes(root), env) == entry["fingerprint"]


def merge(entries: dict[str, dict[str, Any]], results: list[dict[str, Any]], names: set[str]) -> dict[str, Any]:
    """The record after a run: ``results`` (Result dicts) update it, perturbations not in ``names`` leave it."""
    out = {name: e for name, e in entries.items() if name in names}
    for r in results:
        if r["status"] == "red" and r["restored"] is True and r.get("fingerprint"):
            out[r["name"]] = {k: v for k, v in r.items() if k != "imports"}
        else:
            out.pop(r["name"], None)
    return out
