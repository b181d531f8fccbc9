"""What the A/B report states beside the verdict (docs/ab-protocol.md, "Reported beside the verdict"): probability
of improvement, Hodges–Lehmann estimate, bad-run rate, pooled skewness and the A/A calibration check; the verdict
itself is :mod:`dormouse.ab.rule.sequential`'s. Pure functions on floats, defined at any sample size, returning ``None``
where a quantity does not exist (one seed has no spread)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps

from dormouse.ab.rule.bad_runs import is_bad
from dormouse.ab.rule.sequential import percent


def mean(xs: Sequence[float]) -> float:
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
    """P(Δ < 0) over replicates (0 is no improvement) with its Clopper–Pearson interval; ``None`` without any."""
    x = _finite(diffs, "diffs")
    return _proportion(int(np.sum(x < 0)), int(x.size), confidence) if x.size else None


def bad_run_rate(final_bpb: Sequence[float], ceiling: float, confidence: float = 0.95) -> Proportion | None:
    """The share of runs above the ceiling with its Clopper–Pearson interval; ``None`` without runs. What is bad is
    :func:`dormouse.ab.rule.bad_runs.is_bad`'s rule."""
    x = np.asarray(final_bpb, dtype=float)
    if not x.size:
        return None
    bad = sum(is_bad(float(v), ceiling) for v in x)
    return _proportion(int(bad), int(x.size), confidence)


def _signed_rank_counts(n: int) -> np.ndarray:
    """Sign patterns per Wilcoxon signed-rank sum T = 0..n(n+1)/2: the exact null is counts / 2^n."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    return counts


@dataclass(frozen=True)
class HodgesLehmann:
    """Median of the Walsh averages (x_i + x_j)/2, i ≤ j, and its signed-rank interval (Hollander & Wolfe, ch. 3)."""

    estimate: float
    interval: tuple[float, float] | None  # None where n is too small for the asked confidence
    confidence: float | None  # the interval's exact confidence, 1 − 2·P(T ≤ k − 1) ≥ the one asked


def hodges_lehmann(diffs: Sequence[float], confidence: float = 0.95) -> HodgesLehmann | None:
    """Estimate and interval [W_(k), W_(M+1−k)], M = n(n+1)/2, k the largest with P(T ≤ k − 1) ≤ (1 − confidence)/2;
    the interval is ``None`` when no k ≥ 1 qualifies (n ≤ 5 at 95 %)."""
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
    tail = (1 - confidence) / 2
    return float(sps.chi2.ppf(tail, df)), float(sps.chi2.isf(tail, df))


def sd_interval(sd_: float, df: int, confidence: float = CALIBRATION_CONFIDENCE) -> tuple[float, float]:
    """σ's equal-tailed interval from s on ``df``: df·s²/σ² ~ χ²_df, so σ ∈ [s·√(df/χ².isf(a/2)),
    s·√(df/χ².ppf(a/2))], a = 1 − confidence."""
    low, high = chi2_tails(df, confidence)
    return (sd_ * math.sqrt(df / high), sd_ * math.sqrt(df / low))


def sd_interval_power(ratio: float, df: int, confidence: float = CALIBRATION_CONFIDENCE) -> float:
    """P(the interval excludes σ0 | σ = ratio·σ0) = P(X > isf(a/2)/ratio²) + P(X < ppf(a/2)/ratio²), X ~ χ²_df."""
    low, high = chi2_tails(df, confidence)
    r2 = ratio * ratio
    return float(sps.chi2.sf(high / r2, df) + sps.chi2.cdf(low / r2, df))


@dataclass(frozen=True)
class Calibration:
    """The A/A calibration check: an interval for the A/A arm's paired sd against the registered pilot sd."""

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
    """Whether the design's noise assumption held: the A/A arm's paired sd interval against ``pilot_sd`` (``agrees``
    when inside, else ``side``), with its closed-form power. Compared arms' sds ride along untested (an effect may
    change a spread). ``None`` below 2 A/A replicates."""
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
    """The check's power at each of CALIBRATION_POWER_AT's true sds."""
    return {name: sd_interval_power(r, df, confidence) for name, r in CALIBRATION_POWER_AT.items()}


@dataclass(frozen=True)
class PooledSkewness:
    """The skewness of the paired differences, pooled over arms (docs/ab-protocol.md, "Reported beside")."""

    estimate: float  # scipy.stats.skew(bias=False) of the pooled standardised differences
    n: int  # differences pooled
    se: float  # its standard error for normal data of that size (the usual √(6N(N−1)/((N−2)(N+1)(N+3))))
    arms: tuple[str, ...]  # the arms pooled


def pooled_skewness(diffs: Mapping[str, Sequence[float]]) -> PooledSkewness | None:
    """Each arm's differences standardised by its own mean and sd, pooled, then ``scipy.stats.skew(bias=False)``
    (G1: less biased toward 0 at a few tens of values). Arms under 3 values or without spread are left out; ``None``
    below 3 values."""
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
