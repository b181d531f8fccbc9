"""`dormouse logs runs/ab/NAME`: a comparison as one table (a row per arm), each run's table only with --runs;
and what `dormouse logs` reads when given no path or a folder with no run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from dormouse.cli.comparison_table import arm_rows
from dormouse.cli.logs import logs_command
from dormouse.run.checks import checked_runs
from dormouse.run.loglines import format_eval_line
from tests.flows.test_logs import plant, row
from tests.helpers.registrations import registration

REGISTERED = registration("tiny", ("rezero", "gr", "rezero_aa"))
# replicate -> final bpb, per arm: gr is 0.1 bpb better than rezero in both replicates
FINALS = {"rezero": {1: 2.5, 2: 2.7}, "gr": {1: 2.4, 2: 2.6}, "rezero_aa": {1: 2.55, 2: 2.65}}


def plant_comparison(root: Path, results: dict | None = None) -> Path:
    """A comparison folder: registration.json, two replicate runs per arm (lr 0.003), one tune run, and
    results.json when given."""
    folder = root / "ab" / "tiny"
    folder.mkdir(parents=True)
    (folder / "registration.json").write_text(json.dumps({"name": "tiny", "registered": REGISTERED}))
    for arm, finals in FINALS.items():
        kind = "gr" if arm == "gr" else "rezero"
        for k, bpb in finals.items():
            lines = [format_eval_line(row(10, kind, bpb + 0.3), 2), format_eval_line(row(20, kind, bpb), 2),
                     "done step=20 wall_s=3.1"]
            run_dir = plant(folder, lines, arm=kind, name=f"{arm}-s{k}")
            with (run_dir / "config.yaml").open("a") as f:
                f.write("  lr: 0.003\n")
    plant(folder, [format_eval_line(row(10, "gr", 3.0), 2)], arm="gr", name="tune-gr-lr0.001-s9001")
    if results is not None:
        (folder / "results.json").write_text(json.dumps(results))
    return folder


def shown(paths: list[Path], **kw) -> tuple[int, str]:
    console = Console(record=True, width=250)
    code = logs_command(paths, console=console, fmt="table", err_console=console, **kw)
    return code, console.export_text()


def test_a_comparison_is_one_row_per_arm_with_mean_and_delta_from_its_runs(tmp_path: Path) -> None:
    folder = plant_comparison(tmp_path)
    rows = {r.arm: r for r in arm_rows(folder, checked_runs([folder]))}
    assert list(rows) == ["rezero", "gr", "rezero_aa"]  # the registration's order
    assert [rows[a].role for a in rows] == ["baseline", "arm", "aa"]
    assert rows["gr"].bpb_mean == pytest.approx(2.5) and rows["gr"].delta == pytest.approx(-0.1)
    assert rows["rezero"].delta is None and rows["gr"].lr == "0.003"
    assert (rows["gr"].done, rows["gr"].found) == (2, 2)  # the tune run is not a replicate
    assert rows["gr"].verdict == "-"  # no results.json: no verdict


def test_a_comparison_takes_its_numbers_and_verdicts_from_results_json(tmp_path: Path) -> None:
    results = {"complete": True, "arms": {
        "rezero": {"bpb_mean": 2.6, "diff_mean": None, "verdict": "baseline"},
        "gr": {"bpb_mean": 2.51, "diff_mean": -0.09, "verdict": "better"},
        "rezero_aa": {"bpb_mean": 2.6, "diff_mean": 0.0, "verdict": "aa"}}}
    code, text = shown([plant_comparison(tmp_path, results)])
    assert code == 0
    gr_line = next(line for line in text.splitlines() if line.startswith("│ gr "))
    assert all(v in gr_line for v in ("0.003", "2.5100", "-0.0900", "better")), gr_line
    assert "complete" in text and "from results.json" in text


def test_a_comparison_shows_each_runs_table_only_with_runs(tmp_path: Path) -> None:
    folder = plant_comparison(tmp_path)
    _, summary = shown([folder])
    assert "Δ vs rezero" in summary and "(gr, done)" not in summary and "--runs" in summary
    assert "1 other run(s) (the lr tune stage) are not in the rows" in summary
    _, every = shown([folder], per_run=True)
    assert "Δ vs rezero" in every and every.count("(gr, done)") == 2 and "gr-s1" in every


def _piped(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`dormouse logs ARGS` with stdout a pipe, as `| cut` or `> file` would run it."""
    return subprocess.run([sys.executable, "-m", "dormouse", "logs", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_a_comparison_in_a_pipe_is_one_tab_separated_row_per_arm_and_each_runs_rows_only_with_runs(
        tmp_path: Path) -> None:
    """The README's promise holds outside a terminal too: the row per arm, as TSV; the runs' evals with --runs."""
    folder = plant_comparison(tmp_path)
    done = _piped(folder)
    assert done.returncode == 0, done.stderr
    head, *rows = done.stdout.strip().split("\n")
    assert head.split("\t") == ["comparison", "arm", "role", "lr", "replicates", "runs", "bpb_mean",
                                "delta_vs_rezero", "verdict"]
    assert [r.split("\t")[1] for r in rows] == ["rezero", "gr", "rezero_aa"], done.stdout
    gr = dict(zip(head.split("\t"), rows[1].split("\t"), strict=True))
    assert (gr["lr"], gr["replicates"], gr["verdict"]) == ("0.003", "2", "-")
    assert float(gr["delta_vs_rezero"]) == pytest.approx(-0.1) and float(gr["bpb_mean"]) == pytest.approx(2.5)
    every = _piped(folder, "--runs").stdout
    assert every.startswith(done.stdout.strip() + "\n\n") and every.count(f"{folder / 'gr-s1'}\t") == 2


def test_a_comparison_summary_still_lists_every_finding(tmp_path: Path) -> None:
    folder = plant_comparison(tmp_path)
    (folder / "gr-s2" / "train.log").write_text("# dormouse: 0.1.0\nstep=oops\n")
    code, text = shown([folder], check=True)
    assert code == 1 and "gr-s2:" in text and "(gr, done)" not in text


def test_logs_without_a_path_reads_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, text = shown([])
    assert code == 2 and "no path given and no runs/ folder here" in text
    plant(tmp_path / "runs", [format_eval_line(row(10), 2), "done step=10 wall_s=1"], steps=10, name="myrun")
    code, text = shown([])
    assert code == 0 and "myrun" in text and "1 run(s)" in text


def test_logs_of_a_folder_with_no_run_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    code, text = shown([tmp_path / "etc"])
    assert code == 2 and "no runs in this folder" in text and "1 run(s)" not in text
