"""When a run evaluates: after every step that passes a multiple of ``train.eval_every``, and after the last. An
integer ``eval_every`` is every ``eval_every`` steps; a fractional one (a registered FLOP or token budget sets
``steps / evals``) places the evals at the same fractions of every arm's run, each within a step."""

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
