"""The code explains itself at the density of the field's best codebases, and history stays in `git log`.

Docstring lines are counted with ``ast`` (module, class and function docstrings, first line to last) over every
line of every module of the package; nanoGPT, torchtitan and lm-evaluation-harness sit at 6-8 %, so 10 % leaves
room for the equations an arm cites. An issue number in code or tests points at a tracker the reader may not
have; the commit that made a change says why.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dormouse"
MAX_DOCSTRING_SHARE = 0.10
# a tracker reference ("iss" "ue 25", "#7" too), spelled in parts so that this file does not match itself
TRACKER_REFERENCE = re.compile(r"\b" + "iss" + r"ues?\s+#?\d+", re.IGNORECASE)


def docstring_lines(source: str) -> int:
    """Lines inside the docstrings of a module's module, classes and functions."""
    total = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                total += first.end_lineno - first.lineno + 1
    return total


def docstring_share(package: Path) -> tuple[int, int]:
    """(docstring lines, all lines) over the package's modules."""
    sources = [p.read_text() for p in sorted(package.rglob("*.py"))]
    return sum(map(docstring_lines, sources)), sum(len(s.splitlines()) for s in sources)


def test_docstrings_are_at_most_a_tenth_of_the_package() -> None:
    docs, lines = docstring_share(PACKAGE)
    assert lines > 1000, f"found only {lines} lines under {PACKAGE}"
    assert docs / lines <= MAX_DOCSTRING_SHARE, (
        f"docstrings are {docs}/{lines} = {docs / lines:.1%} of dormouse/, over {MAX_DOCSTRING_SHARE:.0%}: say what "
        "and why in a few lines")


def test_the_share_counts_multi_line_docstrings_of_every_kind() -> None:
    source = ('"""Module.\n\nMore."""\n\n\nclass A:\n    """One."""\n\n'
              '    def f(self):\n        """Two\n        lines."""\n')
    assert docstring_lines(source) == 3 + 1 + 2


def test_no_code_or_test_cites_an_issue_number() -> None:
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for folder in ("dormouse", "tests") for path in sorted((ROOT / folder).rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if TRACKER_REFERENCE.search(line)]
    assert not hits, "issue numbers in code or tests (git log holds history):\n" + "\n".join(hits[:20])
