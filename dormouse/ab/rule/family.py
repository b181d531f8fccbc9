"""The multiplicity correction a registration chooses for the separate claims of its family of arms
(docs/ab-protocol.md, "A registered study: the primary question"). ``bonferroni``: each arm's superiority test at
α/n_arms and each equivalence (TOST) test at α, so only the superiority claims are family-wise. ``holm``: Holm's
step-down on each kind of claim, so every separate claim is family-wise at α: sort the family's p-values, compare
the k-th smallest with α/(n − k + 1) and stop at the first that is not below its level; the arms from there on are
compared with the level the step-down stopped at (and are never below it). Holm is closed testing with Bonferroni
local tests, so it holds the family-wise error at α under any dependence between the arms (Holm 1979).

Written out here rather than taken from ``statsmodels.stats.multitest.multipletests``: the rule needs each arm's
level (to state it and to draw the arm's interval at it) and runs on (arms, n_sim) arrays in the cards'
simulations; the tests hold it to ``multipletests(method="holm")``."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

BONFERRONI, HOLM = "bonferroni", "holm"
MULTIPLICITIES = (BONFERRONI, HOLM)


def multiplicity_problems(multiplicity: object) -> list[tuple[str, str]]:
    """``(field, what is wrong)`` for a multiplicity that is not one of :data:`MULTIPLICITIES`."""
    if multiplicity in MULTIPLICITIES:
        return []
    return [("multiplicity", f"{multiplicity!r} must be one of {', '.join(MULTIPLICITIES)}")]


class HolmLevels(NamedTuple):
    """Holm's step-down along axis 0 (the family), each array shaped as the p-values."""

    level: np.ndarray  # the level each arm's p is compared with: α/(n − step + 1); rejected iff p < level
    rank: np.ndarray  # 1-based rank of the arm's p in the family (the smallest is 1; ties in the arms' order)
    step: np.ndarray  # the rank whose level applies: its own, or the one the step-down stopped at (≤ rank)


def holm_levels(p: np.ndarray, alpha: float, family: int | None = None) -> HolmLevels:
    """Holm's levels for the p-values ``p`` (axis 0: the arms; NaN: an arm without a test, never rejected). The
    family is ``family`` arms (at least p's; the missing ones count as never rejected, so they keep their share);
    the rows returned are p's own. A p is rejected iff p < its level (strict, as the rule's intervals)."""
    p = np.asarray(p, dtype=float)
    m = p.shape[0] if family is None else int(family)
    if m < p.shape[0]:
        raise ValueError(f"family: {m} arms, fewer than the {p.shape[0]} p-values given")
    padded = np.concatenate([p, np.full((m - p.shape[0],) + p.shape[1:], np.nan)], axis=0)
    order = np.argsort(padded, axis=0, kind="stable")  # NaN sorts last: an arm without a test is never rejected
    ranked = np.take_along_axis(padded, order, axis=0)
    thresholds = (alpha / (m - np.arange(m))).reshape((m,) + (1,) * (p.ndim - 1))  # α/m, α/(m − 1), …, α
    fails = ~(ranked < thresholds)
    first = np.where(fails.any(axis=0), fails.argmax(axis=0), m)  # 0-based rank where the step-down stops
    k = np.arange(m).reshape(thresholds.shape)
    step_sorted = np.minimum(k, first)  # from the stop on, every arm is compared with the stopping level
    level_sorted = alpha / (m - step_sorted)
    level, step, rank = (np.empty(padded.shape) for _ in range(3))
    np.put_along_axis(level, order, level_sorted, axis=0)
    np.put_along_axis(step, order, step_sorted + 1.0, axis=0)
    np.put_along_axis(rank, order, np.broadcast_to(k + 1.0, padded.shape), axis=0)
    n = p.shape[0]
    return HolmLevels(level[:n], rank[:n].astype(int), step[:n].astype(int))


def ordinal(k: int) -> str:
    """1 -> "1st", 2 -> "2nd", 11 -> "11th": a rank as the sentences say it."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"
