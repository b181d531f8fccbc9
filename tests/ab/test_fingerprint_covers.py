"""What the code fingerprint covers (dormouse/ab/comparison/fingerprint.py): every source that computes a run, and
nothing that does not.

A comparison refuses to add a run computed by other code, and the fingerprint is how it knows: a source left
out of it is a source whose edit joins a resumed comparison unseen. Each test here changes just one thing --
one file of one tree (read as other bytes through ``Path.read_bytes``, which the fingerprint reads with), a
loaded plugin's file, the torch or the Python version -- and asserts the fingerprint moves, so leaving any one
of them out turns a test red. The package's trees are enumerated from its folder, so a new subpackage or
loose module is covered without an edit here, or named by the test that fails. What the docstring argues is
not part of a run (``dormouse/ab/``, the registrations ``conf/ab/`` and the launchers ``conf/launcher/``) must
not move it: editing the comparison machinery must not invalidate a running comparison.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

import dormouse
import dormouse_kernels
from dormouse import data
from dormouse.ab.comparison import fingerprint
from dormouse.arms import plugins
from tests.helpers.plugin_files import arm_source, forget_plugins, write_plugin_file

PACKAGE = Path(dormouse.__file__).resolve().parent
CONF = fingerprint.conf_dir()
NOT_A_RUN = {"ab"}  # the comparison machinery (see dormouse/ab/comparison/fingerprint.py)
CONF_NOT_A_RUN = {"ab", "launcher"}  # registrations and launchers
__all__ = ["forget_plugins"]


def _sources(root: Path, pattern: str) -> list[Path]:
    return sorted(p for p in root.rglob(pattern) if "__pycache__" not in p.parts)


def package_trees() -> list[str]:
    """Every subpackage and loose module of ``dormouse/`` but ``ab/`` (and the conf tree where a wheel installs
    it inside the package: it is covered as ``conf/``)."""
    return [entry.name for entry in sorted(PACKAGE.iterdir())
            if entry.name not in NOT_A_RUN and entry.name != "__pycache__" and entry.resolve() != CONF
            and (entry.is_dir() or entry.suffix == ".py")]


def conf_trees() -> list[str]:
    """Every config folder and top-level ``*.yaml`` of the conf tree but the registrations and launchers."""
    return [entry.name for entry in sorted(CONF.iterdir())
            if entry.name not in CONF_NOT_A_RUN and entry.name != "__pycache__"
            and (entry.is_dir() or entry.suffix == ".yaml")]


def one_file(tree: Path, pattern: str) -> Path:
    """A representative file of ``tree`` (the tree itself when it is a file)."""
    if tree.is_file():
        return tree
    files = _sources(tree, pattern)
    assert files, f"{tree} has no {pattern} file: say in dormouse/ab/comparison/fingerprint.py how it computes a run"
    return files[0]


def read_as_edited(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    """From now on ``target`` reads as other bytes (through ``Path.read_bytes``); every other file as it is."""
    real = Path.read_bytes
    target = target.resolve()

    def read_bytes(self: Path) -> bytes:
        content = real(self)
        return content + b"\n# edited\n" if self.resolve() == target else content

    monkeypatch.setattr(Path, "read_bytes", read_bytes)


def moves_fingerprint(monkeypatch: pytest.MonkeyPatch, target: Path) -> bool:
    before = fingerprint.compute().sha256
    read_as_edited(monkeypatch, target)
    return fingerprint.compute().sha256 != before


@pytest.mark.parametrize("tree", package_trees())
def test_every_source_tree_of_the_package_is_covered(tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert moves_fingerprint(monkeypatch, one_file(PACKAGE / tree, "*.py")), f"an edit of dormouse/{tree} is unseen"


def test_the_kernels_are_covered(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = Path(dormouse_kernels.__file__).resolve().parent
    for path in _sources(kernels, "*.py"):
        with monkeypatch.context() as patch:
            assert moves_fingerprint(patch, path), f"an edit of the kernels' {path.name} is unseen"


@pytest.mark.parametrize("tree", conf_trees())
def test_every_config_tree_is_covered(tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert moves_fingerprint(monkeypatch, one_file(CONF / tree, "*.yaml")), f"an edit of conf/{tree} is unseen"


def test_the_embedded_corpus_is_covered(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = PACKAGE / "corpus" / data._EMBEDDED_FILE  # the file a run with no data.path trains on
    assert corpus.is_file(), corpus
    assert moves_fingerprint(monkeypatch, corpus), f"an edit of the embedded corpus {corpus.name} is unseen"


@pytest.mark.parametrize(("tree", "pattern"), [(PACKAGE / "ab", "*.py"), (CONF / "ab", "*.yaml"),
                                               (CONF / "launcher", "*.yaml")],
                         ids=["dormouse/ab", "conf/ab", "conf/launcher"])
def test_the_comparison_machinery_registrations_and_launchers_are_not_covered(
        tree: Path, pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not moves_fingerprint(monkeypatch, one_file(tree, pattern))


def test_the_torch_version_is_covered(monkeypatch: pytest.MonkeyPatch) -> None:
    before = fingerprint.compute()
    monkeypatch.setattr(torch, "__version__", "0.0.0+other")
    after = fingerprint.compute()
    assert after.sha256 != before.sha256
    assert fingerprint.differences(before, after) == [f"torch {before.torch} -> 0.0.0+other"]


def test_the_python_version_is_covered(monkeypatch: pytest.MonkeyPatch) -> None:
    before = fingerprint.compute()
    monkeypatch.setattr(platform, "python_version", lambda: "3.0.0")
    after = fingerprint.compute()
    assert after.sha256 != before.sha256
    assert fingerprint.differences(before, after) == [f"python {before.python} -> 3.0.0"]


# --- loaded plugins (loaded from a temporary folder, forgotten afterwards: tests/helpers/plugin_files.py) -------


@pytest.mark.usefixtures("forget_plugins")
def test_a_loaded_plugin_file_is_covered_and_an_edit_since_loading_is_named(tmp_path: Path) -> None:
    """A plugin arm's source computes its runs; the fingerprint reads it when computed, not as it was loaded."""
    without = fingerprint.compute()
    source = Path(plugins.load_plugin(str(write_plugin_file(tmp_path, "fp_file_plugin", "fp_file")), "test").file)
    loaded = fingerprint.compute()
    assert fingerprint.differences(without, loaded) == ["added: plugin/fp_file_plugin/fp_file_plugin.py"]
    source.write_text(source.read_text() + "# tuned\n")
    edited = fingerprint.compute()
    assert edited.sha256 != loaded.sha256
    assert fingerprint.differences(loaded, edited) == ["changed: plugin/fp_file_plugin/fp_file_plugin.py"]
    source.unlink()  # gone since it was loaded: said, not a crash
    assert fingerprint.differences(edited, fingerprint.compute()) == [
        "removed: plugin/fp_file_plugin/fp_file_plugin.py"]


@pytest.mark.usefixtures("forget_plugins")
def test_every_source_file_of_a_package_plugin_is_covered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "fp_pkg_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("from fp_pkg_plugin import gate  # noqa: F401\n")
    (package / "gate.py").write_text(arm_source("fp_pkg"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugins.load_plugin("fp_pkg_plugin", "test").arms == ("fp_pkg",)
    before = fingerprint.compute()
    (package / "gate.py").write_text(arm_source("fp_pkg") + "# tuned\n")
    assert fingerprint.differences(before, fingerprint.compute()) == ["changed: plugin/fp_pkg_plugin/gate.py"]


@pytest.mark.usefixtures("forget_plugins")
def test_an_edit_anywhere_in_a_packaged_plugins_package_is_covered(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point names a module inside a package (``pkg.arms``); the arm may use any module of the package,
    a subpackage's included, so an edit in any of them is a change of the plugin, seen and recorded."""
    package = tmp_path / "fp_sub_plugin"
    (package / "gates").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "gates" / "__init__.py").write_text("")
    (package / "gates" / "shape.py").write_text("SCALE = 1.0\n")
    (package / "arms.py").write_text(arm_source("fp_sub"))
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = plugins.load_plugin("fp_sub_plugin.arms", "test")
    before = fingerprint.compute()
    (package / "gates" / "shape.py").write_text("SCALE = 2.0\n")
    assert fingerprint.differences(before, fingerprint.compute()) == [
        "changed: plugin/fp_sub_plugin.arms/gates/shape.py"]
    assert plugins.source_sha256(plugin.module, Path(plugin.file)) != plugin.sha256
