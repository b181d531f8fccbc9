"""A registered study's primary question: does each arm's effect against the baseline change as the study's axis
grows? (docs/ab-protocol.md, "A registered study: the primary question".)

A study holds one protocol-2 comparison at each of P values ("points") of one config axis. At point p an arm's
point decision (dormouse/ab/sequential.py) used n_p paired differences Δ_{p,i} = bpb(arm) − bpb(baseline) (the
look it was decided at, or the maximum), with mean m_p and sd s_p (ddof 1). With u_p = log2(value_p):

* **the contrast** c_p = (u_p − ū)·(u_P − u_1)/Σ_q (u_q − ū)², so L = Σ_p c_p·m_p is the OLS slope of Δ on
  log2(value) times the log2 range: the change of Δ from the first to the last point along the fitted line, in
  bpb (:func:`contrast_weights`; three log-equally spaced points give c = (−1, 0, 1): the middle gets weight 0);
* se² = Σ_p c_p²·s_p²/n_p (the points are independent: each has its own seed streams), on the
  Welch–Satterthwaite df = (Σ v_p)²/Σ v_p²/(n_p − 1), v_p = c_p²·s_p²/n_p, over the points with c_p ≠ 0;
* **grows** if L + t*·se < 0 (Δ falls as the axis grows: the arm gains on the baseline), **shrinks** if
  L − t*·se > 0, t* = t_df.isf(α/(2·n_arms)): Bonferroni over the registered family, one-sided per direction,
  checked first; a significant change whose TOST also shows |L| < τ is flagged ``smaller_than_change``;
* **flat** if both TOST one-sided tests at α reject: L − t_eq·se > −τ and L + t_eq·se < τ, t_eq = t_df.isf(α)
  (an intersection–union test, no split over arms); **undecided** otherwise;
* **invalid** (not a statistical verdict) when the arm has fewer than 2 differences at a point with c_p ≠ 0, or
  a point decision of it is invalid.

The curvature contrast (:func:`curvature_weights`, three points or more) is reported, never decided. The A/A
arm's change is computed the same way as a calibration (:func:`decide_calibration`), never in the family.

:func:`study_card` is the error-rate proof: it simulates the whole study (every point's exact sequential
procedure, :func:`dormouse.ab.sequential.simulate_decisions`, decided arms stopping) and this rule on what each
point's decisions used. Pure numpy/scipy; no torch; scipy imported where it computes, as in sequential.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from dormouse.ab import sequential as sq
from dormouse.ab.jsonable import jsonable

GROWS, SHRINKS, FLAT, UNDECIDED = "grows", "shrinks", "flat", "undecided"
INVALID = "invalid"  # the looks' word for an arm that did not run as asked (dormouse.ab.looks.INVALID)
VERDICTS = (GROWS, SHRINKS, FLAT, UNDECIDED)  # the rule's codes index this; INVALID is no code of the rule
_G, _S, _F, _U = 0, 1, 2, 3


@dataclass(frozen=True)
class InteractionDesign:
    """The study's registered primary rule (docs/ab-protocol.md, "A registered study: the primary question")."""

    alpha: float  # family-wise error of grows/shrinks over the tested arms; also each TOST test's error (flat)
    smallest_change: float  # τ, bpb > 0: the smallest change of Δ from the first to the last point of interest
    points: tuple[float, ...]  # the axis values, > 0, strictly ascending, at least 2
    n_arms: int  # the tested arms: the family, fixed at registration (a failed arm stays in it)

    def field_problems(self) -> list[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad field; empty when the design is usable (the one check)."""
        out: list[tuple[str, str]] = []
        if not sq._finite(self.alpha) or not 0.0 < self.alpha < 0.5:
            out.append(("alpha", f"{self.alpha} must lie in (0, 0.5)"))
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
        if not isinstance(self.n_arms, int) or isinstance(self.n_arms, bool) or self.n_arms < 1:
            out.append(("n_arms", f"{self.n_arms!r} must be an integer >= 1 (arms compared with the baseline)"))
        return out

    def problems(self) -> list[str]:
        """One line per bad field, naming it first; empty when the design is usable."""
        return [f"{name}: {what}" for name, what in self.field_problems()]

    def check(self) -> None:
        """Raise ``ValueError`` listing every problem (no work is done on a bad design)."""
        bad = self.problems()
        if bad:
            raise ValueError("bad interaction design: " + "; ".join(bad))

    @property
    def sup_level(self) -> float:
        """One-sided level of grows (and of shrinks): α/(2·n_arms), Bonferroni over the registered family."""
        return self.alpha / (2 * self.n_arms)

    @property
    def point_alpha(self) -> float:
        """The α of each point's comparison: α/P. The point verdicts are a family over points × arms, so the
        per-point design spends α/P (the rule's one owner; :func:`point_design`)."""
        return self.alpha / len(self.points)


def point_design(design: InteractionDesign, sesoi: float, looks: Sequence[int],
                 alpha_holdback: float = 1.0) -> sq.Design:
    """The sequential design every point of the study runs: α/P (:attr:`InteractionDesign.point_alpha`), the
    registered SESOI, looks and hold-back, the same family of arms."""
    design.check()
    return sq.Design(alpha=design.point_alpha, sesoi=sesoi, looks=tuple(looks), n_arms=design.n_arms,
                     alpha_holdback=alpha_holdback)


def contrast_weights(points: Sequence[float]) -> np.ndarray:
    """c_p = (u_p − ū)·(u_P − u_1)/Σ(u_q − ū)², u = log2(points): Σ c_p·m_p is the OLS slope of m on log2(value)
    times the log2 range (the change from the first to the last point along the fitted line). Σ c_p = 0."""
    u = np.log2(np.asarray(points, dtype=float))
    d = u - u.mean()
    c = d * (u[-1] - u[0]) / float(np.sum(d * d))
    return np.where(np.abs(c) < WEIGHT_ZERO, 0.0, c)  # a point at the log2 centre weighs exactly 0, not 1e-17


WEIGHT_ZERO = 1e-12  # |c_p| below this is rounding of a point at the log2 centre: that point is not weighed


def curvature_weights(points: Sequence[float]) -> np.ndarray | None:
    """q with Σ q_p·m_p = the fitted quadratic in log2(value) at the middle of the log2 range minus the chord
    between its end values: −k·(u_P − u_1)²/4 for the OLS fit m ≈ a + b·(u − ū) + k·(u − ū)². For three
    log-equally spaced points q = (−½, 1, −½): the middle's departure from the line through the ends.
    Descriptive only; None with fewer than three points (no curvature to fit)."""
    if len(points) < 3:
        return None
    u = np.log2(np.asarray(points, dtype=float))
    d = u - u.mean()
    x = np.stack([np.ones_like(d), d, d * d], axis=1)
    return -np.linalg.pinv(x)[2] * (u[-1] - u[0]) ** 2 / 4.0


def _contrast(c: np.ndarray, mean: np.ndarray, sd: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, ...]:
    """L = Σ c_p·m_p, se = √Σ c_p²·s_p²/n_p and the Welch–Satterthwaite df over the points with c_p ≠ 0, on arrays
    whose last axis is the points (used by :func:`decide_interaction` and :func:`study_card` alike). Where every
    v_p is 0 (no spread) the df is Σ(n_p − 1), the limit of equal shares."""
    used = c != 0
    v = np.where(used, c * c * sd * sd / n, 0.0)
    est = np.sum(np.where(used, c * mean, 0.0), axis=-1)
    var = v.sum(axis=-1)
    denom = np.sum(np.where(used, v * v / np.maximum(n - 1, 1), 0.0), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denom > 0, var * var / np.where(denom > 0, denom, 1.0),
                      np.sum(np.where(used, n - 1, 0), axis=-1))
    return est, np.sqrt(var), df


def _critical(design: InteractionDesign, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """t* = t_df.isf(α/(2·n_arms)) (grows/shrinks) and t_eq = t_df.isf(α) (each TOST test)."""
    from scipy import stats as sps  # here, not at the top: a registry validating a design computes nothing

    return sps.t.isf(design.sup_level, df), sps.t.isf(design.alpha, df)


def _rule(design: InteractionDesign, est: np.ndarray, se: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, ...]:
    """The rule on arrays: (code, lo, hi, eq_lo, eq_hi, smaller_than_change). grows: L + t*·se < 0; shrinks:
    L − t*·se > 0 (checked first); flat: −τ < L − t_eq·se and L + t_eq·se < τ; undecided otherwise."""
    t_sup, t_eq = _critical(design, df)
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
    df: float  # Welch–Satterthwaite over the points with c_p ≠ 0
    interval: tuple[float, float]  # L ∓ t*·se, t* = t_df.isf(α/(2·n_arms)): level 1 − α/n_arms
    eq_interval: tuple[float, float]  # L ∓ t_eq·se, t_eq = t_df.isf(α): flat needs it inside (−τ, +τ)
    t_sup: float
    t_eq: float
    p: float  # two-sided p of L = 0 (Student t, df), compared with α/n_arms
    p_tost: float  # max of the two one-sided TOST p's against ±τ, compared with α
    smaller_than_change: bool  # grows/shrinks and the TOST also shows |L| < τ
    points: tuple[PointRow, ...]
    curvature: float  # descriptive, never decided (NaN with 2 points)
    curvature_se: float
    alpha: float
    smallest_change: float
    n_arms: int
    calibration: bool = False  # the A/A arm's change: reported beside, never in the family
    reason: str = ""  # why the decision is invalid ("" otherwise)

    def to_dict(self) -> dict:
        """The decision as JSON holds it (NaN as null)."""
        return jsonable(asdict(self))

    @classmethod
    def from_dict(cls, d: Mapping) -> InteractionDecision:
        """The inverse of :meth:`to_dict` (null back to NaN)."""
        nan = _nan_for_none
        rows = tuple(PointRow(**{k: nan(v) for k, v in r.items()}) for r in d["points"])
        kw = {k: nan(v) for k, v in d.items() if k != "points"}
        kw["interval"], kw["eq_interval"] = tuple(map(nan, d["interval"])), tuple(map(nan, d["eq_interval"]))
        return cls(**{**kw, "points": rows})

    def sentence(self, arm: str, baseline: str, axis: str) -> str:
        """Exactly what was tested, and nothing more (the numbers filled in)."""
        return interaction_sentence(self, arm, baseline, axis)


def _nan_for_none(v: object) -> object:
    return math.nan if v is None else v


def interaction_sentence(d: InteractionDecision, arm: str, baseline: str, axis: str) -> str:
    """The sentence of one decision (:meth:`InteractionDecision.sentence`), modelled on the looks' sentences
    (sequential.ArmDecision.sentence): what was compared, at which level, and the verdict it gives."""
    first, last = d.points[0].value, d.points[-1].value
    who = f"{arm} vs {baseline}" + (" (A/A calibration, not in the family)" if d.calibration else "")
    if d.verdict == INVALID:
        return f"{who}: the change of the paired difference over {axis} is invalid: {d.reason}."
    weights = ", ".join(f"{r.value:g}: {r.weight:+.3g}" for r in d.points)
    what = (f"the change of the mean paired difference from {axis} = {first:g} to {last:g} along the line fitted "
            f"on log2 {axis} is L {d.estimate:+.4f} bpb (weights {weights}; se {d.se:.4f}, Welch–Satterthwaite "
            f"df {d.df:.1f})")
    conf = sq.percent(1 - d.alpha / d.n_arms)  # two-sided, 2·α/(2·n_arms) outside
    sup = (f"its {conf} interval [{d.interval[0]:+.4f}, {d.interval[1]:+.4f}] (two-sided p {d.p:.3g} "
           f"{'<' if d.verdict in (GROWS, SHRINKS) else '≥'} {d.alpha / d.n_arms:.3g}, family-wise α {d.alpha:g} "
           f"over {d.n_arms} arm(s), Bonferroni)")
    eq_ok = -d.smallest_change < d.eq_interval[0] and d.eq_interval[1] < d.smallest_change
    tau = f"(−{d.smallest_change:g}, +{d.smallest_change:g})"
    eq = (f"the TOST interval [{d.eq_interval[0]:+.4f}, {d.eq_interval[1]:+.4f}] {'lies' if eq_ok else 'does not lie'}"
          f" inside {tau} (TOST p {d.p_tost:.3g} {'<' if eq_ok else '≥'} α {d.alpha:g})")
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


def _point_rows(design: InteractionDesign, diffs_by_point: Sequence[Sequence[float]]) -> tuple[PointRow, ...]:
    """Each point's n, mean and sd (ddof 1) of the differences its decision used, with its weight c_p; refuses
    a count of points that is not the design's, or a difference that is not finite."""
    if len(diffs_by_point) != len(design.points):
        raise ValueError(f"diffs_by_point: one sequence of paired differences per point ({len(design.points)}: "
                         f"{list(design.points)}), got {len(diffs_by_point)}")
    rows = []
    for value, w, xs in zip(design.points, contrast_weights(design.points), diffs_by_point):
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
                       point_invalid: bool = False, calibration: bool = False) -> InteractionDecision:
    """One arm's change over the axis from the paired differences each point's final decision used (one
    sequence per point, in the design's order). ``point_invalid``: a point decision of this arm is invalid.
    Raises ``ValueError`` on a bad design, a count of points that is not the design's, or a non-finite value."""
    from scipy import stats as sps  # here, not at the top: a registry validating a design computes nothing

    design.check()
    rows = _point_rows(design, diffs_by_point)
    curv, curv_se = _curvature(design, rows)
    common = dict(points=rows, curvature=curv, curvature_se=curv_se, alpha=design.alpha,
                  smallest_change=design.smallest_change, n_arms=design.n_arms, calibration=calibration)
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
    code, lo, hi, eq_lo, eq_hi, small = _rule(design, np.array(est), np.array(se), np.array(df))
    t_sup, t_eq = (float(v) for v in _critical(design, np.array(df)))
    tau = design.smallest_change
    with np.errstate(divide="ignore", invalid="ignore"):
        t = est / se if se > 0 else math.copysign(math.inf, est) if est else 0.0
        p = float(2 * sps.t.sf(abs(t), df))
        p_lo = float(sps.t.sf((est + tau) / se, df)) if se > 0 else float(est <= -tau)
        p_hi = float(sps.t.sf((tau - est) / se, df)) if se > 0 else float(est >= tau)
    return InteractionDecision(
        verdict=VERDICTS[int(code)], estimate=est, se=se, df=df, interval=(float(lo), float(hi)),
        eq_interval=(float(eq_lo), float(eq_hi)), t_sup=t_sup, t_eq=t_eq, p=p, p_tost=max(p_lo, p_hi),
        smaller_than_change=bool(small), **common)


def decide_all(design: InteractionDesign, diffs: Mapping[str, Sequence[Sequence[float]]],
               invalid: set[str] = frozenset()) -> dict[str, InteractionDecision]:
    """Every tested arm's change: ``diffs`` arm -> its per-point differences (what each point decision used);
    an arm in ``invalid`` (a point decision of it invalid) is ``invalid``. The family is the registered
    ``design.n_arms``, never the arms present: an arm that failed keeps its share of α."""
    design.check()
    arms = set(diffs) | set(invalid)
    if len(arms) > design.n_arms:
        raise ValueError(f"diffs: {len(arms)} arms ({sorted(arms)}) but the design registers n_arms="
                         f"{design.n_arms}; the family is fixed at registration")
    empty: list[list[float]] = [[] for _ in design.points]
    return {arm: decide_interaction(design, diffs.get(arm, empty), point_invalid=arm in invalid)
            for arm in sorted(arms)}


def decide_calibration(design: InteractionDesign, diffs_by_point: Sequence[Sequence[float]],
                       point_invalid: bool = False) -> InteractionDecision:
    """The A/A arm's change, computed exactly as a tested arm's (the same design and levels) and marked a
    calibration: it is reported beside the family, never in it (with no effect anywhere it should be flat or
    undecided; grows/shrinks here says the points' noise is not what the rule assumes)."""
    return decide_interaction(design, diffs_by_point, point_invalid=point_invalid, calibration=True)
