"""The statistics of the A/B protocol (docs/ab-protocol.md, "The metric and the statistics").

Protocol v2's verdict is decided in :mod:`dormouse.ab.sequential`; this module holds what is reported beside
it (protocol v2, "Reported beside the verdict"): the probability of improvement, the Hodges–Lehmann estimate,
the rate of bad runs and the A/A calibration check. (Protocol v1's margin rule, δ = max(minimum, 2·sd(A/A)),
is gone from the package: it could never call an effect smaller than δ better; the published v1 result is
re-checked from the equations by tests/flows/test_published_results.py.)

Pure functions on plain sequences of floats; every one of them is defined for any sample size and says
so with ``None`` where a quantity does not exist (one seed has no spread, so no interval).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


def mean(xs: Sequence[float]) -> float:
    """Arithmetic mean; NaN for an empty sample."""
    return float(np.mean(xs)) if len(xs) else math.nan


def sd(xs: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); ``None`` with fewer than 2 values."""
    return float(np.std(xs, ddof=1)) if len(xs) >= 2 else None


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
