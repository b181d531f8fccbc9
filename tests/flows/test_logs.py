"""The log inspector (`dormouse logs`): one planted defect per finding (the line formats: test_loglines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from dormouse.arms.registry import ARMS
from dormouse.cli.logs import logs_command
from dormouse.run.checks import checked_run, checked_runs
from dormouse.run.loglines import format_eval_line


def row(step: int, arm: str = "gr", bpb: float = 2.0, counters: dict[str, tuple[int, int]] | None = None,
        max_iter: int = 2) -> dict:
    """A metrics row of a healthy run of ``arm`` (its counter ran = asked), optionally with other counters."""
    r = {"step": step, "tokens": step * 128, "loss": bpb * 0.69, "bpb": bpb, "lr": 1e-3, "tok/s": 8100.0,
         "depth": float(max_iter), "arm": arm, "kernel": "torch", "skipped": 0}
    r.update({f"bpb@{k}": bpb + 0.1 * (max_iter - k) for k in range(1, max_iter + 1)})
    for name in ARMS:
        ran = asked = 40 if name == arm else 0
        if counters and name in counters:
            ran, asked = counters[name]
        r[f"{name}_ran"], r[f"{name}_asked"] = ran, asked
    return r


def plant(tmp_path: Path, lines: list[str], steps: int | None = 20, eval_every: int = 10,
          arm: str = "gr", name: str = "run") -> Path:
    """A run directory with a config.yaml (train.steps, train.eval_every, the arm flags) and train.log."""
    run_dir = tmp_path / name
    run_dir.mkdir(parents=True)
    if steps is not None:
        (run_dir / "config.yaml").write_text(
            f"model:\n  use_gr: {str(arm == 'gr').lower()}\n  use_attnres: {str(arm == 'attnres').lower()}\n"
            f"train:\n  steps: {steps}\n  eval_every: {eval_every}\n")
    header = ["# dormouse: 0.1.0", "# device: cpu"]
    (run_dir / "train.log").write_text("\n".join(header + lines) + "\n")
    return run_dir


def healthy(arm: str = "gr") -> list[str]:
    return [format_eval_line(row(10, arm, 2.5), 2), "warn something harmless",
            format_eval_line(row(20, arm, 2.2), 2), "done step=20 wall_s=3.1"]


def kinds(run_dir: Path) -> list[str]:
    return [f.kind for f in checked_run(run_dir).findings]


def check(paths: list[Path]) -> tuple[int, str]:
    console = Console(record=True, width=250)
    code = logs_command(paths, check=True, console=console, fmt="table")  # findings inline, as on a terminal
    return code, console.export_text()


def test_clean_log_has_no_findings_and_exit_0(tmp_path: Path) -> None:
    run_dir = plant(tmp_path, healthy())
    assert kinds(run_dir) == []
    code, text = check([run_dir])
    assert code == 0
    assert "no findings" in text and "gr" in text and "40/40" in text


def test_dead_arm_is_found(tmp_path: Path) -> None:
    lines = healthy()
    lines[2] = format_eval_line(row(20, "gr", counters={"gr": (0, 40)}), 2)  # asked but never ran
    run_dir = plant(tmp_path, lines)
    found = checked_run(run_dir).findings
    assert [f.kind for f in found] == ["dead-arm"]
    assert found[0].line == 5 and found[0].path == run_dir / "train.log"  # 2 header lines, then line 5
    code, text = check([run_dir])
    assert code == 1 and "train.log:5: dead-arm" in text


def test_dead_arm_reading_zero_and_partial_run(tmp_path: Path) -> None:
    lines = healthy()
    lines[0] = format_eval_line(row(10, "gr", counters={"gr": (0, 0)}), 2)
    lines[2] = format_eval_line(row(20, "gr", counters={"gr": (30, 40)}), 2)
    assert kinds(plant(tmp_path, lines)) == ["dead-arm", "dead-arm"]


def test_leaking_arm_is_found(tmp_path: Path) -> None:
    lines = healthy("attnres")
    lines[0] = format_eval_line(row(10, "attnres", counters={"rezero": (40, 40)}), 2)
    run_dir = plant(tmp_path, lines, arm="attnres")
    found = checked_run(run_dir).findings
    assert [f.kind for f in found] == ["leaking-arm"] and found[0].line == 3
    assert "rezero=40/40" in found[0].message
    assert check([run_dir])[0] == 1


def test_nan_loss_or_bpb_is_found(tmp_path: Path) -> None:
    lines = healthy()
    lines[2] = format_eval_line(row(20, "gr", bpb=float("nan")), 2)
    run_dir = plant(tmp_path, lines)
    found = checked_run(run_dir).findings
    assert [f.kind for f in found] == ["non-finite"] and found[0].line == 5
    code, text = check([run_dir])
    assert code == 1 and "non-finite" in text


def test_malformed_line_is_reported_with_its_number_not_a_crash(tmp_path: Path) -> None:
    lines = healthy()
    lines.insert(1, "eval step=15 tokens=1.2")  # line 4
    run_dir = plant(tmp_path, lines)
    found = checked_run(run_dir).findings
    assert [(f.kind, f.line) for f in found] == [("malformed", 4)]
    code, text = check([run_dir])
    assert code == 1 and "train.log:4: malformed" in text


def test_missing_final_eval_and_done_is_found(tmp_path: Path) -> None:
    lines = healthy()[:2]  # the eval at step 10 only: killed before the end
    run_dir = plant(tmp_path, lines)
    assert sorted(kinds(run_dir)) == ["unfinished", "unfinished"]  # last eval != train.steps; no done
    code, text = check([run_dir])
    assert code == 1 and "train.steps=20" in text and "no `done` line" in text


def test_missing_intermediate_eval_and_out_of_order_steps(tmp_path: Path) -> None:
    lines = [format_eval_line(row(20, "gr"), 2), format_eval_line(row(10, "gr"), 2),
             format_eval_line(row(30, "gr"), 2), "done step=30 wall_s=1"]
    found = checked_run(plant(tmp_path, lines, steps=30)).findings
    assert [(f.kind, f.line) for f in found] == [("missing-eval", 3), ("out-of-order", 4)]


def test_a_text_file_that_is_not_a_log_says_so(tmp_path: Path) -> None:
    """`logs notes.txt` says the file is not a train.log (not "missing-eval")."""
    notes = tmp_path / "notes.txt"
    notes.write_text("a shopping list\nmilk\n")
    run = checked_run(notes)
    assert [f.kind for f in run.findings] == ["not-a-log"]
    assert run.findings[0].message.startswith(f"{notes} is not a train.log: ")
    code, text = check([notes])
    assert code == 1 and "not-a-log" in text and "missing-eval" not in text


def test_no_eval_lines_at_all(tmp_path: Path) -> None:
    assert "missing-eval" in kinds(plant(tmp_path, ["done step=20 wall_s=1"]))


def test_resume_replay_is_not_out_of_order(tmp_path: Path) -> None:
    lines = [format_eval_line(row(10, "gr", 2.5), 2), format_eval_line(row(20, "gr", 2.4), 2),
             "interrupted step=25", "resume step=10 from=checkpoints/step_00000010.pt",
             format_eval_line(row(20, "gr", 2.3), 2), format_eval_line(row(30, "gr", 2.2), 2),
             "done step=30 wall_s=2"]
    run = checked_run(plant(tmp_path, lines, steps=30))
    assert run.findings == []
    assert [r.step for r in run.evals] == [10, 20, 30]
    assert run.evals[1].values["bpb"] == pytest.approx(2.3)  # the replay wins


def test_arm_that_disagrees_with_config_is_found(tmp_path: Path) -> None:
    assert kinds(plant(tmp_path, healthy("rezero"), arm="gr")) == ["arm-mismatch", "arm-mismatch"]


def test_ab_directory_reads_every_run_and_a_train_log_path_works(tmp_path: Path) -> None:
    ab = tmp_path / "ab"
    plant(ab, healthy(), name="gr-s1")
    bad = healthy()
    bad[0] = format_eval_line(row(10, "gr", counters={"attnres": (1, 1)}), 2)
    plant(ab, bad, name="gr-s2")
    runs = checked_runs([ab])
    assert [r.name for r in runs] == ["gr-s1", "gr-s2"]
    assert [len(r.findings) for r in runs] == [0, 1]
    code, text = check([ab])
    assert code == 1 and "gr-s2" in text and "leaking-arm" in text
    assert check([ab / "gr-s1" / "train.log"])[0] == 0


def test_without_check_exit_0_and_missing_path_exit_2(tmp_path: Path) -> None:
    run_dir = plant(tmp_path, healthy()[:1])
    assert logs_command([run_dir], check=False, console=Console(record=True)) == 0
    assert logs_command([tmp_path / "nope"], check=True, console=Console(record=True)) == 2


def test_a_directory_without_a_log_is_a_finding_and_logs_refuses_it(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    run = checked_run(tmp_path / "empty")  # what `dormouse ab` checks of a run that never started
    assert [f.kind for f in run.findings] == ["no-log"]
    console = Console(record=True, width=250)  # `dormouse logs` of a folder with no run: an error, exit 2
    assert logs_command([tmp_path / "empty"], console=console, err_console=console) == 2
    assert "no runs in this folder" in console.export_text()
