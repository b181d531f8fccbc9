"""``dormouse ab NAME --status``'s run table at a terminal's 80 columns: the bpb whole, an eval on one line."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from dormouse.ab.comparison.status import status_table
from dormouse.run.loglines import format_eval_line

EVAL = format_eval_line({"step": 1500, "tokens": 192000, "loss": 3.4012345, "bpb": 4.91234567, "lr": 3e-4,
                         "tok/s": 1234.5, "depth": 2, "arm": "rezero"})


def row(run: str, state: str, where: str = "", note: str = "") -> dict[str, Any]:
    return {"pair": run, "state": state, "step": 1500, "steps": 1500, "elapsed_s": 3595.0, "eta_s": 3612.0,
            "where": where, "note": note, "last_eval": EVAL}


def rendered(rows: list[dict[str, Any]], width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(status_table(rows))
    return [ln.rstrip() for ln in console.export_text().splitlines()]


def test_status_at_80_columns_keeps_the_bpb_whole_and_a_finished_runs_eval_on_one_line() -> None:
    rows = [row("attnres_full-s1", "done"), row("prenorm-s12", "running", where="pid 123456 on node-0042"),
            row("rezero_aa-s3", "interrupted", note="resumes from step 1000"), row("gr-s10", "pending")]
    lines = rendered(rows)
    assert all(len(ln) <= 80 for ln in lines)
    by_pair = {ln.split()[0]: ln for ln in lines if ln and ln.split()[0] in {r["pair"] for r in rows}}
    assert set(by_pair) == {r["pair"] for r in rows}, lines  # every run name whole, on its row's first line
    for run in by_pair:
        assert " 4.9123 " in by_pair[run] + " " and "…" not in by_pair[run]  # the bpb whole, never "4.9…"
    done = lines.index(by_pair["attnres_full-s1"])
    assert by_pair["attnres_full-s1"].endswith("loss=3.4012")
    assert lines[done + 1].split()[0] == "prenorm-s12"  # a finished run's eval takes one line
    assert "pid 123456" in " ".join(lines[lines.index(by_pair["prenorm-s12"]):])


def test_status_folds_a_long_tune_run_name_rather_than_squeezing_the_bpb() -> None:
    lines = rendered([row("tune-attnres_full-lr0.003-s1", "done"), row("gr-s1", "failed", note="x " * 60)])
    assert all(len(ln) <= 80 for ln in lines)
    assert sum(" 4.9123 " in ln + " " for ln in lines) == 2
    tune = next(i for i, ln in enumerate(lines) if ln.startswith("tune-"))
    assert lines[tune].split()[0] + lines[tune + 1].split()[0] == "tune-attnres_full-lr0.003-s1"
