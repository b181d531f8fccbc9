"""The other matched view, read off the eval curves without new runs (Δ at matched FLOPs beside a step or token
budget, at matched steps beside a FLOP budget): each replicate's runs read at the cheaper run's total, linearly
between eval points, never extrapolated. Descriptive: never decided on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dormouse.ab.runs.records import RunRecord, is_finite_number


@dataclass(frozen=True)
class View:
    """One matched view: its unit and each arm's cost per step in it."""

    unit: str  # "flops" | "steps"
    per_step: dict[str, float]  # arm -> the unit's amount per step

    def x(self, arm: str, step: float) -> float:
        return step * self.per_step[arm]


def other_view(budget_unit: str, flops_per_step: dict[str, float]) -> View:
    """The view a budget does not decide on: FLOPs beside steps or tokens, steps beside FLOPs."""
    if budget_unit == "flops":
        return View("steps", {arm: 1.0 for arm in flops_per_step})
    return View("flops", dict(flops_per_step))


def read_at(rec: RunRecord, view: View, at: float) -> float | None:
    """The run's eval bpb at ``at`` (in the view's unit), linear between its eval points; None outside them."""
    points = [(view.x(rec.arm, float(r["step"])), float(r["bpb"])) for r in rec.rows
              if is_finite_number(r.get("bpb")) and is_finite_number(r.get("step"))]
    if not points or not points[0][0] <= at <= points[-1][0] * (1 + 1e-12):
        return None
    xs, ys = zip(*points)
    return float(np.interp(at, xs, ys))


def matched_diffs(view: View, arm_runs: list[RunRecord], base_runs: dict[int, RunRecord]) -> list[float]:
    """Per replicate: bpb(arm) − bpb(baseline), both read at the cheaper run's total in the view's unit."""
    diffs = []
    for rec in sorted(arm_runs, key=lambda r: r.replicate):
        base = base_runs.get(rec.replicate)
        if base is None or rec.final is None or base.final is None:
            continue
        at = min(view.x(rec.arm, rec.steps), view.x(base.arm, base.steps))
        a, b = read_at(rec, view, at), read_at(base, view, at)
        if a is not None and b is not None:
            diffs.append(a - b)
    return diffs


def view_words(view: View) -> dict[str, Any]:
    """How the view is named in results.json and the report."""
    what = "training FLOPs" if view.unit == "flops" else "steps"
    return {"unit": view.unit, "read_at": f"the cheaper run's total {what}, interpolated between eval points"}
