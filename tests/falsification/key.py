"""Key perturbations to the definition they perturb: ``python -m tests.falsification.key [--write] [FILE ...]``.

For every perturbation without a ``function`` key, the key is computed from its text patch: the innermost
def/class/constant of ``file`` whose source holds the one occurrence of ``old`` (``<file>`` for a file that is
not Python). With ``--write`` it is added by a text edit of the perturbation file: one line
``"function": "Qual.name",`` right after the ``"file": ...`` line, at that line's indentation, so comments and
layout stay as they are (a dict written on one line gets the entry inline, after ``"file"``'s value). A
perturbation that already has a key is verified (its pattern must occur exactly once inside that definition);
``--rekey`` replaces a key that no longer verifies when ``old`` occurs exactly once in the file as written.

Re-runnable and idempotent: a second run changes nothing. It works on perturbation files in the old format
(no ``function``) and in any location, e.g. ``python -m tests.falsification.key --write
scripts/perturbations_*.py``; without FILE it keys tests/falsification/perturbations_*.py. Exit status 1 when
a perturbation is left unkeyed, or stale, or cannot be keyed.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .locate import StalePerturbation, key_for, locate
from .runner import HOME, ROOT, read_perturbations


@dataclass(frozen=True)
class Edit:
    """Replace bytes [start, end) of the perturbation file by ``text``."""

    start: int
    end: int
    text: bytes


def _dict_nodes(source: str) -> dict[str, ast.Dict]:
    """Every dict literal of the perturbation file that has a literal ``"name"``, by that name."""
    found: dict[str, ast.Dict] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Dict):
            continue
        for k, v in zip(node.keys, node.values):
            if isinstance(k, ast.Constant) and k.value == "name" and isinstance(v, ast.Constant):
                found[str(v.value)] = node
    return found


def _entry(node: ast.Dict, key: str) -> tuple[ast.expr, ast.expr] | None:
    for k, v in zip(node.keys, node.values):
        if isinstance(k, ast.Constant) and k.value == key:
            return k, v
    return None


def _line_offsets(data: bytes) -> list[int]:
    return [0, *(m.end() for m in re.finditer(b"\n", data))]


def insert_key(data: bytes, node: ast.Dict, function: str) -> Edit:
    """The edit that adds ``"function": ...`` after the dict's ``"file"`` entry."""
    entry = _entry(node, "file")
    if entry is None:
        raise ValueError('no "file" entry to key')
    key, value = entry
    lines = _line_offsets(data)
    end_line = value.end_lineno or value.lineno
    at = lines[end_line - 1] + (value.end_col_offset or 0)  # ast columns are UTF-8 byte offsets
    line_end = lines[end_line] if end_line < len(lines) else len(data)
    rest = data[at:line_end]
    literal = f'"function": {json.dumps(function)},'.encode()
    if re.fullmatch(rb"\s*,\s*(#.*)?\n?", rest):  # "file" ends its line: a line of its own after it
        return Edit(line_end, line_end, b" " * key.col_offset + literal + b"\n")
    comma = re.match(rb"\s*,", rest)
    if comma:  # a dict written on one line: inline, after the comma
        return Edit(at + comma.end(), at + comma.end(), b" " + literal)
    return Edit(at, at, b", " + literal[:-1])  # "file" is the last entry


def replace_key(data: bytes, node: ast.Dict, function: str) -> Edit:
    """The edit that replaces the value of the dict's ``"function"`` entry (a one-line string literal)."""
    entry = _entry(node, "function")
    assert entry is not None
    value = entry[1]
    if not isinstance(value, ast.Constant) or value.end_lineno != value.lineno:
        raise ValueError('"function" is not a one-line string literal: edit it by hand')
    start = _line_offsets(data)[value.lineno - 1]
    return Edit(start + value.col_offset, start + (value.end_col_offset or 0), json.dumps(function).encode())


def _target(p: dict[str, Any]) -> str:
    path = ROOT / p["file"]
    if not path.is_file():
        raise StalePerturbation(f"{p['file']} does not exist")
    return path.read_text()


def plan(p: dict[str, Any], node: ast.Dict | None, data: bytes, rekey: bool) -> tuple[str, Edit | None]:
    """What to do for perturbation ``p``: a one-line verdict, and the edit (None: nothing to write)."""
    if node is None:
        return "ERROR no dict literal with this literal name: key it by hand", None
    try:
        text = _target(p)
        if "function" in p:
            try:
                locate(text, p["function"], p["old"], p["file"])
                return f"ok {p['function']}", None
            except StalePerturbation as e:
                if not rekey:
                    return f"STALE {e}", None
                function = key_for(text, p["old"], p["file"], p["file"].endswith(".py"))
                return f"rekey {p['function']} -> {function}", replace_key(data, node, function)
        function = key_for(text, p["old"], p["file"], p["file"].endswith(".py"))
        return f"key {function}", insert_key(data, node, function)
    except (StalePerturbation, ValueError) as e:
        return f"ERROR {e}", None


def key_file(path: Path, write: bool, rekey: bool, quiet: bool = False) -> tuple[int, int]:
    """Key (or check) one perturbation file; print a line per perturbation (``quiet``: per problem only);
    return (edits, problems)."""
    data = path.read_bytes()
    try:
        perts = read_perturbations(path)
        nodes = _dict_nodes(data.decode())
    except Exception as e:  # one broken file must not hide the others
        print(f"{path.name}: cannot load ({type(e).__name__}: {e})")
        return 0, 1
    edits: list[Edit] = []
    problems = 0
    for p in perts:
        verdict, edit = plan(p, nodes.get(p.get("name", "")), data, rekey)
        problem = verdict.startswith(("ERROR", "STALE")) or (edit is not None and not write)
        problems += problem
        if edit is not None:
            edits.append(edit)
        if problem or not quiet:
            print(f"{path.name}: {p.get('name')}: {verdict}" + ("" if edit is None or write else " (not written)"))
    if write and edits:
        for edit in sorted(edits, key=lambda e: e.start, reverse=True):
            data = data[: edit.start] + edit.text + data[edit.end :]
        path.write_bytes(data)
    return len(edits), problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.falsification.key",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, metavar="FILE",
                    help="perturbation files (default: tests/falsification/perturbations_*.py)")
    ap.add_argument("--write", action="store_true", help="write the missing keys into the files")
    ap.add_argument("--rekey", action="store_true", help="with --write: replace keys that no longer verify")
    args = ap.parse_args(argv)
    files = args.files or sorted(HOME.glob("perturbations_*.py"))
    if not files:
        print("no perturbation files", file=sys.stderr)
        return 1
    edits = problems = 0
    for path in files:
        e, p = key_file(path, args.write, args.rekey)
        edits, problems = edits + e, problems + p
    if args.write and edits:  # what was written must load and verify: count the problems left after writing
        problems = sum(key_file(path, write=False, rekey=False, quiet=True)[1] for path in files)
    action = "written" if args.write else "to write (run with --write)"
    print(f"{edits} key(s) {action}; {problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
