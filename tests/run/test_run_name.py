"""A run name is a folder inside run.dir: one that would leave it (or be it) is refused, naming run.name,
before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.config.schema import ConfigError, load_config

runner = CliRunner()


@pytest.mark.parametrize("name", ["../escape", "a/../../escape", "/tmp/escape", ".", "''"])
def test_a_run_name_that_leaves_the_run_root_is_refused_naming_the_field(tmp_path: Path, name: str):
    root = tmp_path / "runs" / "inner"
    result = runner.invoke(app, ["train", "preset=tiny", f"run.dir={root}", f"run.name={name}"])
    assert result.exit_code == 2, result.output
    assert "run.name=" in result.output and "inside run.dir" in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escape").exists()


def test_a_run_name_with_sub_folders_inside_the_run_root_is_accepted(tmp_path: Path):
    try:
        cfg = load_config(["preset=tiny", f"run.dir={tmp_path}", "run.name=sweep/lr-1e-3"])
    except ConfigError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(str(exc.lines))
    assert cfg.run.name == "sweep/lr-1e-3"


def test_full_and_block_attnres_get_different_default_run_names(tmp_path: Path):
    from dormouse.train.start import default_run_name

    full = load_config(["preset=tiny", "model.use_attnres=true"])
    block = load_config(["preset=tiny", "model.use_attnres=true", "model.attnres.block_size=2"])
    assert default_run_name(full, started="T") == "attnres-T"
    assert default_run_name(block, started="T") == "attnres_block2-T"
    assert default_run_name(load_config(["preset=tiny"]), started="T") == "rezero-T"
    shown = runner.invoke(app, ["validate", "preset=tiny", "model.use_attnres=true", "model.attnres.block_size=2",
                                f"run.dir={tmp_path}"])
    assert shown.exit_code == 0 and f"run directory: {tmp_path}/attnres_block2-<start time>" in shown.output
