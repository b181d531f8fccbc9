"""The statistics of the A/B protocol (docs/ab-protocol.md, "The metric and the statistics").

Protocol v2's verdict is decided in :mod:`dormouse.ab.sequential`; this module holds what is reported beside
it (protocol v2, "Reported beside the verdict"): the probability of improvement, the Hodges–Lehmann estimate,
the rate of bad runs, the pooled skewness of the paired differences and the A/A calibration check (the A/A
paired sd's interval against the registered pilot sd). (Protocol v1's margin rule, δ = max(minimum,
2·sd(A/A)), is gone from the package: it could never call an effect smaller than δ better; the published v1
result is re-checked from the equations by tests/flows/test_published_results.py.)

Pure functions on plain sequences of floats; every one of them is defined for any sample size and says
so with ``None`` where a quantity does not exist (one seed has no spread, so no interval).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps

from dormouse.ab.bad_runs import is_bad
from dormouse.ab.sequential import percent


def mean(xs: Sequence[float]) -> float:
    """Arithmetic mean; NaN for an empty sample."""
    return float(np.mean(xs)) if len(xs) else math.nan


def sd(xs: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); ``None`` with fewer than 2 values."""
    return float(np.std(xs, ddof=1)) if len(xs) >= 2 else None


# ---- protocol v2: reported beside the verdict -----------------------------------------------------------


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
    with its Clopper–Pearson interval. ``None`` without runs. What a bad run is, a non-finite bpb (a diverged
    run) included, is the bad-run policy's rule (:func:`dormouse.ab.bad_runs.is_bad`): one owner for both."""
    x = np.asarray(final_bpb, dtype=float)
    if not x.size:
        return None
    bad = sum(is_bad(float(v), ceiling) for v in x)
    return _proportion(int(bad), int(x.size), confidence)


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
    """One compared arm's sd of paired differences, printed beside the A/A check (no test is made on it)."""

    arm: str
    sd: float
    n: int


CALIBRATION_CONFIDENCE = 0.95  # the A/A sd interval's level: false alarms 2.5 % on each side when σ = pilot sd
# The true A/A sd, as a multiple of the pilot sd, at which the check's power is stated: variance ratio 2 and 4
# (the real noise larger: the card overstates power) and 1/2 (smaller: the card was pessimistic).
CALIBRATION_POWER_AT = {"sd × √2": math.sqrt(2.0), "sd × 2": 2.0, "sd ÷ √2": 1 / math.sqrt(2.0)}


@lru_cache(maxsize=256)
def chi2_tails(df: int, confidence: float) -> tuple[float, float]:
    """The lower and upper (1 − confidence)/2 points of χ²_df: the equal-tailed interval's ends."""
    tail = (1 - confidence) / 2
    return float(sps.chi2.ppf(tail, df)), float(sps.chi2.isf(tail, df))


def sd_interval(sd_: float, df: int, confidence: float = CALIBRATION_CONFIDENCE) -> tuple[float, float]:
    """The equal-tailed confidence interval for a normal sample's σ from its sd on ``df`` degrees of freedom:
    df·s²/σ² ~ χ²_df, so σ ∈ [s·√(df/χ²_{df}.isf(a/2)), s·√(df/χ²_{df}.ppf(a/2))], a = 1 − confidence."""
    low, high = chi2_tails(df, confidence)
    return (sd_ * math.sqrt(df / high), sd_ * math.sqrt(df / low))


def sd_interval_power(ratio: float, df: int, confidence: float = CALIBRATION_CONFIDENCE) -> float:
    """P(the interval of :func:`sd_interval` excludes σ0 | the true σ = ratio·σ0), closed form: the interval
    lies above σ0 when df·s²/σ0² > χ²_{df}.isf(a/2), and df·s²/σ0² = ratio²·X with X ~ χ²_df, so that side has
    P(X > isf(a/2)/ratio²); below σ0 likewise P(X < ppf(a/2)/ratio²). At ratio 1 it is 1 − confidence."""
    low, high = chi2_tails(df, confidence)
    r2 = ratio * ratio
    return float(sps.chi2.sf(high / r2, df) + sps.chi2.cdf(low / r2, df))


@dataclass(frozen=True)
class Calibration:
    """The A/A calibration check (docs/ab-protocol.md, "The A/A calibration check"): an interval for the A/A
    arm's paired sd compared with the registered pilot sd the design card assumed."""

    agrees: bool  # the pilot sd lies inside the interval: the design's assumption holds
    side: str | None  # None, "larger" (the real noise is larger than the pilot's) or "smaller"
    aa_sd: float
    aa_n: int
    df: int
    interval: tuple[float, float]  # the confidence interval for the A/A paired sd
    confidence: float
    pilot_sd: float
    power: dict[str, float]  # CALIBRATION_POWER_AT's name -> P(the interval excludes the pilot sd) there
    arms: tuple[ArmSpread, ...]  # the compared arms' paired sds, as numbers beside it

    def sentence(self) -> str:
        lo, hi = self.interval
        head = (f"The A/A paired sd is {self.aa_sd:.4g} ({self.aa_n} replicates); its {percent(self.confidence)} "
                f"interval [{lo:.4g}, {hi:.4g}] (chi-square, {self.df} df)")
        if self.agrees:
            said = f"contains the registered pilot sd {self.pilot_sd:g}: the design's assumption holds."
        elif self.side == "larger":
            said = (f"lies above the registered pilot sd {self.pilot_sd:g}: the real noise is larger, so the power "
                    "is lower than the design card says.")
        else:
            said = (f"lies below the registered pilot sd {self.pilot_sd:g}: the real noise is smaller, so the "
                    "design card was pessimistic.")
        power = ", ".join(f"{p:.2f} at {name}" for name, p in self.power.items())
        arms = ", ".join(f"{a.arm} {a.sd:.4g}" for a in self.arms)
        return (f"{head} {said} The check's power (P(the interval excludes the pilot sd) at {self.aa_n} "
                f"replicates): {power}." + (f" The compared arms' paired sds: {arms}." if arms else ""))


def aa_calibration(aa_diffs: Sequence[float], pilot_sd: float, arm_diffs: Mapping[str, Sequence[float]] | None = None,
                   confidence: float = CALIBRATION_CONFIDENCE) -> Calibration | None:
    """Did the design's assumption hold? The A/A arm (the baseline re-run with its own data-order stream per
    replicate, same init seed, paired with the baseline) measures the noise of a paired difference with no
    effect; its sd's chi-square interval is compared with the registered ``pilot_sd`` the design card was
    simulated at. ``agrees`` when the pilot sd lies inside; otherwise ``side`` says which way the real noise
    differs. The power is stated in closed form (:func:`sd_interval_power`) at the A/A arm's n. The compared
    arms' paired sds are returned beside it as numbers (no test: an arm's effect may change its spread).
    ``None`` when the A/A arm has fewer than 2 replicates (no spread: the report says it could not be made).
    """
    aa = _finite(aa_diffs, "aa_diffs")
    if not (isinstance(pilot_sd, (int, float)) and math.isfinite(pilot_sd) and pilot_sd > 0):
        raise ValueError(f"pilot_sd: must be a finite number > 0, got {pilot_sd!r}")
    if aa.size < 2:
        return None
    s, df = float(np.std(aa, ddof=1)), aa.size - 1
    lo, hi = sd_interval(s, df, confidence)
    side = "larger" if lo > pilot_sd else "smaller" if hi < pilot_sd else None
    power = dict(_power_at(df, confidence))  # a copy: the cached one is shared
    arms = tuple(ArmSpread(a, float(np.std(v, ddof=1)), int(v.size))
                 for a, v in ((a, _finite(v, f"arm_diffs[{a!r}]")) for a, v in (arm_diffs or {}).items())
                 if v.size >= 2)
    return Calibration(side is None, side, s, int(aa.size), df, (lo, hi), confidence, float(pilot_sd), power, arms)


@lru_cache(maxsize=256)
def _power_at(df: int, confidence: float) -> dict[str, float]:
    """The check's power at each of CALIBRATION_POWER_AT's true sds (the same for every check at this df)."""
    return {name: sd_interval_power(r, df, confidence) for name, r in CALIBRATION_POWER_AT.items()}


@dataclass(frozen=True)
class PooledSkewness:
    """The skewness of the paired differences, pooled over arms (docs/ab-protocol.md, "Reported beside")."""

    estimate: float  # scipy.stats.skew(bias=False) of the pooled standardised differences
    n: int  # differences pooled
    se: float  # its standard error for normal data of that size (the usual √(6N(N−1)/((N−2)(N+1)(N+3))))
    arms: tuple[str, ...]  # the arms pooled


def pooled_skewness(diffs: Mapping[str, Sequence[float]]) -> PooledSkewness | None:
    """Each arm's paired differences centred on their own mean and scaled by their own sd (ddof 1), so that
    arms with different effects and spreads share one shape, pooled, and their sample skewness taken with
    ``scipy.stats.skew(bias=False)``: the adjusted Fisher–Pearson G1, less biased towards 0 than the plain
    moment ratio at the few tens of values a comparison has (on normal data both have mean ≈ 0). Arms with
    fewer than 3 differences or no spread are left out; ``None`` when fewer than 3 values remain."""
    parts, names = [], []
    for arm, xs in diffs.items():
        x = _finite(xs, f"diffs[{arm!r}]")
        if x.size >= 3 and float(np.std(x, ddof=1)) > 0:
            parts.append((x - x.mean()) / np.std(x, ddof=1))
            names.append(arm)
    if not parts:
        return None
    z = np.concatenate(parts)
    n = int(z.size)
    se = math.sqrt(6.0 * n * (n - 1) / ((n - 2) * (n + 1) * (n + 3)))
    return PooledSkewness(float(sps.skew(z, bias=False)), n, se, tuple(names))
