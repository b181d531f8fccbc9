"""`asked` means asked: `dormouse logs --check` verifies the selected arm's asked counter
against 2 x the sum of the depths the schedule drew for the window's training steps, which the eval line
carries itself (``window_steps``, ``depth_sum``). A sublayer the loop skips lowers ran and asked together, so
the ran = asked check cannot see it; this one can.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from dormouse.cli.logs import logs_command
from dormouse.config.schema import load_config
from dormouse.run.checks import checked_run
from dormouse.run.loglines import format_eval_line, parse_eval_line
from dormouse.train.loop import depth_for_step, train


def test_a_real_runs_asked_is_twice_the_depths_its_schedule_drew(tmp_path: Path) -> None:
    seed, steps, every = 3, 12, 6
    cfg = load_config(["preset=tiny", "model.max_iter=3", "model.random_depth=true", f"train.steps={steps}",
                       f"train.eval_every={every}", f"train.seed={seed}", "data.eval_bytes=256",
                       "train.device=cpu", "logging.progress=off", f"run.dir={tmp_path}", "run.name=r"])
    train(cfg)
    run = checked_run(tmp_path / "r")
    asked = [f for f in run.findings if f.kind == "asked-mismatch"]
    assert not asked, f"{asked[0]} (deviation={len(asked)} bound=0)"
    assert not run.findings, [str(f) for f in run.findings]
    depths = [depth_for_step(seed, s, 3, True) for s in range(steps)]
    for ev, window in zip(run.evals, (depths[:every], depths[every:]), strict=True):
        v = ev.values  # the metrics.jsonl row: the record carries its own check
        assert v["window_steps"] == every and v["depth_sum"] == sum(window), v
        assert v["rezero_asked"] == v["rezero_ran"] == 2 * sum(window), v


def test_a_skipped_sublayer_is_a_finding(tmp_path: Path) -> None:
    """A planted eval line: 6 steps at depth 2 ask for 2 x 12 = 24 aggregations; ran = asked = 20 (4 sublayer
    calls never made) passes ran = asked but not asked = 2 x depth_sum."""
    line = format_eval_line({"step": 6, "tokens": 768, "loss": 5.0, "bpb": 7.0, "bpb@1": 7.1, "bpb@2": 7.0,
                             "lr": 1e-3, "tok/s": 100.0, "depth": 2.0, "arm": "gr", "rezero_ran": 0,
                             "rezero_asked": 0, "gr_ran": 20, "gr_asked": 20, "attnres_ran": 0,
                             "attnres_asked": 0, "kernel": "none", "skipped": 0, "window_steps": 6,
                             "depth_sum": 12}, 2)
    assert parse_eval_line(line)["depth_sum"] == 12
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("model:\n  use_gr: true\n  use_attnres: false\n"
                                         "train:\n  steps: 6\n  eval_every: 6\n")
    (run_dir / "train.log").write_text("# dormouse: test\n" + line + "\ndone step=6 wall_s=1.0\n")
    findings = checked_run(run_dir).findings
    assert [f.kind for f in findings] == ["asked-mismatch"], [str(f) for f in findings]
    assert "asked=20" in findings[0].message and "2 x 12 = 24" in findings[0].message
    assert logs_command([run_dir], check=True, console=Console(record=True, width=200)) == 1
