"""Arms from outside the package (dormouse/arms/plugins.py): a plugin file, a module, an installed
distribution's entry point and DORMOUSE_PLUGINS each register their arms; a plugin that cannot be used is
refused in one line that names it, leaving nothing half-registered; what a run records loads it again."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from dormouse.arms import plugins
from dormouse.arms.plugins import PluginError, activate, load_plugin, load_recorded, records_for
from dormouse.arms.registry import UnknownArmError, arm_classes, model_arm
from dormouse.cli.exits import plugins_first
from dormouse.config.schema import ConfigError, load_config
from tests.helpers.plugin_files import arm_source, forget_plugins, write_plugin_file, write_plugin_package

pytestmark = pytest.mark.usefixtures("forget_plugins")
__all__ = ["forget_plugins"]


def test_a_plugin_file_registers_its_arm_with_switch_and_options(tmp_path: Path) -> None:
    path = write_plugin_file(tmp_path, "pf_arms", "pfgate")
    plugin = load_plugin(str(path))
    assert plugin.arms == ("pfgate",) and plugin.module == "pf_arms" and plugin.file == str(path.resolve())
    assert list(arm_classes())[-1] == "pfgate"
    cfg = load_config(["preset=tiny", "model.use_pfgate=true", "model.pfgate.init=1.5"])
    assert model_arm(cfg.model) == "pfgate" and cfg.model.pfgate.init == 1.5
    with pytest.raises(ConfigError, match=r"model\.pfgate\.init=25\.0 is invalid"):
        load_config(["preset=tiny", "model.use_pfgate=true", "model.pfgate.init=25"])
    with pytest.raises(ConfigError, match="use_gr"):  # two switches on, as for built-in arms
        load_config(["preset=tiny", "model.use_pfgate=true", "model.use_gr=true"])


def test_a_plugin_is_loaded_once_however_often_it_is_named(tmp_path: Path) -> None:
    path = write_plugin_file(tmp_path, "once_arms", "oncegate")
    first = load_plugin(str(path))
    again = load_plugin(os.path.relpath(path), base=None)
    assert again is first and list(arm_classes()).count("oncegate") == 1
    assert os.environ[plugins.ENV_VAR].split(os.pathsep).count(str(path.resolve())) == 1


def test_a_plugin_module_on_the_path_loads_by_name(tmp_path: Path) -> None:
    write_plugin_file(tmp_path, "mod_arms", "modgate")
    sys.path.insert(0, str(tmp_path))
    assert load_plugin("mod_arms").arms == ("modgate",)


def test_an_entry_point_of_an_installed_distribution_registers_its_arm(tmp_path: Path) -> None:
    write_plugin_package(tmp_path, "ep_pkg", "epgate", dist="dormouse-ep-arms")
    sys.path.insert(0, str(tmp_path))
    loaded = activate()
    plugin = next(p for p in loaded if p.module == "ep_pkg.arms")
    assert plugin.arms == ("epgate",) and "dormouse-ep-arms" in plugin.origin
    assert plugin.file == str((tmp_path / "ep_pkg" / "arms.py").resolve())


def test_dormouse_plugins_in_the_environment_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write_plugin_file(tmp_path, "env_a", "envagate")
    b = write_plugin_file(tmp_path, "env_b", "envbgate")
    monkeypatch.setenv(plugins.ENV_VAR, os.pathsep.join([str(a), str(b)]))
    activate()
    assert {"envagate", "envbgate"} <= set(arm_classes())


@pytest.mark.parametrize(("source", "words"), [
    (None, "no such file"),
    ("import not_a_module_anywhere\n", "failed to import: ModuleNotFoundError"),
    ("x = 1\n", "defines no arm"),
    ("raise RuntimeError('boom')\n", "failed to import: RuntimeError: boom"),
])
def test_a_bad_plugin_is_refused_in_one_line_naming_it(tmp_path: Path, source: str | None, words: str) -> None:
    path = tmp_path / "bad_arms.py"
    if source is not None:
        path.write_text(source)
    before = set(arm_classes())
    with pytest.raises(PluginError) as info:
        load_plugin(str(path))
    assert words in str(info.value) and "bad_arms.py" in str(info.value) and "\n" not in str(info.value)
    assert set(arm_classes()) == before


def test_a_plugin_that_fails_after_defining_an_arm_leaves_no_arm_behind(tmp_path: Path) -> None:
    path = tmp_path / "half_arms.py"
    path.write_text(arm_source("halfgate") + "\nraise ImportError('a dependency is missing')\n")
    with pytest.raises(PluginError, match="half_arms.py.*ImportError: a dependency is missing"):
        load_plugin(str(path))
    assert "halfgate" not in arm_classes() and "half_arms" not in sys.modules


def test_a_plugin_arm_whose_name_clashes_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "clash_arms.py"
    path.write_text(arm_source("gr"))  # the built-in GR's name
    with pytest.raises(PluginError, match=r"clash_arms\.py.*'gr', which is taken by dormouse's built-in arm 'gr'"):
        load_plugin(str(path))
    assert arm_classes()["gr"].__module__ == "dormouse.arms.gr"


def test_a_file_whose_module_name_is_taken_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "json.py"  # the standard library's json
    path.write_text(arm_source("jsongate"))
    with pytest.raises(PluginError, match="module name 'json' is already taken"):
        load_plugin(str(path))


def test_a_run_records_its_plugin_and_a_reader_loads_it_again(tmp_path: Path) -> None:
    path = write_plugin_file(tmp_path, "rec_arms", "recgate")
    load_plugin(str(path))
    records = records_for("recgate")
    sha256sum = hashlib.sha256(path.read_bytes()).hexdigest()  # what `sha256sum rec_arms.py` prints
    assert records == [{"module": "rec_arms", "file": str(path.resolve()), "sha256": sha256sum}]
    assert records_for("gr") == []
    # another process: nothing loaded yet
    del plugins._LOADED["rec_arms"]
    from dormouse.arms.registry import unregister_arm

    unregister_arm("recgate")
    del sys.modules["rec_arms"]
    assert load_recorded(records, "run X") == []
    assert "recgate" in arm_classes()


def test_a_recorded_plugin_that_is_gone_is_refused_naming_it() -> None:
    gone = [{"module": "gone_arms", "file": "/nowhere/gone_arms.py", "sha256": "0" * 64}]
    with pytest.raises(PluginError, match=r"run X used plugin gone_arms \(file /nowhere/gone_arms.py\)"):
        load_recorded(gone, "run X")


def test_a_recorded_plugin_whose_source_changed_is_named(tmp_path: Path) -> None:
    path = write_plugin_file(tmp_path, "chg_arms", "chggate")
    load_plugin(str(path))
    records = [{**records_for("chggate")[0], "sha256": "f" * 64}]
    notes = load_recorded(records, "run X")
    assert len(notes) == 1 and "chg_arms" in notes[0] and "ffffffffffff" in notes[0]


def test_a_switch_for_an_arm_no_code_defines_is_refused_not_read_as_the_default() -> None:
    from omegaconf import OmegaConf

    saved = OmegaConf.create({"use_gr": False, "use_nosuchgate": True, "d_model": 8})
    with pytest.raises(UnknownArmError, match=r"model\.use_nosuchgate=true selects arm 'nosuchgate'"):
        model_arm(saved)
    assert model_arm(OmegaConf.create({"use_gr": False, "use_nosuchgate": False})) != "nosuchgate"


@pytest.mark.parametrize(("argv", "expected"), [
    (["train", "a=1", "--plugin", "x.py"], ["--plugin", "x.py", "train", "a=1"]),
    (["ab", "--plugin=m", "s", "--plugin", "y.py", "--jobs", "2"],
     ["--plugin=m", "--plugin", "y.py", "ab", "s", "--jobs", "2"]),
    (["--plugin", "x.py", "train"], ["--plugin", "x.py", "train"]),
    (["train", "--", "--plugin", "x.py"], ["train", "--", "--plugin", "x.py"]),
])
def test_plugin_options_anywhere_on_the_line_move_in_front_of_the_command(argv: list[str],
                                                                         expected: list[str]) -> None:
    assert plugins_first(argv) == expected


def _documented_package_recipe() -> str:
    """The shell line docs/arms.md gives for a package plugin's sha256 (run in the package's folder)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "arms.md").read_text()
    (line,) = [ln.strip() for ln in doc.splitlines() if ln.strip().startswith("find . -name '*.py'")]
    return line


def test_a_plugins_recorded_sha256_is_what_the_documented_standard_tools_print(tmp_path: Path) -> None:
    """The sha256 a run records and a refusal quotes is checkable without dormouse: ``sha256sum`` of a file
    plugin; for a package (a subpackage included), docs/arms.md's recipe, run in its folder."""
    import subprocess

    path = write_plugin_file(tmp_path, "sum_arms", "sumgate")
    printed = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout
    assert load_plugin(str(path)).sha256 == printed.split()[0]
    package = tmp_path / "site" / "sum_pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "helpers.py").write_text("K = 3\n")
    (package / "arms.py").write_text(arm_source("sumpkg"))
    sys.path.insert(0, str(tmp_path / "site"))
    plugin = load_plugin("sum_pkg.arms")
    printed = subprocess.run(["bash", "-c", _documented_package_recipe()], cwd=package, capture_output=True,
                             text=True, check=True).stdout
    assert plugin.sha256 == printed.split()[0]


def test_a_config_read_beside_a_plugin_whose_option_default_fails_names_the_default(tmp_path: Path) -> None:
    """A plugin loaded past the CLI's load check (a registration's ``plugins:``, a run's record): a config is
    refused naming the plugin's default, not as a value the user typed."""
    path = write_plugin_file(tmp_path, "bad_default_arms", "bdfgate")
    path.write_text(path.read_text().replace("init: float = 0.0", "init: float = 25.0"))
    load_plugin(str(path))
    with pytest.raises(ConfigError) as info:
        load_config(["preset=tiny"])
    assert info.value.lines == [
        "the default of plugin bad_default_arms's option model.bdfgate.init is invalid (model.bdfgate.init=25.0 is "
        f"invalid: must be within (-20, 20)): change the default in {path.resolve()}"]


def test_an_arm_installed_as_the_module_its_file_is_named_after_is_that_file(tmp_path: Path) -> None:
    """The package installs the researcher's ``hwmod.py`` as the top-level module ``hwmod`` (same bytes): the
    file named again (--plugin, a run's record) is the installed plugin, not a module name taken."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "hwmod.py").write_text(arm_source("hwmodgate"))
    info = site / "dormouse_hwmod-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dormouse-hwmod\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\nhwmodgate = hwmod\n")
    sys.path.insert(0, str(site))
    installed = next(p for p in activate() if p.module == "hwmod")
    assert load_plugin(str(write_plugin_file(tmp_path / "work", "hwmod", "hwmodgate"))) is installed
