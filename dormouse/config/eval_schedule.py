"""When a run evaluates: after each step that passes a multiple of ``train.eval_every`` (an integer, or the fraction a
FLOP or token budget sets so every arm evaluates at the same fractions of its run), and after the last."""

from __future__ import annotations

import math


def is_eval_step(step: int, every: float) -> bool:
    """Whether the loop evaluates after ``step`` (1-based) for the multiples: ``step = ceil(k·every)``."""
    return _multiples_passed(step, every) > _multiples_passed(step - 1, every)


def _multiples_passed(step: int, every: float) -> int:
    # the tolerance absorbs a quotient like 7 / (7/3) that lands a hair under its integer
    return math.floor(step / every + 1e-9)


def eval_steps(every: float, steps: int) -> list[int]:
    """Every step a run of ``steps`` steps evaluates after: the multiples' and the last."""
    return [s for s in range(1, steps + 1) if is_eval_step(s, every) or s == steps]
