"""A step that cannot fit in time or memory is not silent (data.seq_len=100000 would run minutes
at 1.8 GB with nothing printed off a terminal until the first eval)."""

from __future__ import annotations

import re

import pytest

import dormouse.train.step_notice as step_notice
from dormouse.config.schema import load_config
from dormouse.train.loop import train
from dormouse.train.step_notice import attention_bytes, first_step_line

TINY = ["preset=tiny", "train.steps=4", "train.eval_every=2", "data.eval_bytes=256", "logging.progress=off"]


def test_first_step_line_projects_the_first_eval_and_the_end_from_the_first_step():
    """2 s a step, step 1 done: the eval at step 600 is 599 x 2 s = 19.97 min away, the end 2399 x 2 s =
    80 min; the step just done may itself be the eval step (0 s)."""
    line = first_step_line(2.0, 1, 600, 2400)
    assert line == ("first step: 2.00 s; at this pace the first eval (step 600) is in 20.0 min "
                    "and the end (step 2400) in 80.0 min")
    assert "first eval (step 4) is in 0.00 s" in first_step_line(0.5, 4, 2, 10)
    assert "first eval (step 7) is in 1.50 s" in first_step_line(0.5, 4, 600, 7)  # the last step evaluates


def test_first_step_prints_its_time_off_a_terminal_before_the_first_eval(tmp_path, capsys: pytest.CaptureFixture):
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"]))
    out = capsys.readouterr().out.splitlines()
    first = [i for i, ln in enumerate(out) if ln.startswith("first step: ")]
    evals = [i for i, ln in enumerate(out) if ln.startswith("eval ")]
    assert len(first) == 1 and evals and first[0] < evals[0], out
    assert re.fullmatch(r"first step: \S+ \S+; at this pace the first eval \(step 2\) is in \S+ \S+ "
                        r"and the end \(step 4\) in \S+ \S+", out[first[0]])


def test_a_compiled_run_projects_from_its_second_step_not_from_the_compilation(
        tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """train.compile=true: the first step holds the compilation (42 s against 0.1 s a step at residual_cpu's
    shape: projected, it would say 33 h for a 5-min run), so it is named as such and the pace comes
    from the second step. (Both compile scopes are replaced by the eager model: the loop is under test, not
    Inductor.)"""
    from dormouse.model.looped import LoopedByteLM

    for scope in ("compile_whole", "compile_regions"):
        monkeypatch.setattr(LoopedByteLM, scope, lambda self, *a, **k: self)
    train(load_config([*TINY, "train.compile=true", f"run.dir={tmp_path}", "run.name=r"]))
    out = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("first step", "second step"))]
    assert len(out) == 2, out
    assert re.fullmatch(r"first step: \S+ \S+ \(it compiled the model: train.compile; the pace follows the next "
                        r"step\)", out[0])
    assert re.fullmatch(r"second step: \S+ \S+; at this pace the first eval \(step 2\) is in \S+ \S+ "
                        r"and the end \(step 4\) in \S+ \S+", out[1])


def test_issue_seq_len_100000_attention_estimate_is_hundreds_of_gib():
    """The issue's run (tiny preset: 4 rows, 2 heads, 2 iterations): 4 x 2 x 1e10 x 4 B x 2 = 6.4e11 B."""
    assert attention_bytes(4, 2, 100_000, 2) == 640_000_000_000


@pytest.mark.parametrize(("free", "warned"), [(10**6, True), (10**15, False)])
def test_attention_that_exceeds_half_the_free_memory_warns_before_step_0_and_still_trains(
        tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, free: int, warned: bool):
    """tiny at seq_len 32: 4 rows x 2 heads x 32^2 x 4 B x 2 iterations = 32,768 B, compared with
    MEMORY_WARN_FRACTION x the (monkeypatched) free memory: over 0.01 x 1e6 B, under 0.01 x 1e15 B."""
    monkeypatch.setattr(step_notice, "available_memory", lambda device: free)
    monkeypatch.setattr(step_notice, "MEMORY_WARN_FRACTION", 0.01)
    result = train(load_config([*TINY, "data.seq_len=32", f"run.dir={tmp_path}", "run.name=r"]))
    err = capsys.readouterr().err
    assert ("warning: one step's attention at data.seq_len=32" in err) is warned, err
    assert result.metrics[-1]["step"] == 4  # a warning, never a refusal: the run trained to its end
