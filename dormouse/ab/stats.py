"""The statistics of the A/B protocol (docs/ab-protocol.md, "The metric and the statistics").

Pure functions on plain sequences of floats; every one of them is defined for any sample size and says
so with ``None`` where a quantity does not exist (one seed has no spread, so no interval).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

BOOTSTRAP_SEED = 20240917  # fixed: two reports of the same runs agree to the last digit
BOOTSTRAP_RESAMPLES = 10_000

# The verdicts (docs/ab-protocol.md). ``undecided`` covers every case the data cannot settle, one seed included.
BETTER, WORSE, TIE, UNDECIDED, INVALID = "better", "worse", "tie", "undecided", "invalid"


def mean(xs: Sequence[float]) -> float:
    """Arithmetic mean; NaN for an empty sample."""
    return float(np.mean(xs)) if len(xs) else math.nan


def sd(xs: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); ``None`` with fewer than 2 values."""
    return float(np.std(xs, ddof=1)) if len(xs) >= 2 else None


def t_interval(xs: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Two-sided Student-t confidence interval of the mean: ``mean ± t_{(1+c)/2, n-1} · sd / √n``.

    ``None`` with fewer than 2 values (no spread estimate, no degrees of freedom).
    """
    n = len(xs)
    s = sd(xs)
    if s is None:
        return None
    m = mean(xs)
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * s / math.sqrt(n)
    return (m - half, m + half)


def t_test_p(xs: Sequence[float]) -> float | None:
    """Two-sided one-sample t-test p-value of mean = 0 (the paired test on differences).

    ``None`` with fewer than 2 values. With zero spread the test degenerates: p = 1 if every value is 0
    (nothing to see), else 0 (every seed moved the same way by the same amount).
    """
    s = sd(xs)
    if s is None:
        return None
    if s == 0.0:
        return 1.0 if mean(xs) == 0.0 else 0.0
    return float(sps.ttest_1samp(np.asarray(xs, dtype=float), 0.0).pvalue)


def bootstrap_interval(
    xs: Sequence[float],
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (a cross-check of the t-interval, not the decision).

    Resamples the values with replacement using ``numpy.random.Generator(PCG64(seed))``, so the result is
    reproducible. ``None`` with fewer than 2 values. With few seeds it is narrower than the t-interval
    (it cannot see beyond the observed values), which is why the t-interval decides.
    """
    x = np.asarray(xs, dtype=float)
    if x.size < 2:
        return None
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    means = x[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return (float(lo), float(hi))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni step-down adjusted p-values, in the input order; ``None`` entries stay ``None``
    and are not counted in the family.

    Sorted ascending p_(1) ≤ … ≤ p_(m): adj_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)).
    Rejecting where adj < α controls the family-wise error rate at α.
    """
    present = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


@dataclass
class NoiseFloor:
    """δ, the smallest effect worth claiming, and where it came from."""

    delta: float
    min_effect: float
    aa_sd: float | None  # sd of the A/A paired differences; None without an A/A arm or with one seed
    source: str  # "registered minimum" or "2·sd(A/A)"


def noise_floor(min_effect: float, aa_diffs: Sequence[float] | None) -> NoiseFloor:
    """δ = max(registered minimum, 2 · sd of the A/A paired differences) (docs/ab-protocol.md)."""
    s = sd(aa_diffs) if aa_diffs is not None else None
    if s is not None and 2 * s > min_effect:
        return NoiseFloor(2 * s, min_effect, s, "2·sd(A/A)")
    return NoiseFloor(min_effect, min_effect, s, "registered minimum")


@dataclass(frozen=True)
class Decision:
    """One arm's verdict and every condition the rule tested, so the report's sentence is built from the
    same comparisons that produced the verdict (a sentence that contradicts its numbers is impossible)."""

    verdict: str
    diff_mean: float
    interval: tuple[float, float] | None
    delta: float
    p_adjusted: float | None
    alpha: float
    below_zero: bool  # hi < 0
    above_zero: bool  # lo > 0
    big: bool  # |mean Δ| ≥ δ
    significant: bool  # Holm-adjusted p < α (True when no p was given)
    inside_delta: bool  # −δ < lo and hi < δ


def decide(
    diff_mean: float,
    interval: tuple[float, float] | None,
    delta: float,
    p_adjusted: float | None = None,
    alpha: float = 0.05,
) -> Decision:
    """The protocol's verdict for one arm vs the baseline (bpb: lower is better; ab-protocol.md).

    * ``better``: the interval lies below 0, |mean Δ| ≥ δ, and (when given) the Holm-adjusted p < α, so
      that the correction across arms takes part in the decision rather than decorating the report;
    * ``worse``: likewise above 0;
    * ``tie``: the effect is shown to be small: the interval lies inside (−δ, +δ) (an equivalence test:
      each one-sided test at the interval's level rejects an effect of δ or more in its direction);
    * ``undecided``: anything else, one seed (no interval) included: the data cannot tell a real effect
      from none.

    ``better`` and ``tie`` cannot both hold: ``hi < 0`` with ``mean ≤ −δ`` puts ``lo < −δ``.
    (``invalid`` is decided by the counter check, not here.)
    """
    significant = p_adjusted is None or p_adjusted < alpha
    if interval is None or not math.isfinite(diff_mean):
        return Decision(UNDECIDED, diff_mean, None, delta, p_adjusted, alpha,
                        False, False, math.isfinite(diff_mean) and abs(diff_mean) >= delta, significant, False)
    lo, hi = interval
    below, above = hi < 0, lo > 0
    big = abs(diff_mean) >= delta
    inside = -delta < lo and hi < delta
    if below and big and significant:
        v = BETTER
    elif above and big and significant:
        v = WORSE
    elif inside:
        v = TIE
    else:
        v = UNDECIDED
    return Decision(v, diff_mean, (lo, hi), delta, p_adjusted, alpha, below, above, big, significant, inside)


def verdict(
    diff_mean: float,
    interval: tuple[float, float] | None,
    delta: float,
    p_adjusted: float | None = None,
    alpha: float = 0.05,
) -> str:
    """:func:`decide`'s verdict alone."""
    return decide(diff_mean, interval, delta, p_adjusted, alpha).verdict
