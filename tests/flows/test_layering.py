"""The import layering: the kernels depend on nothing in dormouse, and dormouse's layers import only downward.

The kernels package depends on nothing in dormouse (no import cycle between kernels/ and dormouse/).

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


# The layers of the dormouse package, bottom first: a module may import from its own layer and the layers below,
# never from one above (the README's "Layout"). Layers on one rank do not import each other.
LAYERS: dict[str, int] = {
    "errors": 0, "conf": 0,  # conf/ installs as dormouse.conf (YAML files and an empty __init__)
    "data": 1, "corpus": 1, "ops": 1,
    "arms": 2,
    "config": 3, "model": 3,
    "run": 4,
    "train": 5,
    "ab": 6,
    "cli": 7,
    "__main__": 8,
}
PACKAGE = Path(importlib.util.find_spec("dormouse").origin).parent


def layer_of(module: str) -> str:
    """``dormouse.train.loop`` -> ``train``; ``dormouse`` itself (its version) -> ``errors``' rank."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "errors"


def package_imports(path: Path) -> set[str]:
    """Every ``dormouse...`` module ``path`` imports, at any depth (a lazy import inside a function counts)."""
    return {m for m in imported_modules(path) if m == "dormouse" or m.startswith("dormouse.")}


def test_each_layer_imports_only_from_the_layers_below():
    files = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {f: ".".join(("dormouse", *f.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
               for f in files}
    unknown = sorted({layer_of(m) for m in modules.values()} - set(LAYERS))
    assert not unknown, f"modules outside the declared layers {sorted(LAYERS)}: {unknown}"
    upward = []
    for f, mod in modules.items():
        here = layer_of(mod)
        for target in package_imports(f):
            there = layer_of(target)
            if there != here and LAYERS[there] >= LAYERS[here]:
                upward.append(f"{mod} imports {target} ({there}, rank {LAYERS[there]} >= {here}'s {LAYERS[here]})")
    assert not upward, "imports that run up or sideways:\n" + "\n".join(sorted(upward))


def test_a_plain_comparison_reaches_nothing_of_the_study():
    """The engine of one comparison (its runner, at any import depth, lazy imports included) never reaches the
    study's modules: a study is built on comparisons, not the other way round."""
    seen, todo = set(), ["dormouse.ab.comparison.runner"]
    while todo:
        module = todo.pop()
        path = PACKAGE.joinpath(*module.split(".")[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if module in seen or not path.is_file():
            continue
        seen.add(module)
        todo.extend(package_imports(path))
    study = sorted(m for m in seen if m.startswith("dormouse.ab.study"))
    assert len(seen) > 10, f"the walk from dormouse.ab.comparison.runner found only {sorted(seen)}"
    assert not study, f"dormouse.ab.comparison.runner reaches the study's modules: {study}"


def test_the_ab_command_imports_the_study_only_for_a_study():
    """`dormouse ab NAME` asks the registry whether NAME is a study; the study's modules load only when it is."""
    import subprocess
    import sys

    code = ("import sys, dormouse.cli.app, dormouse.cli.ab, dormouse.ab.comparison.command, "
            "dormouse.ab.comparison.runner; "
            "print(sorted(m for m in sys.modules if m.startswith('dormouse.ab.study')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"the ab command imports the study's modules at start: {out}"
