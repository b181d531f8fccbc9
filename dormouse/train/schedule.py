"""The learning-rate schedule, and the rule that keeps a resumed run on one schedule.

``lr_at`` is the schedule of the whole run: linear warmup to ``train.lr`` over ``train.warmup`` steps, then a
cosine from ``train.lr`` to ``train.lr * train.min_lr_ratio`` at step ``train.steps``. It depends on four
keys (:data:`SCHEDULE_KEYS`). A resume that changes one of them is allowed only when the steps already
taken had exactly the learning rates the new schedule gives them (for example, a longer run resumed while
still in warmup): then the resumed run follows the new schedule at every step. Anything else would bend the
schedule mid-run, so the run would follow neither the old schedule nor the new one:
:func:`schedule_change_problem` says so, naming the key and the way out.
"""

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
    """Why resuming a run that took ``steps_done`` steps under config ``old`` with config ``new`` would leave
    it on no single schedule, or None when every step taken had the new schedule's learning rate."""
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
