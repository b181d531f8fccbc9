"""`dormouse ab NAME`: a mistyped name or a missing file is told what it is: a path is a path, not "not a plain
name"; a near-miss name gets the closest registered names (difflib)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormouse.ab.comparison.registry import ABSpecError, load_spec
from dormouse.cli.app import app

runner = CliRunner()


def _refusal(name: str) -> str:
    with pytest.raises(ABSpecError) as err:
        load_spec(name)
    return "\n".join(err.value.lines)


def test_a_missing_registration_file_is_said_to_be_a_missing_file_not_a_bad_name(tmp_path: Path) -> None:
    msg = _refusal("/nonexist/x.yaml")
    assert "registration file /nonexist/x.yaml does not exist" in msg and "plain name" not in msg, msg
    assert "smoke" in msg and "conf/ab" in msg, msg  # what a name would be
    result = runner.invoke(app, ["ab", "/nonexist/x.yaml", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "does not exist" in result.output, result.output


def test_a_folder_or_a_non_yaml_file_given_as_a_registration_is_named_as_such(tmp_path: Path) -> None:
    assert "is a folder" in _refusal(str(tmp_path) + "/")
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert f"registration file {other} is not a .yaml file" in _refusal(str(other))


def test_a_mistyped_comparison_name_gets_the_closest_registered_names(tmp_path: Path) -> None:
    assert "did you mean smoke?" in _refusal("smok")
    assert "did you mean residual" in _refusal("residul")
    far = _refusal("zzzz")
    assert "did you mean" not in far and re.search(r"registered: .*\bresidual\b", far), far
    result = runner.invoke(app, ["ab", "smok", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "did you mean smoke?" in result.output, result.output


def test_a_registration_given_by_path_is_named_again_by_its_path(tmp_path: Path) -> None:
    """The rerun hint and the report's footer name a comparison the way ``dormouse ab`` was given it: a
    file's path (quoted for a shell) when given by path, the name when given by name."""
    from tests.flows.test_ab import SPEC

    path = tmp_path / "my comps" / "t.yaml"
    path.parent.mkdir()
    path.write_text(SPEC)
    assert load_spec(str(path)).argument == f"'{path}'"
    (tmp_path / "reg").mkdir()
    (tmp_path / "reg" / "t.yaml").write_text(SPEC)
    assert load_spec("t", tmp_path / "reg").argument == "t"
    assert load_spec("smoke").argument == "smoke"
