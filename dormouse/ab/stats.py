"""The statistics of the A/B protocol (docs/ab-protocol.md, "The metric and the statistics").

Protocol v2's verdict is decided in :mod:`dormouse.ab.sequential`; this module holds what is reported beside
it (protocol v2, "Reported beside the verdict"): the probability of improvement, the Hodges–Lehmann estimate,
the rate of bad runs and the A/A calibration check. The v1 functions (``noise_floor``, ``decide``, ``holm``,
...) stay until the report stops importing them.

Pure functions on plain sequences of floats; every one of them is defined for any sample size and says
so with ``None`` where a quantity does not exist (one seed has no spread, so no interval).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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


# ---- protocol v2: reported beside the verdict -----------------------------------------------------------

CALIBRATION_LEVEL = 0.05  # the A/A calibration check's level, split over the arms (Bonferroni)


def _finite(xs: Sequence[float], name: str) -> np.ndarray:
    x = np.asarray(xs, dtype=float)
    if x.ndim != 1 or not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: must be a list of finite numbers, got {list(xs)}")
    return x


@dataclass(frozen=True)
class Proportion:
    """k of n, its estimate k/n and an exact (Clopper–Pearson) interval: scipy.stats.binomtest."""

    k: int
    n: int
    estimate: float
    interval: tuple[float, float]
    confidence: float


def _proportion(k: int, n: int, confidence: float) -> Proportion:
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return Proportion(k, n, k / n, (float(ci.low), float(ci.high)), confidence)


def prob_improvement(diffs: Sequence[float], confidence: float = 0.95) -> Proportion | None:
    """P(Δ < 0): the share of replicates in which the arm's bpb is below the baseline's (a difference of
    exactly 0 is no improvement), with its Clopper–Pearson interval. ``None`` without replicates."""
    x = _finite(diffs, "diffs")
    return _proportion(int(np.sum(x < 0)), int(x.size), confidence) if x.size else None


def bad_run_rate(final_bpb: Sequence[float], ceiling: float, confidence: float = 0.95) -> Proportion | None:
    """The share of an arm's runs whose final bpb lies above the registered ceiling (a run that did not learn),
    with its Clopper–Pearson interval. ``None`` without runs. A non-finite bpb (a diverged run) is bad."""
    x = np.asarray(final_bpb, dtype=float)
    if not x.size:
        return None
    bad = ~np.isfinite(x) | (np.nan_to_num(x, nan=math.inf) > ceiling)
    return _proportion(int(bad.sum()), int(x.size), confidence)


def _signed_rank_counts(n: int) -> np.ndarray:
    """Number of sign patterns giving each Wilcoxon signed-rank sum T = 0..n(n+1)/2 (no ties): the exact null
    distribution is counts / 2^n (dynamic programme over the ranks 1..n)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    return counts


@dataclass(frozen=True)
class HodgesLehmann:
    """The Hodges–Lehmann estimate of the paired differences (median of the Walsh averages (x_i + x_j)/2,
    i ≤ j) and its distribution-free interval from the signed-rank test (Hollander & Wolfe, ch. 3)."""

    estimate: float
    interval: tuple[float, float] | None  # None where n is too small for the asked confidence
    confidence: float | None  # the interval's exact confidence, 1 − 2·P(T ≤ k − 1) ≥ the one asked


def hodges_lehmann(diffs: Sequence[float], confidence: float = 0.95) -> HodgesLehmann | None:
    """Hodges–Lehmann estimate and interval [W_(k), W_(M+1−k)] of the sorted Walsh averages W, M = n(n+1)/2,
    with k the largest integer such that P(T ≤ k − 1) ≤ (1 − confidence)/2 under the exact signed-rank null.
    ``None`` without replicates; the interval is ``None`` when no k ≥ 1 qualifies (n ≤ 5 at 95 %)."""
    x = _finite(diffs, "diffs")
    if not x.size:
        return None
    i, j = np.triu_indices(x.size)
    walsh = np.sort((x[i] + x[j]) / 2.0)
    cdf = np.cumsum(_signed_rank_counts(x.size)) / 2.0 ** x.size
    k = int(np.sum(cdf <= (1 - confidence) / 2))  # P(T <= k-1) <= tail for k-1 = 0..k-1
    if k < 1:
        return HodgesLehmann(float(np.median(walsh)), None, None)
    interval = (float(walsh[k - 1]), float(walsh[walsh.size - k]))
    return HodgesLehmann(float(np.median(walsh)), interval, float(1 - 2 * cdf[k - 1]))


@dataclass(frozen=True)
class ArmSpread:
    """One arm's spread against the A/A spread: F = s²(arm) / s²(A/A)."""

    arm: str
    sd: float
    df: int
    ratio: float  # variance ratio s²(arm) / s²(A/A)
    interval: tuple[float, float]  # its confidence interval at 1 − level/k: ratio / F quantiles
    p: float  # two-sided F-test p of equal variances


@dataclass(frozen=True)
class Calibration:
    """The A/A calibration check (docs/ab-protocol.md, "The A/A calibration check")."""

    agrees: bool  # every arm's two-sided F-test p ≥ level / k
    aa_sd: float
    aa_df: int
    level: float  # the family-wise level of the check over the k arms
    arms: tuple[ArmSpread, ...]
    disagree: tuple[str, ...]  # arms whose spread does not agree with the A/A spread

    def sentence(self) -> str:
        worst = min(self.arms, key=lambda a: a.p)
        if self.agrees:
            return (f"The A/A spread agrees with the arms': sd(A/A) {self.aa_sd:.4g} ({self.aa_df} df); the "
                    f"smallest two-sided F-test p is {worst.p:.3g} ({worst.arm}, variance ratio "
                    f"{worst.ratio:.3g}) ≥ {self.level:g}/{len(self.arms)}.")
        return (f"The A/A spread does not agree with the arms': sd(A/A) {self.aa_sd:.4g} ({self.aa_df} df); "
                f"the variance ratio of {', '.join(self.disagree)} to the A/A differs at level "
                f"{self.level:g}/{len(self.arms)} (smallest p {worst.p:.3g}, ratio {worst.ratio:.3g}): the A/A "
                f"arm does not measure the noise the arms have.")


def aa_calibration(aa_diffs: Sequence[float], arm_diffs: Mapping[str, Sequence[float]],
                   level: float = CALIBRATION_LEVEL) -> Calibration | None:
    """Does the A/A arm's spread (the baseline re-run with its own data-order stream per replicate, same
    init seed, paired with the baseline) agree with each arm's paired-difference spread?

    For each of the k arms a two-sided F-test of s²(arm) = s²(A/A) at level/k (Bonferroni), with
    F = s²(arm)/s²(A/A) on (n_arm − 1, n_AA − 1) df; ``agrees`` when none rejects. The A/A and arm differences
    share the baseline's runs, which correlates the two variances positively and makes the test conservative
    (it fails less often than its level). ``None`` when the A/A arm or every arm has fewer than 2 replicates
    (no spread to compare: the report says the check could not be made).
    """
    aa = _finite(aa_diffs, "aa_diffs")
    arms = {a: _finite(v, f"arm_diffs[{a!r}]") for a, v in arm_diffs.items()}
    arms = {a: v for a, v in arms.items() if v.size >= 2}
    if aa.size < 2 or not arms:
        return None
    s2_aa, df_aa = float(np.var(aa, ddof=1)), aa.size - 1
    each = level / len(arms)
    out = []
    for a, v in arms.items():
        s2, df = float(np.var(v, ddof=1)), v.size - 1
        ratio = s2 / s2_aa if s2_aa > 0 else math.inf
        p = float(min(1.0, 2 * min(sps.f.cdf(ratio, df, df_aa), sps.f.sf(ratio, df, df_aa))))
        ci = (ratio / sps.f.isf(each / 2, df, df_aa), ratio / sps.f.ppf(each / 2, df, df_aa))
        out.append(ArmSpread(a, math.sqrt(s2), df, ratio, (float(ci[0]), float(ci[1])), p))
    disagree = tuple(a.arm for a in out if a.p < each)
    return Calibration(not disagree, math.sqrt(s2_aa), df_aa, level, tuple(out), disagree)
