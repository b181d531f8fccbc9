"""The comparison's ETA under `--jobs` (known before the first run finishes): the runs
running now and the pending ones after them, on as many slots as runs run at once. The oracle is the
schedule worked by hand (the launcher starts the next run on the first slot that frees)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rich.console import Console

from dormouse.ab.comparison.status import comparison_eta
from dormouse.ab.launchers.base import DONE, Outcome
from dormouse.ab.runs.board import RunBoard
from dormouse.ab.runs.job import Run


def test_two_slots_before_any_run_finished_give_an_eta_from_the_running_runs_pace() -> None:
    # running: elapsed 20 s with 10 s left (total 30), elapsed 10 s with 30 s left (total 40): a run takes
    # 35 s. Slots free at 10 and 30; three pending runs: 10+35=45, 30+35=65, 45+35=80 -> 80 s.
    assert comparison_eta([(20.0, 10.0), (10.0, 30.0)], [], 3) == pytest.approx(80.0)


def test_finished_runs_set_the_run_time_and_the_slots_share_the_pending_runs() -> None:
    # a run takes 20 s (the finished ones); slots free at 10 and 30: 10+20=30, 30+20=50, 30+20=50 -> 50 s,
    # not 30 + 3x20/2 = 60 (the pending runs spread evenly from the last slot to free) nor 90 (one slot).
    assert comparison_eta([(20.0, 10.0), (10.0, 30.0)], [18.0, 22.0], 3) == pytest.approx(50.0)
    # one run running with its pace still unknown: it has the run time less what it ran (20 - 5 = 15)
    assert comparison_eta([(5.0, None)], [20.0], 0) == pytest.approx(15.0)
    assert comparison_eta([(5.0, None)], [], 2) is None  # nothing known yet


def _runs(tmp_path: Path, n: int) -> list[Run]:
    cfg = OmegaConf.create({"train": {"steps": 100}})
    return [Run("a", i, cfg, tmp_path / f"a-s{i}", replicate=i) for i in range(1, n + 1)]


def test_the_live_board_shows_the_eta_for_the_slots_running_at_once(tmp_path: Path) -> None:
    board = RunBoard("t", _runs(tmp_path, 4), Console(record=True, width=200))
    board.start("a-s1", "slot 0")
    board.start("a-s2", "slot 1")
    assert board.caption() == "ETA unknown until a run has finished or evaluated"
    board.started["a-s1"] = time.time() - 40.0
    board.finish(Outcome("a-s1", DONE))  # took 40 s
    board.start("a-s3", "slot 0")
    board.started["a-s2"] = time.time() - 30.0
    # a run takes 40 s; running: a-s2 (30 s in, 10 left), a-s3 (0 s in, 40 left); a-s4 after a-s2: 10+40=50
    assert board.eta_s() == pytest.approx(50.0, abs=1.0)
    assert re.fullmatch(r"ETA 0:(49|50) \(2 run\(s\) at once\)", board.caption() or ""), board.caption()
