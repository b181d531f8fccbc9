"""``dormouse arms`` lists what the registry holds, as the registry holds it: every arm in registry order (read
from the registry here, never a list written out), the default arm marked as the one without a switch, each
arm's options with their defaults, and a plugin's arm with the file it came from and how it was named."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dormouse.arms.registry import ARMS, arm_classes, default_arm
from dormouse.cli.app import app
from dormouse.cli.arms import arms_command
from tests.helpers.plugin_arms import plugins_forgotten

runner = CliRunner()

PLUGIN = '''"""A plugin for the listing test."""
from dataclasses import dataclass

from dormouse.arms.base import ResidualArm


@dataclass
class ListedOptions:
    width: int = 3
    mode: str = "wide"
    limit: float | None = None


class Listed(ResidualArm):
    """Listed: an arm that only needs to be listed."""

    name = "listed"
    options = ListedOptions
'''


@pytest.fixture
def plugin_file(tmp_path: Path):
    """A plugin file defining the arm ``listed`` (three options); forgotten after the test."""
    path = tmp_path / "listed_arm.py"
    path.write_text(PLUGIN)
    with plugins_forgotten():
        yield path


def arm_lines(output: str) -> dict[str, list[str]]:
    """The text form as {arm: [its line's fields..., then its option lines]}, in output order."""
    out: dict[str, list[str]] = {}
    for line in output.splitlines():
        if line.startswith("\t"):
            out[next(reversed(out))].append(line.strip())
        else:
            fields = line.split("\t")
            out[fields[0]] = fields[1:]
    return out


def test_arms_lists_every_registered_arm_in_registry_order_with_its_switch_options_and_source():
    result = runner.invoke(app, ["arms"])  # not a terminal: the text form
    assert result.exit_code == 0, result.output
    listed = arm_lines(result.output)
    assert list(listed) == list(ARMS)
    for name, cls in arm_classes().items():
        switch, source, description, *options = listed[name]
        assert switch == ("default (no switch)" if name == default_arm() else f"model.use_{name}")
        if cls.__module__.startswith("dormouse."):
            assert source == f"built-in ({cls.__module__})"
        else:  # an arm a plugin (DORMOUSE_PLUGINS) or a test defined in this process
            assert source.startswith(("plugin ", "module ")) and cls.__module__ in source
        assert description == cls.describe()
        fields = dataclasses.fields(cls.options) if cls.options else ()
        assert [o.partition("=")[0] for o in options] == [f"model.{name}.{f.name}" for f in fields]


def test_the_default_arm_is_the_one_marked_without_a_switch():
    result = runner.invoke(app, ["arms", "--format", "json"])
    assert result.exit_code == 0, result.output
    arms = json.loads(result.output)["arms"]
    assert [a["name"] for a in arms] == list(ARMS)
    (default,) = [a for a in arms if a["default"]]
    assert default["name"] == default_arm() and default["switch"] is None
    assert all(a["switch"] == f"model.use_{a['name']}" for a in arms if not a["default"])


def test_a_plugin_files_arm_is_listed_last_with_its_file_origin_and_option_defaults(plugin_file: Path):
    result = runner.invoke(app, ["arms", "--plugin", str(plugin_file)])  # --plugin after the command's name
    assert result.exit_code == 0, result.output
    listed = arm_lines(result.output)
    assert list(listed)[-1] == "listed" and list(listed)[:-1] == [a for a in ARMS if a != "listed"]
    assert listed["listed"] == ["model.use_listed", f"plugin listed_arm ({plugin_file}; --plugin)",
                                "Listed: an arm that only needs to be listed.",
                                "model.listed.width=3", "model.listed.mode=wide", "model.listed.limit=null"]
    doc = json.loads(runner.invoke(app, ["arms", "--format", "json"]).output)  # the plugin stays loaded
    (entry,) = [a for a in doc["arms"] if a["name"] == "listed"]
    assert entry["source"] == {"kind": "plugin", "module": "listed_arm", "file": str(plugin_file),
                               "origin": "--plugin"}
    assert entry["options"] == {"model.listed.width": 3, "model.listed.mode": "wide", "model.listed.limit": None}


def test_a_plugin_named_in_the_environment_is_listed_with_that_origin(plugin_file: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DORMOUSE_PLUGINS", str(plugin_file))
    result = runner.invoke(app, ["arms"])
    assert result.exit_code == 0, result.output
    assert arm_lines(result.output)["listed"][1] == f"plugin listed_arm ({plugin_file}; DORMOUSE_PLUGINS)"


def test_on_a_terminal_arms_is_a_table_and_an_unknown_format_is_refused():
    console = Console(force_terminal=True, width=200, color_system=None, record=True)
    assert arms_command(console) == 0
    table = console.export_text()
    assert "default (no switch)" in table and all(f" {name} " in table for name in ARMS)
    result = runner.invoke(app, ["arms", "--format", "yaml"])
    assert result.exit_code == 2 and "--format 'yaml': choose one of table, text, json" in result.output
