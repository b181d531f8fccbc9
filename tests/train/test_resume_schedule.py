"""Resume keeps the schedule: a resumed run's learning rate at every step equals one schedule.

The learning rate each step applied is read from the optimizer the loop steps (tests/train/test_loop.py's
observer) across the interrupted and the resumed process, and compared with the schedule written here:
lr(s) = lr (s + 1) / W for s < W, else lr (r + (1 - r) (1 + cos(pi (s - W) / (N - W))) / 2).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dormouse.config.schema import load_config
from dormouse.errors import TrainError
from dormouse.train.loop import train
from tests.helpers.loop_observer import observe

ARGS = ["preset=tiny", "train.device=cpu", "logging.progress=off", "data.eval_bytes=256", "train.eval_every=4",
        "train.lr=1e-2", "train.min_lr_ratio=0.1", "run.name=r"]


def schedule(s: int, lr: float, r: float, warmup: int, steps: int) -> float:
    if s < warmup:
        return lr * (s + 1) / warmup
    return lr * (r + (1 - r) * (1 + math.cos(math.pi * min(1.0, (s - warmup) / (steps - warmup)))) / 2)


def test_changing_train_steps_after_warmup_is_refused_naming_the_key_and_the_way_out(tmp_path: Path) -> None:
    train(load_config([*ARGS, "train.warmup=2", "train.steps=12", f"run.dir={tmp_path}"]), stop_at_step=6)
    with pytest.raises(TrainError) as err:
        train(load_config([*ARGS, "train.warmup=2", "train.steps=24", f"run.dir={tmp_path}",
                           "train.resume=auto"]))
    msg = str(err.value)
    assert "train.steps=12 -> 24" in msg and "neither schedule" in msg, msg
    assert "resume with train.steps=12" in msg and "new run" in msg, msg
    with pytest.raises(TrainError, match=r"train.lr=0.01 -> 0.02"):
        train(load_config([*ARGS, "train.warmup=2", "train.steps=12", "train.lr=2e-2", f"run.dir={tmp_path}",
                           "train.resume=auto"]))


def test_a_resumed_run_applies_one_schedule_at_every_step(tmp_path: Path) -> None:
    """A longer run resumed while still in warmup: the 5 steps taken had the new schedule's learning rates,
    so the resume is allowed, and every step of the whole run applies the 16-step schedule."""
    with observe() as first:
        train(load_config([*ARGS, "train.warmup=8", "train.steps=12", f"run.dir={tmp_path}"]), stop_at_step=5)
    with observe() as second:
        train(load_config([*ARGS, "train.warmup=8", "train.steps=16", f"run.dir={tmp_path}",
                           "train.resume=auto"]))
    lrs = [v.lrs[0] for v in first.steps + second.steps]
    assert len(lrs) == 16
    want = [schedule(s, 1e-2, 0.1, 8, 16) for s in range(16)]
    dev = max(abs(a - b) / b for a, b in zip(lrs, want))
    # One float64 expression per step, evaluated in Python: equal to a few ulps.
    assert dev < 1e-12, f"the resumed run's learning rates leave the 16-step schedule (deviation={dev:.3e} bound=1e-12)"
