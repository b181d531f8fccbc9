"""A user's own preset file (``preset=./my.yaml``) and ``--cfg job`` (print the composed config, Hydra's flag)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.config.schema import ConfigError, compose_config

runner = CliRunner()


def _preset(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my.yaml"
    path.write_text(text)
    return path


def test_a_preset_file_composes_like_a_shipped_preset_and_the_command_line_wins(tmp_path: Path):
    path = _preset(tmp_path, "model:\n  d_model: 48\ntrain:\n  steps: 7\n  lr: 0.002\n")
    cfg = compose_config([f"preset={path}", "train.steps=9"])
    assert cfg.model.d_model == 48 and cfg.train.lr == 0.002  # from the file
    assert cfg.train.steps == 9  # the command line after the preset, as with conf/preset/*.yaml
    assert cfg.model.n_heads == compose_config([]).model.n_heads  # the rest: the schema's defaults


def test_a_relative_preset_path_and_the_package_header_both_work(tmp_path: Path, monkeypatch):
    _preset(tmp_path, "# @package _global_\ntrain:\n  steps: 5\n")
    monkeypatch.chdir(tmp_path)
    assert compose_config(["preset=./my.yaml"]).train.steps == 5


@pytest.mark.parametrize(("text", "message"), [
    (None, "no such file"),
    ("- a\n- b\n", "a mapping of config values"),
    ("model:\n  d_modl: 48\n", "d_modl"),
    ("train:\n  steps: many\n", "steps"),
])
def test_a_bad_preset_file_is_refused_naming_it(tmp_path: Path, text: str | None, message: str):
    path = tmp_path / "my.yaml" if text is None else _preset(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        compose_config([f"preset={path}"])
    result = runner.invoke(app, ["validate", f"preset={path}", f"run.dir={tmp_path / 'runs'}"])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_cfg_job_prints_the_composed_config_and_writes_nothing(tmp_path: Path):
    result = runner.invoke(app, ["train", "preset=tiny", "train.steps=3", f"run.dir={tmp_path}", "--cfg", "job"])
    assert result.exit_code == 0, result.output
    printed = OmegaConf.create(result.stdout)
    assert printed.train.steps == 3 and printed.model.d_model == 32  # tiny's
    assert not any(tmp_path.iterdir())
    assert runner.invoke(app, ["train", "--cfg", "hydra"]).exit_code == 2
