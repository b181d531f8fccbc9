"""Sweeps the Hydra way: ``dormouse train -m`` expands with Hydra's sweeper, runs each setting in its own
process and run directory, and ``dormouse logs`` shows the sweep as one table."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.cli.sweep import expand

runner = CliRunner()
TINY = ["preset=tiny", "train.steps=2", "train.eval_every=2", "data.eval_bytes=256", "logging.progress=off"]
SENTENCE = "A sweep explores; a registered comparison decides"


def test_expand_is_hydras_cartesian_product_in_the_order_given():
    assert expand(["a.x=1,2", "b.y=3", "c.z=4,5"]) == [["a.x=1", "b.y=3", "c.z=4"], ["a.x=1", "b.y=3", "c.z=5"],
                                                        ["a.x=2", "b.y=3", "c.z=4"], ["a.x=2", "b.y=3", "c.z=5"]]


def test_multirun_trains_each_setting_in_its_own_run_and_logs_shows_one_table(tmp_path: Path):
    result = runner.invoke(app, ["train", "-m", *TINY, "train.lr=1e-3,3e-3", f"run.dir={tmp_path}", "run.name=s"])
    assert result.exit_code == 0, result.output
    lrs = [OmegaConf.load(tmp_path / "s" / job / "config.yaml").train.lr for job in ("0", "1")]
    assert lrs == [1e-3, 3e-3]
    sweep = yaml.safe_load((tmp_path / "s" / "sweep.yaml").read_text())
    assert sweep["swept"] == ["train.lr"] and [j["run"] for j in sweep["jobs"]] == ["s/0", "s/1"]
    shown = runner.invoke(app, ["logs", str(tmp_path / "s"), "--format", "table", "--check"])
    assert shown.exit_code == 0, shown.output
    table = shown.output.split("\n\n")[0]
    assert "sweep" in table and "train.lr" in table and "0.001" in table and "0.003" in table
    assert "2 run(s), no findings" in shown.output


def test_a_bad_setting_refuses_the_whole_sweep_before_any_run(tmp_path: Path):
    result = runner.invoke(app, ["train", "-m", *TINY, "model.d_model=32,33", f"run.dir={tmp_path}", "run.name=s"])
    assert result.exit_code == 2 and "sweep setting 1 (" in result.output and "model.d_model=33" in result.output
    assert not (tmp_path / "s").exists()


def test_a_setting_naming_a_missing_file_refuses_the_whole_sweep_before_any_run(tmp_path: Path):
    """The machine's checks (dormouse.train.preflight.check_environment) are part of the sweep's plan, as the
    config's values are: not a first run that trains and a second refused."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be " * 200)
    missing = tmp_path / "missing.txt"
    result = runner.invoke(app, ["train", "-m", *TINY, f"data.path={corpus},{missing}", f"run.dir={tmp_path}",
                                 "run.name=s"])
    assert result.exit_code == 2 and "sweep setting 1 (" in result.output, result.output
    assert "no such file or folder" in result.output and "sweep setting 0" not in result.output
    assert not (tmp_path / "s").exists()

def test_without_m_several_values_are_still_refused_as_a_sweep(tmp_path: Path):
    result = runner.invoke(app, ["validate", "model.d_model=64,128", f"run.dir={tmp_path}"])
    assert result.exit_code == 2 and "several values (a sweep)" in result.output


def test_train_and_ab_help_say_a_sweep_explores_and_a_comparison_decides():
    for command in ("train", "ab"):
        text = " ".join(runner.invoke(app, [command, "--help"], terminal_width=200).output.split())
        assert SENTENCE in text, command
