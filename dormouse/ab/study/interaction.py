"""A registered study's primary question: does each arm's effect against the baseline change as the axis grows? The
rule is docs/ab-protocol.md, "A registered study: the primary question": the contrast L = Σ c_p·m_p of each point's
mean paired difference (the change along the OLS line in log2(value)), se² = Σ c_p²·s_p²/n_p on df = min(n_p − 1);
grows/shrinks at Bonferroni α/(2·n_arms), flat by TOST against ±τ at α per arm; under the registered multiplicity
``holm`` both kinds of claim by Holm's step-down over the arms (:mod:`dormouse.ab.rule.family`), so each is
family-wise at α. :func:`study_card` simulates the whole study (every point's sequential procedure, then this rule)
for the error rates. Pure numpy/scipy, scipy imported where it computes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import numpy as np

from dormouse.ab.reporting.jsonable import jsonable
from dormouse.ab.rule import sequential as sq
from dormouse.ab.rule.family import BONFERRONI, HOLM, holm_levels, multiplicity_problems, ordinal

GROWS, SHRINKS, FLAT, UNDECIDED = "grows", "shrinks", "flat", "undecided"
INVALID = "invalid"  # the looks' word for an arm that did not run as asked (dormouse.ab.rule.looks.INVALID)
VERDICTS = (GROWS, SHRINKS, FLAT, UNDECIDED)  # the rule's codes index this; INVALID is no code of the rule
_G, _S, _F, _U = 0, 1, 2, 3
WEIGHT_ZERO = 1e-12  # |c_p| below this is rounding of a point at the log2 centre: that point is not weighed


@dataclass(frozen=True)
class InteractionDesign(sq.Checked):
    """The study's registered primary rule (docs/ab-protocol.md, "A registered study: the primary question")."""

    noun = "interaction design"

    alpha: float  # family-wise error of grows/shrinks over the tested arms; of flat too under holm (else per arm)
    smallest_change: float  # τ, bpb > 0: the smallest change of Δ from the first to the last point of interest
    points: tuple[float, ...]  # the axis values, > 0, strictly ascending, at least 2
    n_arms: int  # the tested arms: the family, fixed at registration (a failed arm stays in it)
    alpha_holdback: float = 1.0  # registered, in (0, 1]: the tests run at α × holdback while α stays the claim
    #                              (the margin the study card shows the points' early stopping needs)
    multiplicity: str = BONFERRONI  # bonferroni: grows/shrinks at α/n_arms, flat at α per arm; holm: Holm's
    #                                 step-down over the arms for each kind of claim (dormouse.ab.rule.family)
    positions: tuple[float, ...] | None = None  # each point's x; None: log2 of its value. Given, the change is per
    #                                             unit of x (a width ladder: per decade of training FLOPs)
    position_name: str = ""  # what x is, for the sentences ("log10 training FLOPs")

    def field_problems(self) -> list[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad field; empty when the design is usable (the one check)."""
        out = sq.alpha_problems(self.alpha)
        if not sq._finite(self.smallest_change) or self.smallest_change <= 0:
            out.append(("smallest_change", f"{self.smallest_change} must be a finite number > 0 (bpb): "
                        "`flat` needs a margin"))
        pts = self.points
        if not isinstance(pts, (tuple, list)) or len(pts) < 2:
            out.append(("points", f"{pts!r} must hold at least 2 axis values (a change needs two points)"))
        elif not all(sq._finite(v) and not isinstance(v, bool) for v in pts):
            out.append(("points", f"{list(pts)} must be finite numbers"))
        elif pts[0] <= 0 or any(b <= a for a, b in zip(pts, pts[1:])):
            out.append(("points", f"{list(pts)} must be > 0 and strictly ascending (the contrast is in log2)"))
        out += multiplicity_problems(self.multiplicity)
        xs = self.positions
        if xs is not None and (len(xs) != len(pts) or not all(sq._finite(v) for v in xs)
                               or any(b <= a for a, b in zip(xs, xs[1:]))):
            out.append(("positions", f"{xs} must be one finite, strictly ascending x per point"))
        return out + sq.family_problems(self.n_arms, self.alpha_holdback, "the tests run at")

    def x(self) -> np.ndarray:
        """Each point's x: the registered positions, else log2 of the axis value."""
        return np.asarray(self.positions if self.positions is not None else np.log2(self.points), dtype=float)

    @property
    def span(self) -> float:
        """What the change L is over: the first to the last point in log2 (x per point: one unit of x)."""
        u = self.x()
        return float(u[-1] - u[0]) if self.positions is None else 1.0

    def weights(self) -> np.ndarray:
        """c_p of the change: :func:`weights_at` of x over the span."""
        return weights_at(self.x(), self.span)

    @property
    def test_alpha(self) -> float:
        """The α the tests run at: the registered α times the registered hold-back (α stays the claim)."""
        return self.alpha * self.alpha_holdback

    @property
    def sup_level(self) -> float:
        """One-sided level of grows (and of shrinks): α/(2·n_arms) at α × hold-back (Bonferroni)."""
        return self.test_alpha / (2 * self.n_arms)

    @property
    def point_alpha(self) -> float:
        """Each point's α: α/P, as the point verdicts are a family over points × arms."""
        return self.alpha / len(self.points)


def point_design(design: InteractionDesign, sesoi: float, looks: Sequence[int],
                 alpha_holdback: float = 1.0, multiplicity: str = BONFERRONI) -> sq.Design:
    """The sequential design of every point: α/P, the registered SESOI, looks, hold-back, arms and correction."""
    design.check()
    return sq.Design(alpha=design.point_alpha, sesoi=sesoi, looks=tuple(looks), n_arms=design.n_arms,
                     alpha_holdback=alpha_holdback, multiplicity=multiplicity)


def contrast_weights(points: Sequence[float]) -> np.ndarray:
    """c_p = (u_p − ū)·(u_P − u_1)/Σ(u_q − ū)², u = log2(points): Σ c_p·m_p is the OLS slope times the log2 range."""
    u = np.log2(np.asarray(points, dtype=float))
    return weights_at(u, float(u[-1] - u[0]))


def weights_at(u: np.ndarray, span: float) -> np.ndarray:
    """c_p = (u_p − ū)·span/Σ(u_q − ū)²: Σ c_p·m_p is the OLS slope of m on u times ``span``."""
    d = u - u.mean()
    c = d * span / float(np.sum(d * d))
    return np.where(np.abs(c) < WEIGHT_ZERO, 0.0, c)  # a point at the centre weighs exactly 0, not 1e-17



def curvature_weights(points: Sequence[float]) -> np.ndarray | None:
    """q with Σ q_p·m_p = the fitted quadratic in log2(value) at the middle minus the chord between its ends (three
    log-equally spaced points: (−½, 1, −½)). Descriptive; None below three points."""
    if len(points) < 3:
        return None
    u = np.log2(np.asarray(points, dtype=float))
    d = u - u.mean()
    x = np.stack([np.ones_like(d), d, d * d], axis=1)
    return -np.linalg.pinv(x)[2] * (u[-1] - u[0]) ** 2 / 4.0


def _contrast(c: np.ndarray, mean: np.ndarray, sd: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, ...]:
    """L = Σ c_p·m_p, se = √Σ c_p²·s_p²/n_p and df = min(n_p − 1) over points with c_p ≠ 0 (last axis: points). Not
    Welch's df: n_p is a stopping time and the stopped mean and sd are selected, which took the type-I error to 0.07
    at α 0.05 in simulation; the smallest df keeps the card's rates."""
    used = c != 0
    est = np.sum(np.where(used, c * mean, 0.0), axis=-1)
    var = np.sum(np.where(used, c * c * sd * sd / n, 0.0), axis=-1)
    df = np.min(np.where(used, n - 1, np.inf), axis=-1)  # conservative: the fewest replicates a weighed point has
    return est, np.sqrt(var), df


def _critical(design: InteractionDesign, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """t* = t_df.isf(α/(2·n_arms)) (grows/shrinks) and t_eq = t_df.isf(α) (each TOST test), α × hold-back."""
    from scipy import stats as sps  # here, not at the top: a registry validating a design computes nothing

    return sps.t.isf(design.sup_level, df), sps.t.isf(design.test_alpha, df)


class ArmLevels(NamedTuple):
    """Where an arm stood in its family under Holm: each test's level, the arm's rank and the rank whose level
    applied (its own, or where the step-down stopped); :func:`dormouse.ab.rule.family.holm_levels`."""

    level: float  # the two-sided p of L = 0 is compared with this
    rank: int
    step: int
    eq_level: float  # the TOST p (each one-sided test) is compared with this
    eq_rank: int
    eq_step: int


def _p_values(design: InteractionDesign, est: np.ndarray, se: np.ndarray,
              df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two-sided p of L = 0 and the TOST p (the larger of the two one-sided p's against ±τ), on arrays: what
    Holm orders, and what each decision states."""
    from scipy import stats as sps  # here, not at the top: a registry validating a design computes nothing

    tau = design.smallest_change
    est, se, df = (np.asarray(v, dtype=float) for v in (est, se, df))
    spread = se > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(spread, est / se, np.where(est != 0, np.copysign(np.inf, est), 0.0))
        p = 2 * sps.t.sf(np.abs(t), df)
        p_lo = np.where(spread, sps.t.sf((est + tau) / se, df), (est <= -tau).astype(float))
        p_hi = np.where(spread, sps.t.sf((tau - est) / se, df), (est >= tau).astype(float))
    finite = np.isfinite(est)  # an invalid arm (NaN L) has no test: no p, so Holm never rejects it
    return np.where(finite, p, np.nan), np.where(finite, np.maximum(p_lo, p_hi), np.nan)


def _holm(design: InteractionDesign, est: np.ndarray, se: np.ndarray, df: np.ndarray) -> tuple:
    """Holm's step-down over the registered family (axis 0: the arms; NaN est: an arm without a test), for
    grows/shrinks on the two-sided p and for flat on the TOST p, each at α × hold-back."""
    p, p_tost = _p_values(design, est, se, df)
    return (holm_levels(p, design.test_alpha, design.n_arms),
            holm_levels(p_tost, design.test_alpha, design.n_arms))


def _family_critical(design: InteractionDesign, est: np.ndarray, se: np.ndarray,
                     df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """t* and t_eq of each arm of the family (axis 0): Bonferroni's (:func:`_critical`), or under holm each arm's
    t at its own Holm level (t_df.isf(level/2) two-sided, t_df.isf(eq_level) for each TOST test)."""
    from scipy import stats as sps  # here, not at the top: a registry validating a design computes nothing

    if design.multiplicity != HOLM:
        return _critical(design, df)
    sup, eq = _holm(design, est, se, df)
    return sps.t.isf(sup.level / 2, df), sps.t.isf(eq.level, df)


def _rule(design: InteractionDesign, est: np.ndarray, se: np.ndarray, df: np.ndarray,
          critical: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """The rule on arrays (axis 0: the family under holm): (code, lo, hi, eq_lo, eq_hi, smaller_than_change).
    grows: L + t*·se < 0; shrinks: L − t*·se > 0 (checked first); flat: −τ < L − t_eq·se and L + t_eq·se < τ.
    ``critical``: (t*, t_eq) when the caller has them; else the family's (:func:`_family_critical`)."""
    t_sup, t_eq = _family_critical(design, est, se, df) if critical is None else critical
    lo, hi = est - t_sup * se, est + t_sup * se
    eq_lo, eq_hi = est - t_eq * se, est + t_eq * se
    tau = design.smallest_change  # registered before any run, never estimated from the data
    grows, shrinks = hi < 0, lo > 0
    flat = (-tau < eq_lo) & (eq_hi < tau)
    code = np.where(grows, _G, np.where(shrinks, _S, np.where(flat, _F, _U)))
    return code, lo, hi, eq_lo, eq_hi, (grows | shrinks) & flat


@dataclass(frozen=True)
class PointRow:
    """One point of an arm's change: what its point decision used, and its weight in L."""

    value: float  # the axis value
    n: int  # paired differences the point decision used
    mean: float  # their mean (NaN with none)
    sd: float  # their sd, ddof 1 (NaN with fewer than 2)
    weight: float  # c_p


@dataclass(frozen=True)
class InteractionDecision:
    """One arm's change of Δ over the axis, with every number the rule compared (docs/ab-protocol.md)."""

    verdict: str  # grows | shrinks | flat | undecided | invalid
    estimate: float  # L, bpb: the change of Δ from the first to the last point along the fitted line
    se: float
    df: float  # min(n_p − 1) over the points with c_p ≠ 0 (conservative; :func:`_contrast` says why)
    interval: tuple[float, float]  # L ∓ t*·se, t* = t_df.isf(level/2): level 1 − α/n_arms under Bonferroni
    eq_interval: tuple[float, float]  # L ∓ t_eq·se, t_eq = t_df.isf(eq_level): flat needs it inside (−τ, +τ)
    t_sup: float
    t_eq: float
    p: float  # two-sided p of L = 0 (Student t, df), compared with level
    p_tost: float  # max of the two one-sided TOST p's against ±τ, compared with eq_level
    smaller_than_change: bool  # grows/shrinks and the TOST also shows |L| < τ
    points: tuple[PointRow, ...]
    curvature: float  # descriptive, never decided (NaN with 2 points)
    curvature_se: float
    alpha: float
    smallest_change: float
    n_arms: int
    alpha_holdback: float = 1.0  # the registered hold-back: the tests ran at alpha × this
    calibration: bool = False  # the A/A arm's change: reported beside, never in the family
    reason: str = ""  # why the decision is invalid ("" otherwise)
    multiplicity: str = BONFERRONI  # the registered correction over the family (the calibration: bonferroni)
    level: float = math.nan  # the two-sided level p was compared with: α/n_arms, or the arm's Holm level
    eq_level: float = math.nan  # each TOST test's level: α (Bonferroni: per arm), or the arm's Holm level
    rank: int = 0  # holm: the rank of p in the family (1 = smallest); 0 under Bonferroni
    step: int = 0  # holm: the rank whose level p was compared with (the step-down stops at the first p not
    #                below its level, and every later arm is compared with that level); 0 under Bonferroni
    eq_rank: int = 0  # the same for the TOST p
    eq_step: int = 0
    position_name: str = ""  # the design's x when registered ("log10 training FLOPs"): L is per unit of it

    def to_dict(self) -> dict:
        """The decision as JSON holds it (NaN as null; no position_name along log2 of the axis)."""
        d = asdict(self)
        if not self.position_name:
            del d["position_name"]
        return jsonable(d)

    @classmethod
    def from_dict(cls, d: Mapping) -> InteractionDecision:
        nan = _nan_for_none
        rows = tuple(PointRow(**{k: nan(v) for k, v in r.items()}) for r in d["points"])
        kw = {k: nan(v) for k, v in d.items() if k != "points"}
        kw["interval"], kw["eq_interval"] = tuple(map(nan, d["interval"])), tuple(map(nan, d["eq_interval"]))
        return cls(**{**kw, "points": rows})

    def sentence(self, arm: str, baseline: str, axis: str) -> str:
        return interaction_sentence(self, arm, baseline, axis)


def _nan_for_none(v: object) -> object:
    return math.nan if v is None else v


def interaction_sentence(d: InteractionDecision, arm: str, baseline: str, axis: str) -> str:
    """The sentence of one decision: what was compared, at which level, and the verdict."""
    first, last = d.points[0].value, d.points[-1].value
    who = f"{arm} vs {baseline}" + (" (A/A calibration, not in the family)" if d.calibration else "")
    if d.verdict == INVALID:
        return f"{who}: the change of the paired difference over {axis} is invalid: {d.reason}."
    weights = ", ".join(f"{r.value:g}: {r.weight:+.3g}" for r in d.points)
    along = (f"per unit of {d.position_name}, along the line fitted on it over {axis} = {first:g} to {last:g},"
             if d.position_name else
             f"from {axis} = {first:g} to {last:g} along the line fitted on log2 {axis}")
    what = (f"the change of the mean paired difference {along} is L {d.estimate:+.4f} bpb (weights {weights}; "
            f"se {d.se:.4f}, df {d.df:g}, the fewest replicates of a weighed point less one)")
    held = sq.holdback_words(d.alpha, d.alpha_holdback)
    level = d.alpha * d.alpha_holdback
    eq_ok = -d.smallest_change < d.eq_interval[0] and d.eq_interval[1] < d.smallest_change
    tau = f"(−{d.smallest_change:g}, +{d.smallest_change:g})"
    sig = "<" if d.verdict in (GROWS, SHRINKS) else "≥"
    if d.multiplicity == HOLM:
        sup = (f"its {sq.percent(1 - d.level)} interval [{d.interval[0]:+.4f}, {d.interval[1]:+.4f}] (two-sided p "
               f"{d.p:.3g} {sig} {d.level:.3g}, family-wise α {d.alpha:g} over {d.n_arms} arm(s), "
               f"{_holm_words(d, d.rank, d.step, 'p')}{'; ' + held if held else ''})")
        eq = (f"the TOST interval [{d.eq_interval[0]:+.4f}, {d.eq_interval[1]:+.4f}] "
              f"{'lies' if eq_ok else 'does not lie'} inside {tau} (TOST p {d.p_tost:.3g} {'<' if eq_ok else '≥'} "
              f"{d.eq_level:.3g}, family-wise α {d.alpha:g} over {d.n_arms} arm(s), "
              f"{_holm_words(d, d.eq_rank, d.eq_step, 'TOST p')}{'; ' + held if held else ''})")
    else:
        conf = sq.percent(1 - d.alpha * d.alpha_holdback / d.n_arms)  # two-sided: 2·α/(2·n_arms) outside
        sup = (f"its {conf} interval [{d.interval[0]:+.4f}, {d.interval[1]:+.4f}] (two-sided p {d.p:.3g} "
               f"{sig} {level / d.n_arms:.3g}, family-wise α {d.alpha:g} "
               f"over {d.n_arms} arm(s), Bonferroni{'; ' + held if held else ''})")
        eq = (f"the TOST interval [{d.eq_interval[0]:+.4f}, {d.eq_interval[1]:+.4f}] "
              f"{'lies' if eq_ok else 'does not lie'} inside {tau} (TOST p {d.p_tost:.3g} {'<' if eq_ok else '≥'} "
              f"{level:g})")
    if d.verdict in (GROWS, SHRINKS):
        side, way = ("below", "falls") if d.verdict == GROWS else ("above", "rises")
        s = f"{who}: the paired difference {way} as {axis} grows ({d.verdict}): {what}; {sup} lies {side} 0."
        if d.smaller_than_change:
            s += f" The change is smaller than the smallest change of interest {d.smallest_change:g} bpb: {eq}."
        return s
    if d.verdict == FLAT:
        return (f"{who}: the paired difference changes by less than {d.smallest_change:g} bpb from {axis} = "
                f"{first:g} to {last:g} (flat): {what}; {eq}.")
    return (f"{who}: the change over {axis} is undecided: {what}; {sup} contains 0, and {eq}; the maximum was "
            "reached and the change is undecided.")


def _holm_words(d: InteractionDecision, rank: int, step: int, what: str) -> str:
    """Where Holm's step-down put the arm: its rank among the family's p's and the level it was compared with."""
    of = f"Holm's step-down: the {ordinal(rank)} smallest {what} of {d.n_arms}"
    held = "α × hold-back" if d.alpha_holdback != 1.0 else "α"
    at = f"{held}/{d.n_arms - step + 1}"
    if step == rank:
        return f"{of}, compared with {at}"
    return f"{of}; the step-down stopped at the {ordinal(step)}, so it is compared with {at}"


def _point_rows(design: InteractionDesign, diffs_by_point: Sequence[Sequence[float]]) -> tuple[PointRow, ...]:
    """Each point's n, mean, sd (ddof 1) and weight c_p; refuses a wrong count of points or a non-finite value."""
    if len(diffs_by_point) != len(design.points):
        raise ValueError(f"diffs_by_point: one sequence of paired differences per point ({len(design.points)}: "
                         f"{list(design.points)}), got {len(diffs_by_point)}")
    rows = []
    for value, w, xs in zip(design.points, design.weights(), diffs_by_point):
        x = np.asarray(xs, dtype=float)
        if not np.all(np.isfinite(x)):
            raise ValueError(f"diffs_by_point[{value:g}]: a paired difference is not finite: {list(xs)}")
        mean = float(x.mean()) if x.size else math.nan
        sd = float(x.std(ddof=1)) if x.size >= 2 else math.nan
        rows.append(PointRow(value=float(value), n=int(x.size), mean=mean, sd=sd, weight=float(w)))
    return tuple(rows)


def _curvature(design: InteractionDesign, rows: tuple[PointRow, ...]) -> tuple[float, float]:
    """The curvature contrast Σ q_p·m_p and its se √Σ q_p²·s_p²/n_p (descriptive; NaN without it)."""
    q = curvature_weights(design.points)
    if q is None or any(r.n < 2 for r in rows):
        return math.nan, math.nan
    m, s, n = (np.array([getattr(r, k) for r in rows], dtype=float) for k in ("mean", "sd", "n"))
    return float(np.sum(q * m)), float(math.sqrt(np.sum(q * q * s * s / n)))


def decide_interaction(design: InteractionDesign, diffs_by_point: Sequence[Sequence[float]],
                       point_invalid: bool = False, calibration: bool = False,
                       family: ArmLevels | None = None) -> InteractionDecision:
    """One arm's change over the axis from the differences each point's decision used, in the design's order. Under
    holm a tested arm's levels come from its family (``family``, which :func:`decide_all` computes); the A/A
    calibration, never in the family, is decided at the per-arm levels (α/n_arms two-sided, α for each TOST test).
    Raises ``ValueError`` on a bad design, a wrong count of points, a non-finite value, or a tested arm under holm
    without its family's levels."""
    design.check()
    holm = design.multiplicity == HOLM and not calibration
    if holm and family is None:
        raise ValueError("multiplicity holm: a tested arm's levels depend on every arm's p; decide the family with "
                         "decide_all")
    rows = _point_rows(design, diffs_by_point)
    curv, curv_se = _curvature(design, rows)
    common = dict(points=rows, curvature=curv, curvature_se=curv_se, alpha=design.alpha,
                  smallest_change=design.smallest_change, n_arms=design.n_arms,
                  alpha_holdback=design.alpha_holdback, calibration=calibration,
                  position_name=design.position_name if design.positions is not None else "")
    if holm:
        common.update(multiplicity=HOLM, **family._asdict())  # type: ignore[union-attr]
    else:
        common.update(level=design.test_alpha / design.n_arms, eq_level=design.test_alpha)
    short = [r.value for r in rows if r.weight != 0 and r.n < 2]
    if point_invalid or short:
        reason = ("a point decision of the arm is invalid" if point_invalid else
                  f"fewer than 2 paired differences at {', '.join(f'{v:g}' for v in short)} "
                  "(a point the contrast weighs needs a spread)")
        nan = math.nan
        return InteractionDecision(INVALID, nan, nan, nan, (nan, nan), (nan, nan), nan, nan, nan, nan, False,
                                   reason=reason, **common)
    c = np.array([r.weight for r in rows])
    m, s, n = (np.array([getattr(r, k) for r in rows], dtype=float) for k in ("mean", "sd", "n"))
    est, se, df = (float(v) for v in _contrast(c, m, s, n))
    if holm:
        from scipy import stats as sps  # here, not at the top: a registry validating a design computes nothing

        critical = (sps.t.isf(family.level / 2, df), sps.t.isf(family.eq_level, df))  # type: ignore[union-attr]
    else:
        critical = _critical(design, np.array(df))
    code, lo, hi, eq_lo, eq_hi, small = _rule(design, np.array(est), np.array(se), np.array(df), critical)
    t_sup, t_eq = (float(v) for v in critical)
    p, p_tost = (float(v) for v in _p_values(design, np.array(est), np.array(se), np.array(df)))
    return InteractionDecision(
        verdict=VERDICTS[int(code)], estimate=est, se=se, df=df, interval=(float(lo), float(hi)),
        eq_interval=(float(eq_lo), float(eq_hi)), t_sup=t_sup, t_eq=t_eq, p=p, p_tost=p_tost,
        smaller_than_change=bool(small), **common)


def decide_all(design: InteractionDesign, diffs: Mapping[str, Sequence[Sequence[float]]],
               invalid: set[str] = frozenset()) -> dict[str, InteractionDecision]:
    """Every tested arm's change (``diffs``: arm -> per-point differences); an arm in ``invalid`` is ``invalid``.
    The family is the registered ``n_arms``: a failed arm keeps its share of α."""
    design.check()
    arms = set(diffs) | set(invalid)
    if len(arms) > design.n_arms:
        raise ValueError(f"diffs: {len(arms)} arms ({sorted(arms)}) but the design registers n_arms="
                         f"{design.n_arms}; the family is fixed at registration")
    empty: list[list[float]] = [[] for _ in design.points]
    if design.multiplicity == HOLM:
        return _decide_holm(design, {arm: diffs.get(arm, empty) for arm in sorted(arms)}, invalid)
    return {arm: decide_interaction(design, diffs.get(arm, empty), point_invalid=arm in invalid)
            for arm in sorted(arms)}


def _decide_holm(design: InteractionDesign, diffs: Mapping[str, Sequence[Sequence[float]]],
                 invalid: set[str]) -> dict[str, InteractionDecision]:
    """The family under holm: each arm's L, se and df as Bonferroni computes them (the p's do not depend on the
    correction), Holm's step-down over the registered n_arms (an invalid or absent arm has no p and is never
    rejected), then each arm decided at its levels."""
    alone = replace(design, multiplicity=BONFERRONI)
    first = {arm: decide_interaction(alone, xs, point_invalid=arm in invalid) for arm, xs in diffs.items()}
    arms = list(first)
    est, se, df = (np.array([getattr(first[a], k) for a in arms], dtype=float) for k in ("estimate", "se", "df"))
    sup, eq = _holm(design, est, se, df)
    return {arm: decide_interaction(design, diffs[arm], point_invalid=arm in invalid, family=ArmLevels(
        float(sup.level[i]), int(sup.rank[i]), int(sup.step[i]), float(eq.level[i]), int(eq.rank[i]),
        int(eq.step[i]))) for i, arm in enumerate(arms)}


def decide_calibration(design: InteractionDesign, diffs_by_point: Sequence[Sequence[float]],
                       point_invalid: bool = False) -> InteractionDecision:
    """The A/A arm's change, decided as a tested arm's and reported beside the family, never in it."""
    return decide_interaction(design, diffs_by_point, point_invalid=point_invalid, calibration=True)


# --- the study's design card: the error-rate proof, by simulating the whole study ------------------------

STUDY_CARD_N_SIM = 20_000  # studies per scenario; Monte-Carlo se of a rate near 0.05 is 0.0015
STUDY_CARD_SEED = 20261204
STUDY_CARD_SKEWS = (-1.0, 1.0)  # the skew lines, as the comparison card's largest (sequential.CARD_SKEWS)


@dataclass(frozen=True)
class StudySkewLine:
    """Scenarios 1 and 3 when the paired differences are skewed (Pearson type III, sequential.standard_draws)."""

    skew: float
    type_i: float  # P(any arm grows or shrinks | Δ = 0 at every point), family-wise
    flat_at_change: float  # P(flat | change ±τ), mean over arms, the worse side
    flat_side: str  # "+τ" or "−τ"
    flat_family: float = math.nan  # P(any arm flat | every arm's change ±τ), the worse side
    flat_family_side: str = ""


@dataclass(frozen=True)
class StudyCard:
    """What a study's registration promises for its primary question, simulated: every point's exact sequential
    procedure, then the rule on what each point's decision used (every arm the same true Δ)."""

    design: InteractionDesign
    point_design: sq.Design
    pilot_sd: tuple[float, ...]  # sd of the paired differences at each point, from the pilot
    expected_effect: float  # the expected Δ at a point (negative = the arms better)
    expected_change: float  # the expected change of Δ from the first to the last point (negative = grows)
    n_sim: int
    seed: int
    type_i: float  # scenario 1, Δ = 0 everywhere: P(any arm grows or shrinks); must be ≤ α
    type_i_constant: float  # scenario 2, Δ = expected effect everywhere (stopping differs by chance); ≤ α
    point_type_i: float  # scenario 1: P(any arm better or worse at any point): the point family, ≤ α
    flat_at_change: float  # scenario 3: P(flat | change ±τ), mean over arms, the worse side; must be ≤ α
    flat_side: str
    power: float  # scenario 4: P(the right direction | the expected change), mean over arms
    flat_at_no_change: float  # scenario 2: P(flat), mean over arms
    expected_n: dict[str, tuple[float, ...]]  # scenario -> expected replicates per arm, per point
    expected_n_baseline: dict[str, tuple[float, ...]]  # scenario -> expected baseline replicates, per point
    skew_lines: tuple[StudySkewLine, ...] = ()
    flat_family: float = math.nan  # scenario 3: P(any arm flat | every arm's change ±τ), the worse side: the
    #                                family-wise rate of the separate flat claims; ≤ α under holm
    flat_family_side: str = ""

    def mc_se(self, p: float) -> float:
        """Monte-Carlo standard error of a rate from ``n_sim`` studies: √(p(1 − p)/n_sim)."""
        return math.sqrt(max(p * (1 - p), 0.0) / self.n_sim)

    def arm_se(self, p: float) -> float:
        """Monte-Carlo se of a per-arm rate pooled over the (independent) arms."""
        return math.sqrt(max(p * (1 - p), 0.0) / (self.n_sim * self.design.n_arms))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["skew_lines"] = [{**asdict(x), "type_i_se": self.mc_se(x.type_i), "flat_se": self.arm_se(x.flat_at_change),
                            "flat_family_se": self.mc_se(x.flat_family)} for x in self.skew_lines]
        d["weights"] = list(self.design.weights())
        return jsonable(d)

    def to_text(self) -> str:
        return study_card_text(self)


def study_card_text(card: StudyCard) -> str:
    dz, pd, se, arm, tau = card.design, card.point_design, card.mc_se, card.arm_se, card.design.smallest_change
    w = ", ".join(f"{v:g}: {c:+.3g}" for v, c in zip(dz.points, dz.weights()))
    sd = ", ".join(f"{v:g}: {s:.4g}" for v, s in zip(dz.points, card.pilot_sd))
    runs = "; ".join(f"{k} " + " ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(card.expected_n[k],
                                                                       card.expected_n_baseline[k]))
                     for k in card.expected_n)
    lines = [
        f"Study card: change of Δ over {list(dz.points)} (weights {w}), α {dz.alpha:g} (family of {dz.n_arms} "
        f"arm(s), {_family_words(dz)}), smallest change τ {tau:g} bpb"
        + (f"; {sq.holdback_words(dz.alpha, dz.alpha_holdback)}" if dz.alpha_holdback != 1.0 else ""),
        f"  each point: α {pd.alpha:.4g} = α/{len(dz.points)}, SESOI {pd.sesoi:g}, looks {list(pd.looks)}"
        + (f"; {pd.holdback_words()}" if pd.holdback_words() else ""),
        f"  pilot sd per point: {sd}; expected effect {card.expected_effect:+g} bpb, expected change "
        f"{card.expected_change:+g} bpb",
        f"  type-I P(grows or shrinks | Δ=0 everywhere), family: {card.type_i:.4f} ± {se(card.type_i):.4f}"
        f"{against_alpha(card.type_i, dz.alpha, se(card.type_i))}",
        f"  type-I P(grows or shrinks | Δ={card.expected_effect:+g} everywhere), family: "
        f"{card.type_i_constant:.4f} ± {se(card.type_i_constant):.4f}"
        f"{against_alpha(card.type_i_constant, dz.alpha, se(card.type_i_constant))}",
        f"  per-point verdicts P(any better or worse at any point | Δ=0): {card.point_type_i:.4f}",
        f"  P(flat | change ±τ), the worse side ({card.flat_side}): {card.flat_at_change:.4f} ± "
        f"{arm(card.flat_at_change):.4f}{against_alpha(card.flat_at_change, dz.alpha, arm(card.flat_at_change))}",
        f"  P(any arm flat | every arm's change ±τ), family, the worse side ({card.flat_family_side}): "
        f"{card.flat_family:.4f} ± {se(card.flat_family):.4f}{_family_against_alpha(card)}",
        f"  power P(the right direction | change {card.expected_change:+g}): {card.power:.3f}   "
        f"P(flat | no change): {card.flat_at_no_change:.3f}",
        *[f"  skew {x.skew:+.1f}: type-I {x.type_i:.4f} ± {se(x.type_i):.4f}   P(flat | ±τ), the worse side "
          f"({x.flat_side}): {x.flat_at_change:.4f} ± {arm(x.flat_at_change):.4f}   P(any arm flat | ±τ) "
          f"({x.flat_family_side}): {x.flat_family:.4f} ± {se(x.flat_family):.4f}" for x in card.skew_lines],
        f"  expected replicates per arm/of the baseline at each point: {runs}",
        f"  ({card.n_sim} simulated studies per scenario, seed {card.seed})",
    ]
    return "\n".join(lines)


def _family_words(design: InteractionDesign) -> str:
    """The card's words for the registered correction over the arms."""
    if design.multiplicity == HOLM:
        return "Holm's step-down for grows/shrinks and for flat"
    return "Bonferroni; TOST α per arm"


def _family_against_alpha(card: StudyCard) -> str:
    """The remark on the family-wise flat rate: under Bonferroni the flat claims are each at α, so their family
    exceeds α with several arms and the remedy is holm, not a hold-back."""
    rate, se, alpha = card.flat_family, card.mc_se(card.flat_family), card.design.alpha
    if card.design.multiplicity == HOLM or rate <= alpha + 3 * se:
        return against_alpha(rate, alpha, se)
    return (f"   above α {alpha:g}: each flat claim is at α per arm; register study.multiplicity: holm for "
            "family-wise flat claims")


def against_alpha(rate: float, alpha: float, mc_se: float) -> str:
    """The card's remark on a rate beside α: none when ≤ α; within Monte-Carlo error when ≤ α + 3·se; otherwise the
    registration needs a hold-back."""
    if rate <= alpha:
        return ""
    if rate <= alpha + 3 * mc_se:
        return f"   (above α {alpha:g} by less than 3 Monte-Carlo se)"
    return f"   ABOVE α {alpha:g}: register alpha_holdback < 1 and check the card again"


def line_through(design: InteractionDesign, at_middle: float, change: float) -> np.ndarray:
    """Δ_p on the log2 line through ``at_middle`` at the centre with Σ c_p·Δ_p = ``change`` exactly."""
    u = design.x()
    return at_middle + change * (u - (u[0] + u[-1]) / 2) / design.span


def simulate_study(design: InteractionDesign, point_design: sq.Design, deltas: Sequence[float],
                   sd: Sequence[float], n_sim: int, seed: int, skew: float = 0.0) -> tuple[np.ndarray, ...]:
    """The whole study ``n_sim`` times (point p: mean deltas[p], sd sd[p], seed + p). Returns the rule's codes
    (arms, n_sim), the point decisions' codes and replicates used (arms, n_sim, P)."""
    sims = [sq.simulate_decisions(point_design, [float(delta)] * design.n_arms, float(s), n_sim, seed + p, skew)
            for p, (delta, s) in enumerate(zip(deltas, sd))]
    mean, sds, n = (np.stack([getattr(x, k) for x in sims], axis=-1).astype(float) for k in ("mean", "sd", "n"))
    est, se, df = _contrast(design.weights(), mean, sds, n)
    return _rule(design, est, se, df)[0], np.stack([x.code for x in sims], axis=-1), n


def _scenario(design: InteractionDesign, point_design: sq.Design, deltas: np.ndarray, sd: Sequence[float],
              n_sim: int, seed: int, skew: float = 0.0) -> dict:
    code, point_code, n = simulate_study(design, point_design, deltas, sd, n_sim, seed, skew)
    return {"code": code, "point_code": point_code, "n": tuple(float(v) for v in n.mean(axis=(0, 1))),
            "n_baseline": tuple(float(v) for v in n.max(axis=0).mean(axis=0))}


def _family_significant(code: np.ndarray) -> float:
    return float(((code == _G) | (code == _S)).any(axis=0).mean())


def _flat_worse_side(design: InteractionDesign, point_design: sq.Design, effect: float, sd: Sequence[float],
                     n_sim: int, seed: int, skew: float = 0.0) -> tuple[float, str]:
    """P(flat | change ±τ), mean over arms, the worse of the two sides (scenario 3)."""
    return _flat_rates(design, point_design, effect, sd, n_sim, seed, skew)[:2]


def _flat_rates(design: InteractionDesign, point_design: sq.Design, effect: float, sd: Sequence[float],
                n_sim: int, seed: int, skew: float = 0.0) -> tuple[float, str, float, str]:
    """Scenario 3, every arm's change at +τ and at −τ: P(flat) per arm (mean over arms) and P(any arm flat), the
    family-wise rate of the separate flat claims, each at the worse of the two sides: (rate, side, family, side)."""
    codes = {side: _scenario(design, point_design, line_through(design, effect, sign * design.smallest_change),
                             sd, n_sim, seed + 50 * j, skew)["code"]
             for j, (side, sign) in enumerate((("+τ", 1.0), ("−τ", -1.0)))}
    arm = {side: float((c == _F).mean()) for side, c in codes.items()}
    family = {side: float((c == _F).any(axis=0).mean()) for side, c in codes.items()}
    arm_side, family_side = max(arm, key=lambda k: arm[k]), max(family, key=lambda k: family[k])
    return arm[arm_side], arm_side, family[family_side], family_side


def study_card(design: InteractionDesign, point_design: sq.Design, pilot_sd: float | Sequence[float],
               expected_effect: float, expected_change: float, n_sim: int = STUDY_CARD_N_SIM,
               seed: int = STUDY_CARD_SEED) -> StudyCard:
    """The card's scenarios: 1. Δ = 0; 2. Δ = the expected effect everywhere; 3. a change of ±τ through it; 4. the
    expected change; 5. skew ±1 for 1 and 3."""
    design.check()
    point_design.check()
    p = len(design.points)
    sds = np.atleast_1d(np.asarray(pilot_sd, dtype=float))
    if sds.shape not in ((1,), (p,)):
        raise ValueError(f"pilot_sd: one sd per point ({p}) or one for all, got {list(sds)}")
    sd = tuple(float(v) for v in np.broadcast_to(sds, (p,)))
    bad = _card_problems(design, point_design, sd, expected_effect, expected_change, n_sim)
    if bad:
        raise ValueError("bad study card inputs: " + "; ".join(bad))
    zero = _scenario(design, point_design, np.zeros(p), sd, n_sim, seed)
    const = _scenario(design, point_design, np.full(p, expected_effect), sd, n_sim, seed + 100)
    change = _scenario(design, point_design, line_through(design, expected_effect, expected_change), sd, n_sim,
                       seed + 200)
    flat, side, flat_family, family_side = _flat_rates(design, point_design, expected_effect, sd, n_sim, seed + 300)
    right = _G if expected_change < 0 else _S
    skews = tuple(StudySkewLine(g, _family_significant(_scenario(design, point_design, np.zeros(p), sd, n_sim,
                                                                 seed + 400 + 100 * i, g)["code"]),
                                *_flat_rates(design, point_design, expected_effect, sd, n_sim, seed + 450 + 100 * i,
                                             g))
                  for i, g in enumerate(STUDY_CARD_SKEWS))
    scen = {"Δ=0": zero, f"Δ={expected_effect:+g}": const, f"change {expected_change:+g}": change}
    return StudyCard(
        design=design, point_design=point_design, pilot_sd=sd, expected_effect=float(expected_effect),
        expected_change=float(expected_change), n_sim=n_sim, seed=seed, type_i=_family_significant(zero["code"]),
        type_i_constant=_family_significant(const["code"]),
        point_type_i=float(np.isin(zero["point_code"], (sq._B, sq._W)).any(axis=(0, 2)).mean()),
        flat_at_change=flat, flat_side=side, power=float((change["code"] == right).mean()),
        flat_at_no_change=float((const["code"] == _F).mean()),
        expected_n={k: v["n"] for k, v in scen.items()},
        expected_n_baseline={k: v["n_baseline"] for k, v in scen.items()},
        skew_lines=skews, flat_family=flat_family, flat_family_side=family_side)


def _card_problems(design: InteractionDesign, point_design: sq.Design, sd: tuple[float, ...],
                   expected_effect: float, expected_change: float, n_sim: int) -> list[str]:
    out = []
    if point_design.n_arms != design.n_arms:
        out.append(f"point_design: n_arms {point_design.n_arms} is not the study's {design.n_arms}")
    if not math.isclose(point_design.alpha, design.point_alpha, rel_tol=1e-12):
        out.append(f"point_design: alpha {point_design.alpha:g} must be α/P = {design.point_alpha:g}")
    if not all(math.isfinite(v) and v > 0 for v in sd):
        out.append(f"pilot_sd: {list(sd)} must be finite and > 0, one per point or one for all")
    if not sq._finite(expected_effect):
        out.append(f"expected_effect: {expected_effect!r} must be a finite number (bpb)")
    if not sq._finite(expected_change) or expected_change == 0:
        out.append(f"expected_change: {expected_change!r} must be a finite non-zero number (bpb, negative = grows)")
    if not isinstance(n_sim, int) or n_sim < 1:
        out.append(f"n_sim: {n_sim!r} must be an integer >= 1")
    return out
