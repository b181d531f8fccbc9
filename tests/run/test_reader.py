"""The run reader (dormouse.run.reader): metrics.jsonl is the record the checks decide on; train.log is for
people, and a train.log copied alone is read from its eval lines into the same rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from dormouse.arms.registry import ARMS
from dormouse.run.checks import checked_run
from dormouse.run.loglines import format_eval_line, parse_eval_line
from dormouse.run.reader import read_run


def row(step: int, gr: tuple[int, int] = (40, 40)) -> dict[str, Any]:
    """A metrics row of a GR run, with the digits the eval line rounds away and the fields it leaves out."""
    r: dict[str, Any] = {"step": step, "tokens": step * 4096 + 17, "loss": 1.41234567, "bpb": 2.5123456,
                         "bpb@1": 2.6123456, "bpb@2": 2.5123456, "lr": 2.4e-4, "tok/s": 8123.4, "depth": 2.0,
                         "arm": "gr", "kernel": "none", "skipped": 0, "time_s": 1.5, "params": 1000}
    for name in ARMS:
        r[f"{name}_ran"], r[f"{name}_asked"] = gr if name == "gr" else (0, 0)
    return r


def write_run(run_dir: Path, rows: list[dict[str, Any]], lines: list[str] | None = None) -> Path:
    """config.yaml (GR, 20 steps, evals every 10), train.log (its header, ``lines`` or the rows' eval lines,
    the done line) and metrics.jsonl (``rows``)."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("model:\n  use_gr: true\ntrain:\n  steps: 20\n  eval_every: 10\n")
    lines = [format_eval_line(r) for r in rows] if lines is None else lines
    (run_dir / "train.log").write_text("\n".join(["# dormouse: test", *lines, "done step=20 wall_s=3.0"]) + "\n")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_the_checks_decide_on_metrics_jsonl_where_the_two_copies_disagree(tmp_path: Path) -> None:
    """Step 20's row says the arm never ran; its train.log line (a copy edited, or written by another
    process) says it did. The record decides: the run is invalid, cited where a person reads step 20."""
    rows = [row(10), row(20, gr=(0, 40))]
    healthy_lines = [format_eval_line(row(10)), format_eval_line(row(20))]
    run_dir = write_run(tmp_path / "r", rows, healthy_lines)
    found = checked_run(run_dir).findings
    assert [(f.kind, f.path.name, f.line) for f in found] == [("dead-arm", "train.log", 3)], [str(f) for f in found]
    bare = tmp_path / "bare"  # the same train.log copied without its metrics.jsonl: its lines are the record
    bare.mkdir()
    shutil.copy(run_dir / "train.log", bare / "train.log")
    assert checked_run(bare).findings == []


def test_a_bare_train_log_reads_into_the_rows_its_metrics_jsonl_holds(tmp_path: Path) -> None:
    rows = [row(10), row(20)]
    run_dir = write_run(tmp_path / "r", rows)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(run_dir / "config.yaml", bare / "config.yaml")
    shutil.copy(run_dir / "train.log", bare / "train.log")
    full, alone = read_run(run_dir), read_run(bare)
    assert full.metrics == run_dir / "metrics.jsonl" and alone.metrics is None
    assert [e.values for e in full.evals] == rows  # every digit, every field
    assert [e.values for e in alone.evals] == [parse_eval_line(format_eval_line(r)) for r in rows]
    assert [e.line for e in alone.evals] == [e.line for e in full.evals] == [2, 3]
    assert all(set(a.values) <= set(f.values) for a, f in zip(alone.evals, full.evals, strict=True))
    assert alone.finished and full.finished and full.final is full.evals[-1]
    assert checked_run(run_dir).findings == checked_run(bare).findings == []


def test_a_row_that_no_train_log_line_shows_is_checked_and_cited_in_metrics_jsonl(tmp_path: Path) -> None:
    """train.log lost step 20's line (a copy cut short); metrics.jsonl still holds the row, and it is checked."""
    rows = [row(10), row(20, gr=(0, 40))]
    run_dir = write_run(tmp_path / "r", rows, [format_eval_line(rows[0])])
    run = checked_run(run_dir)
    assert [e.line for e in run.evals] == [2, None]
    assert [(f.kind, f.path.name, f.line) for f in run.findings] == [("dead-arm", "metrics.jsonl", 2)]


def test_a_metrics_row_short_of_a_field_the_checks_need_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    rows = [row(10), row(20)]
    run_dir = write_run(tmp_path / "r", rows)
    short = {k: v for k, v in row(20).items() if k not in ("arm", "gr_asked")}
    (run_dir / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps(short) + "\n")
    run = checked_run(run_dir)
    assert [e.step for e in run.evals] == [10]
    incomplete = [f for f in run.findings if f.kind == "incomplete-row"]
    assert [(f.path.name, f.line) for f in incomplete] == [("metrics.jsonl", 2)]
    assert "missing field(s): arm" in incomplete[0].message
