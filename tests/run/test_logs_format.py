"""`dormouse logs --format table|tsv|json`: outside a terminal every value survives (no '1…')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormouse.arms.registry import ARMS
from dormouse.cli.app import app
from dormouse.run.loglines import format_done_line, format_eval_line

runner = CliRunner()


def row(step: int, bpb: float) -> dict:
    r = {"step": step, "tokens": step * 4096, "loss": 1.4, "bpb": bpb, "bpb@1": bpb + 0.1, "bpb@2": bpb,
         "lr": 2.4e-4, "tok/s": 8100.0, "depth": 2.0, "arm": "gr", "kernel": "none", "skipped": 0,
         "learned_name": "gate", "learned": 0.1532, "window_steps": 1200, "depth_sum": 2400}
    for name in ARMS:
        r[f"{name}_ran"] = r[f"{name}_asked"] = 2400 if name == "gr" else 0
    return r


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "a-run-with-a-long-name-20261201-120000-000000"
    run.mkdir()
    (run / "config.yaml").write_text("model:\n  use_gr: true\ntrain:\n  steps: 2400\n  eval_every: 1200\n")
    lines = ["# commit: x", format_eval_line(row(1200, 2.5123), 2), format_eval_line(row(2400, float("nan")), 2),
             format_done_line(2400, 339.2)]
    (run / "train.log").write_text("\n".join(lines) + "\n")
    return run


def test_not_a_terminal_gives_tab_separated_rows_with_every_value(run_dir: Path):
    result = runner.invoke(app, ["logs", str(run_dir)])
    assert result.exit_code == 0
    header, first, second = result.stdout.splitlines()
    assert header.split("\t")[:6] == ["run", "line", "step", "tokens", "loss", "bpb"]
    cells = dict(zip(header.split("\t"), first.split("\t")))
    assert cells["run"] == str(run_dir) and cells["step"] == "1200" and cells["bpb"] == "2.5123"
    assert cells["tokens"] == "4920000" and cells["gr"] == "2400/2400" and cells["learned"] == "gate:0.1532"
    assert cells["window_steps"] == "1200" and cells["depth_sum"] == "2400"  # what asked is checked against
    assert "non-finite" in result.stderr  # findings go to stderr: the rows stay a clean TSV


def test_json_holds_rows_and_findings_as_valid_json(run_dir: Path):
    result = runner.invoke(app, ["logs", str(run_dir), "--format", "json", "--check"])
    assert result.exit_code == 1  # the NaN bpb is a finding
    (run,) = json.loads(result.stdout)["runs"]
    assert [e["step"] for e in run["evals"]] == [1200, 2400] and run["evals"][1]["bpb"] == "nan"
    assert run["finished"] and any(f["kind"] == "non-finite" for f in run["findings"])


def test_table_in_a_file_is_never_cut(run_dir: Path):
    result = runner.invoke(app, ["logs", str(run_dir), "--format", "table"])
    assert "…" not in result.stdout and "2.5123" in result.stdout and "1200" in result.stdout


def test_unknown_format_is_refused():
    result = runner.invoke(app, ["logs", ".", "--format", "xml"])
    assert result.exit_code == 2 and "table, tsv, json" in result.output
