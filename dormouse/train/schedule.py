"""The learning-rate schedule: linear warmup to ``train.lr`` over ``train.warmup`` steps, then cosine to
``lr * min_lr_ratio`` at ``train.steps``. A resume may change a :data:`SCHEDULE_KEYS` key only if every step
taken keeps its learning rate (:func:`schedule_change_problem`), else the run would follow neither schedule."""

from __future__ import annotations

import math
from typing import Any

SCHEDULE_KEYS = ("train.steps", "train.warmup", "train.lr", "train.min_lr_ratio")


def lr_at(step: int, cfg: Any) -> float:
    """Linear warmup over ``warmup`` steps, then cosine from lr to lr * min_lr_ratio at ``steps``."""
    t = cfg.train
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def schedule_change_problem(old: Any, new: Any, steps_done: int) -> str | None:
    """Why resuming with ``new`` after ``steps_done`` steps of ``old`` leaves no single schedule, or None."""
    changed = [k for k in SCHEDULE_KEYS if _get(old, k) != _get(new, k)]
    if not changed:
        return None
    first = next((s for s in range(steps_done) if lr_at(s, old) != lr_at(s, new)), None)
    if first is None:
        return None
    keys = ", ".join(f"{k}={_get(old, k)} -> {_get(new, k)}" for k in changed)
    return (f"{keys}: the learning rate of the {steps_done} steps already taken would not match the new "
            f"schedule (step {first}: {lr_at(first, old):.4g} was applied, the new schedule gives "
            f"{lr_at(first, new):.4g}), so the resumed run would follow neither schedule; resume with "
            f"{', '.join(f'{k}={_get(old, k)}' for k in changed)}, or start a new run (another run.name) "
            "with the new values")


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node
