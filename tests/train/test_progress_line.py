"""Off a terminal a run says where it is now and then (a log file is never silent for minutes)."""

from __future__ import annotations

import io

import pytest

from dormouse.train import loop
from dormouse.train.progress_line import PlainProgress, duration, progress_line


def test_the_plain_line_says_step_loss_pace_and_eta():
    line = progress_line(120, 2000, 2.3456, 1234.4, 30.0, 100)  # 100 steps in 30 s: 1880 left take 564 s
    assert line == "progress step 120/2000 (6%)  loss 2.346  1,234 tok/s  elapsed 30s  eta 9m24s"
    assert duration(7325) == "2h02m" and duration(0.4) == "0s"


def test_a_plain_line_comes_every_interval_and_not_in_between():
    now = [0.0]
    plain = PlainProgress(total=100, start=0, every_s=30.0, clock=lambda: now[0])
    said = []
    for step in range(1, 101):
        now[0] += 1.0  # a step a second: a line at 30, 60 and 90 s
        said.append(plain.line(step, 1.0, 10.0))
    lines = [(i + 1, s) for i, s in enumerate(said) if s is not None]
    assert [step for step, _ in lines] == [30, 60, 90]
    assert lines[0][1].startswith("progress step 30/100 (30%)") and lines[0][1].endswith("eta 1m10s")


@pytest.mark.parametrize(("mode", "tty", "plain"), [("auto", False, True), ("auto", True, False),
                                                     ("off", False, False)])
def test_the_run_prints_plain_progress_only_off_a_terminal(monkeypatch, mode, tty, plain):
    out = io.StringIO()
    out.isatty = lambda: tty  # type: ignore[method-assign]
    monkeypatch.setattr(loop.sys, "stdout", out)
    progress = loop._Progress(mode, 10, 0, enabled=True)
    try:
        assert (progress.plain is not None) is plain
        if plain:
            progress.plain.every_s = 0.0
            progress.update(1, 2.0, 5.0)
            assert out.getvalue().startswith("progress step 1/10 (10%)  loss 2.000")
    finally:
        progress.close()
