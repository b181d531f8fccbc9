"""The kernels package depends on nothing in dormouse (issue 21: no import cycle between kernels/ and dormouse/).

``dormouse.ops.attnres`` imports the kernels' pure-torch parts (the score forms, the online-softmax merge) and, on
demand, the fused kernels; ``kernels/`` must import nothing from ``dormouse``. Checked on the source (every
import statement of every module), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

# the installed package's folder (kernels/ in the repository), found without importing it
KERNELS = Path(importlib.util.find_spec("dormouse_kernels").origin).parent


def imported_modules(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_the_kernels_import_nothing_from_dormouse():
    files = sorted(KERNELS.glob("*.py"))
    assert files, f"no modules under {KERNELS}"
    offending = {f.name: sorted(m for m in imported_modules(f) if m == "dormouse" or m.startswith("dormouse."))
                 for f in files}
    assert not any(offending.values()), f"kernels/ imports dormouse: {offending}"
