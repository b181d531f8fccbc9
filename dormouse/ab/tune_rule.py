"""The tune stage's choice rule, by name: what a registration may name (:data:`RULES`) and the rule itself
(:func:`choose`). Kept apart from the stage (:mod:`dormouse.ab.tune`) so that the registration's checks can
name the rules without importing the engine."""

from __future__ import annotations

from statistics import fmean

RULE = "lowest_mean_final_bpb"
RULES = {RULE: "the lr with the lowest mean final bpb over the tune replicates; a diverged run counts as +inf; "
               "ties go to the smaller lr"}


def choose(finals: dict[float, list[float]]) -> float:
    """The rule (module docstring): the lowest mean final bpb, +inf for a diverged run, ties to the smaller lr."""
    return min(sorted(finals), key=lambda lr: fmean(finals[lr]))
