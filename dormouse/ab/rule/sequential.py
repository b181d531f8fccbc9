"""Protocol 2's decision rule per arm on paired differences Δ_i = bpb(arm) − bpb(baseline) (docs/ab-protocol.md,
"Deciding at a look"): better/worse by a two-sided test at α/n_arms (Bonferroni), tie by TOST within ±SESOI at α,
each spent across looks by the Lan–DeMets O'Brien–Fleming-type function α*(t) = 2·(1 − Φ(z_{1−a/2}/√t)). Each look
runs a Student t test at n_k − 1 df at the nominal increment α*(t_k) − α*(t_{k−1}), exact for normal differences,
and the union bound over looks and arms gives the family bound α (the z boundaries carried to t by their nominal p
were anti-conservative at these n). A significant effect smaller than the SESOI is better/worse flagged
``smaller_than_sesoi``, never a tie. Under ``multiplicity: holm`` each kind of claim recycles α by Holm's step-down
in the group-sequential form of Maurer & Bretz (2013): after r claims of a kind, the arms left are tested with the
boundaries of level α/(n_arms − r), so the ties are family-wise too. scipy is imported where it computes:
``dormouse ab list`` validates a :class:`Design` without it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from dormouse.ab.rule.family import BONFERRONI, HOLM, multiplicity_problems

BETTER, WORSE, TIE, UNDECIDED = "better", "worse", "tie", "undecided"
VERDICTS = (BETTER, WORSE, TIE, UNDECIDED)
SPENDING = "Lan-DeMets O'Brien-Fleming-type"


class Checked:
    """``problems`` and ``check`` of a registered design from its ``field_problems``: the comparison's and a
    study's designs are checked alike."""

    noun = "design"

    def field_problems(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def problems(self) -> list[str]:
        return [f"{name}: {what}" for name, what in self.field_problems()]

    def check(self) -> None:
        bad = self.problems()
        if bad:
            raise ValueError(f"bad {self.noun}: " + "; ".join(bad))


def alpha_problems(alpha: float) -> list[tuple[str, str]]:
    """The family-wise α every design registers: in (0, 0.5)."""
    return [] if _finite(alpha) and 0.0 < alpha < 0.5 else [("alpha", f"{alpha} must lie in (0, 0.5)")]


def family_problems(n_arms: int, holdback: float, share: str) -> list[tuple[str, str]]:
    """The family of tested arms (an integer >= 1) and the hold-back in (0, 1], the ``share`` of α the tests use."""
    out = []
    if not isinstance(n_arms, int) or isinstance(n_arms, bool) or n_arms < 1:
        out.append(("n_arms", f"{n_arms!r} must be an integer >= 1 (arms compared with the baseline)"))
    if not _finite(holdback) or not 0.0 < holdback <= 1.0:
        out.append(("alpha_holdback", f"{holdback} must lie in (0, 1]: the share of α {share} (1 = all of it)"))
    return out


@dataclass(frozen=True)
class Design(Checked):
    """A registered sequential design (docs/ab-protocol.md, "The design")."""

    noun = "sequential design"

    alpha: float  # family-wise error of better/worse over the arms; also the tie (TOST) error per arm
    sesoi: float  # smallest effect of interest, bpb, > 0
    looks: tuple[int, ...]  # cumulative replicates per arm at each look, strictly increasing; last = maximum
    n_arms: int  # arms compared with the baseline: the multiplicity family, fixed at registration
    alpha_holdback: float = 1.0  # registered, in (0, 1]: the boundaries are computed at α × holdback while α
    #                              stays the claim (a margin for skewed differences; docs/ab-protocol.md)
    multiplicity: str = BONFERRONI  # bonferroni: better/worse at α/n_arms, tie at α per arm; holm: each kind of
    #                                 claim by Holm's step-down over the arms, ties family-wise too

    def field_problems(self) -> list[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad field; the one check (the registry states, ``check`` raises)."""
        out = alpha_problems(self.alpha)
        if not _finite(self.sesoi) or self.sesoi <= 0:
            out.append(("sesoi", f"{self.sesoi} must be a finite number > 0 (bpb): equivalence needs a margin"))
        looks = self.looks
        if not isinstance(looks, (tuple, list)) or not looks:
            out.append(("looks", "at least one look is required"))
        elif not all(isinstance(n, int) and not isinstance(n, bool) for n in looks):
            out.append(("looks", f"{list(looks)} must be integers (cumulative replicate counts)"))
        elif looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
            out.append(("looks", f"{list(looks)} must be strictly increasing cumulative replicate counts, the "
                        "first >= 2 (an interval needs two replicates)"))
        out += multiplicity_problems(self.multiplicity)
        if self.multiplicity == HOLM and _finite(self.alpha) and self.alpha >= HOLM_MAX_ALPHA:
            out.append(("alpha", f"{self.alpha} must be below {HOLM_MAX_ALPHA} under multiplicity holm: only there "
                        "does each look's boundary widen as the level grows, which Holm's recycling needs"))
        return out + family_problems(self.n_arms, self.alpha_holdback, "the boundaries are computed at")

    @property
    def n_max(self) -> int:
        return self.looks[-1]

    @property
    def boundary_alpha(self) -> float:
        """The α the boundaries are computed at: α × hold-back."""
        return self.alpha * self.alpha_holdback

    def holdback_words(self) -> str:
        return holdback_words(self.alpha, self.alpha_holdback)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# d/da of α*(t; a) is exp(z²(1 − 1/t)/2)/√t with z = z_{1−a/2}: increasing in t while z > 1, so every look's
# increment grows with the level a for a < 2·(1 − Φ(1)) = 0.3173; Holm's closed-testing argument needs that.
HOLM_MAX_ALPHA = 0.3


def holdback_words(alpha: float, holdback: float) -> str:
    """A hold-back as the card and the sentences state it; "" at holdback 1."""
    if holdback == 1.0:
        return ""
    return f"boundaries at α {alpha * holdback:.4g} = {alpha:g} × {holdback:g}, held back for skew"


def obf_spent(fraction: float | np.ndarray, level: float) -> np.ndarray:
    """Cumulative one-sided error spent at information fraction t: α*(t) = 2·(1 − Φ(z_{1−a/2}/√t)); α*(1) = a."""
    from scipy import stats as sps  # here, not at the top: `dormouse ab list` validates a Design, computes nothing

    t = np.asarray(fraction, dtype=float)
    return 2.0 * sps.norm.sf(sps.norm.isf(level / 2.0) / np.sqrt(t))


@dataclass(frozen=True)
class LookBoundary:
    """Everything a reader needs to check one look by hand (docs/ab-protocol.md's boundary table)."""

    look: int  # 0-based
    n: int  # cumulative replicates per arm
    fraction: float  # information fraction t = n / n_max
    sup_spent: float  # cumulative two-sided superiority α spent per arm by this look: 2·α*(t), a = α/(2 n_arms)
    sup_p: float  # two-sided p this look needs: 2·(α*(t_k) − α*(t_{k−1})), the increment
    sup_t: float  # critical |t| at n − 1 degrees of freedom: t_{n−1}.isf(sup_p / 2)
    eq_spent: float  # cumulative one-sided α spent by each TOST test by this look: α*(t), a = α
    eq_p: float  # one-sided p each TOST test needs at this look: the increment
    eq_t: float  # critical t of each TOST test: t_{n−1}.isf(eq_p)


@lru_cache(maxsize=256)
def _boundaries(alpha: float, looks: tuple[int, ...], family: int) -> tuple[LookBoundary, ...]:
    from scipy import stats as sps  # here, not at the top: `dormouse ab list` validates a Design, computes nothing

    frac = np.asarray(looks, dtype=float) / looks[-1]
    sup_level = alpha / (2 * family)  # Bonferroni over the registered family, per direction
    sup_cum = obf_spent(frac, sup_level)
    eq_cum = obf_spent(frac, alpha)  # TOST: each one-sided test at α (intersection-union)
    sup_inc = np.diff(np.concatenate([[0.0], sup_cum]))
    eq_inc = np.diff(np.concatenate([[0.0], eq_cum]))
    return tuple(
        LookBoundary(
            look=k, n=n, fraction=float(frac[k]), sup_spent=float(2 * sup_cum[k]), sup_p=float(2 * sup_inc[k]),
            sup_t=float(sps.t.isf(sup_inc[k], n - 1)), eq_spent=float(eq_cum[k]), eq_p=float(eq_inc[k]),
            eq_t=float(sps.t.isf(eq_inc[k], n - 1)),
        )
        for k, n in enumerate(looks)
    )


def boundaries(design: Design) -> tuple[LookBoundary, ...]:
    """The design's boundary table, one row per look (under holm: the first step's, before any claim)."""
    design.check()
    return tuple(step_boundary(design, k, 0, 0) for k in range(len(design.looks)))


def step_boundary(design: Design, look: int, sup_claims: int, eq_claims: int) -> LookBoundary:
    """The boundary an undecided arm meets at ``look``. Bonferroni: one table. Holm: after ``sup_claims`` arms
    decided better or worse, superiority at level α/(n_arms − sup_claims); after ``eq_claims`` equivalences (ties
    and effects flagged smaller than the SESOI), each TOST test at α/(n_arms − eq_claims)."""
    a, looks, m = float(design.boundary_alpha), tuple(design.looks), int(design.n_arms)
    if design.multiplicity != HOLM:
        return _boundaries(a, looks, m)[look]
    sup = _boundaries(a / (m - min(sup_claims, m - 1)), looks, 1)[look]  # family 1: sup at level/2 per direction
    eq = _boundaries(a / (m - min(eq_claims, m - 1)), looks, 1)[look]
    return LookBoundary(look=look, n=sup.n, fraction=sup.fraction, sup_spent=sup.sup_spent, sup_p=sup.sup_p,
                        sup_t=sup.sup_t, eq_spent=eq.eq_spent, eq_p=eq.eq_p, eq_t=eq.eq_t)


# Verdict codes of the vectorised rule: index into VERDICTS.
_B, _W, _T, _U = 0, 1, 2, 3


def _look_rule(mean: np.ndarray, se: np.ndarray, lb: LookBoundary, sesoi: float) -> tuple[np.ndarray, ...]:
    """The rule at one look, on arrays (:func:`decide` and :func:`simulate` alike): (code, lo, hi, eq_lo, eq_hi,
    smaller_than_sesoi). better: mean + sup_t·se < 0; worse: mean − sup_t·se > 0; tie: mean ± eq_t·se inside ±SESOI."""
    half = lb.sup_t * se
    lo, hi = mean - half, mean + half
    margin = sesoi  # registered before any run; never estimated from the data (version 1's δ was)
    eq_half = lb.eq_t * se
    eq_lo, eq_hi = mean - eq_half, mean + eq_half
    better = hi < 0
    worse = lo > 0
    tie = (-margin < eq_lo) & (eq_hi < margin)
    code = np.where(better, _B, np.where(worse, _W, np.where(tie, _T, _U)))
    return code, lo, hi, eq_lo, eq_hi, (better | worse) & tie


@dataclass(frozen=True)
class ArmDecision:
    """One arm's state after a look, with every number the rule compared (docs/ab-protocol.md)."""

    verdict: str  # better | worse | tie | undecided
    look: int  # 0-based look at which it was decided (or the current look if undecided)
    n: int  # replicates used
    mean: float  # mean paired difference arm − baseline (negative = arm better)
    interval: tuple[float, float]  # this look's interval of superiority, mean ± sup_t·se (level 1 − sup_p; over
    #                                all looks a repeated confidence interval of level ≥ 1 − α/n_arms, union bound)
    sd: float  # sample sd of the paired differences (ddof 1)
    se: float  # sd / √n
    t: float  # mean / se
    p: float  # two-sided p of mean = 0 (Student t, n − 1 df), compared with boundary.sup_p
    p_tost: float  # max of the two one-sided TOST p's against ±SESOI, compared with boundary.eq_p
    eq_interval: tuple[float, float]  # mean ± eq_t·se; a tie needs it inside (−SESOI, +SESOI)
    smaller_than_sesoi: bool  # better/worse and the same look's TOST shows |Δ| < SESOI
    last_look: bool  # this was the registered maximum: undecided here is final
    alpha: float
    sesoi: float
    n_arms: int
    n_looks: int
    boundary: LookBoundary = field(repr=False)
    alpha_holdback: float = 1.0  # the registered hold-back: the boundaries were computed at alpha × this
    multiplicity: str = BONFERRONI
    sup_claims: int = 0  # holm: arms decided better/worse before this arm's superiority test (its level α/(n − this))
    eq_claims: int = 0  # holm: equivalences claimed before this arm's TOST (its level α/(n − this))

    @property
    def final(self) -> bool:
        """The arm needs no more replicates (decided, or undecided at the last look)."""
        return self.verdict != UNDECIDED or self.last_look

    def to_dict(self) -> dict:
        d = asdict(self)
        d["interval"], d["eq_interval"] = list(self.interval), list(self.eq_interval)
        return d

    def sentence(self, arm: str, baseline: str) -> str:
        """Exactly what was tested at this look, and nothing more."""
        b = self.boundary
        where = f"at look {self.look + 1} of {self.n_looks} ({self.n} paired replicates)"
        rci = (f"this look's {percent(1 - b.sup_p)} confidence interval of the mean paired difference "
               f"{self.mean:+.4f} is [{self.interval[0]:+.4f}, {self.interval[1]:+.4f}]")
        sig = "<" if self.verdict in (BETTER, WORSE) else "≥"
        sup = (f"two-sided p {self.p:.3g} {sig} this look's {b.sup_p:.3g}, family-wise α {self.alpha:g} over "
               f"{self.n_arms} arm(s){self._holm_words(self.sup_claims, 'better or worse', ',')} spent by "
               f"{SPENDING} increments")
        held = holdback_words(self.alpha, self.alpha_holdback)
        if held:
            sup += f"; {held}"
        eq_ok = -self.sesoi < self.eq_interval[0] and self.eq_interval[1] < self.sesoi
        eq_family = (f", family-wise α {self.alpha:g} over {self.n_arms} arm(s)"
                     f"{self._holm_words(self.eq_claims, 'within the SESOI')}" if self.multiplicity == HOLM else "")
        eq = (f"the TOST interval [{self.eq_interval[0]:+.4f}, {self.eq_interval[1]:+.4f}] "
              f"{'lies' if eq_ok else 'does not lie'} inside (−{self.sesoi:g}, +{self.sesoi:g}) "
              f"(TOST p {self.p_tost:.3g} {'<' if eq_ok else '≥'} this look's {b.eq_p:.3g}{eq_family}"
              f"{'; ' + held if held else ''})")
        if self.verdict in (BETTER, WORSE):
            side, way = ("below", "lower") if self.verdict == BETTER else ("above", "higher")
            s = f"{arm} has {way} final bpb than {baseline}: {where}, {rci}, which lies {side} 0 ({sup})."
            if self.smaller_than_sesoi:
                s += f" The effect is smaller than the SESOI {self.sesoi:g} bpb: {eq}."
            return s
        if self.verdict == TIE:
            return (f"{arm} and {baseline} differ by less than the SESOI {self.sesoi:g} bpb: {where}, {eq}.")
        tail = ("this was the last registered look, so the arm ends undecided." if self.last_look
                else "the arm goes on to the next look.")
        return f"{arm} vs {baseline} is undecided {where}: {rci}, which contains 0 ({sup}), and {eq}; {tail}"

    def _holm_words(self, claims: int, kind: str, end: str = "") -> str:
        """Under holm, the step this arm's test was at: "" under Bonferroni."""
        if self.multiplicity != HOLM:
            return ""
        return f" by Holm's step-down (level α/{self.n_arms - claims}: {claims} arm(s) already decided {kind}){end}"


def percent(c: float) -> str:
    """A confidence level with 1 − c to two significant figures (0.997866 -> "99.79 %")."""
    miss = 100.0 * (1.0 - c)
    if not math.isfinite(miss) or miss <= 0.0:
        return "100 %"
    decimals = min(PERCENT_MAX_DECIMALS, max(0, 1 - math.floor(math.log10(miss))))
    text = f"{100.0 * c:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} %"


PERCENT_MAX_DECIMALS = 6  # a level nearer 100 % than 10⁻⁶ % prints as its rounding (never in a real design)


def _decide_one(design: Design, lb: LookBoundary, xs: Sequence[float], claims: tuple[int, int] = (0, 0)
                ) -> ArmDecision:
    from scipy import stats as sps  # here, not at the top: `dormouse ab list` validates a Design, computes nothing

    x = np.asarray(xs, dtype=float)
    n = x.size
    mean = float(x.mean())
    sd = float(x.std(ddof=1))
    se = sd / math.sqrt(n)
    code, lo, hi, eq_lo, eq_hi, small = _look_rule(np.array(mean), np.array(se), lb, design.sesoi)
    df = n - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / se if se > 0 else math.copysign(math.inf, mean) if mean else 0.0
        p = float(2 * sps.t.sf(abs(t), df))
        p_lo = float(sps.t.sf((mean + design.sesoi) / se, df)) if se > 0 else float(mean <= -design.sesoi)
        p_hi = float(sps.t.sf((design.sesoi - mean) / se, df)) if se > 0 else float(mean >= design.sesoi)
    return ArmDecision(
        verdict=VERDICTS[int(code)], look=lb.look, n=n, mean=mean, interval=(float(lo), float(hi)),
        sd=sd, se=se, t=float(t), p=p, p_tost=max(p_lo, p_hi), eq_interval=(float(eq_lo), float(eq_hi)),
        smaller_than_sesoi=bool(small), last_look=lb.look == len(design.looks) - 1, alpha=design.alpha,
        sesoi=design.sesoi, n_arms=design.n_arms, n_looks=len(design.looks), boundary=lb,
        alpha_holdback=design.alpha_holdback, multiplicity=design.multiplicity, sup_claims=claims[0],
        eq_claims=claims[1],
    )


def _claims(decisions: Mapping[str, ArmDecision] | Sequence[ArmDecision]) -> tuple[int, int]:
    """(superiority claims, equivalence claims) among decisions: better/worse; ties and effects flagged smaller
    than the SESOI (their TOST rejected too)."""
    ds = list(decisions.values()) if isinstance(decisions, Mapping) else list(decisions)
    return (sum(d.verdict in (BETTER, WORSE) for d in ds),
            sum(d.verdict == TIE or d.smaller_than_sesoi for d in ds))


def decide(design: Design, look: int, diffs: Mapping[str, Sequence[float]],
           decided: Mapping[str, ArmDecision] | None = None) -> dict[str, ArmDecision]:
    """Decide every undecided arm at ``look`` (0-based) from ``diffs`` (arm -> its ``design.looks[look]``
    differences). Decided arms keep their verdict. The family is the registered ``n_arms``, so a failed arm keeps
    its share of α. Raises ``ValueError`` on a bad design, look or length."""
    design.check()
    if not isinstance(look, int) or not 0 <= look < len(design.looks):
        raise ValueError(f"look: must be an index 0..{len(design.looks) - 1} of the registered looks "
                         f"{list(design.looks)}, got {look!r}")
    kept = {a: d for a, d in (decided or {}).items() if d.verdict != UNDECIDED}
    arms = set(diffs) | set(decided or {})
    if len(arms) > design.n_arms:
        raise ValueError(f"diffs: {len(arms)} arms ({sorted(arms)}) but the design registers n_arms="
                         f"{design.n_arms}; the family is fixed at registration")
    n = design.looks[look]
    for arm, xs in diffs.items():
        if arm not in kept and len(xs) != n:
            raise ValueError(f"diffs[{arm!r}]: look {look} needs {n} paired differences, got {len(xs)}")
        if arm not in kept and not all(math.isfinite(float(v)) for v in xs):
            raise ValueError(f"diffs[{arm!r}]: a paired difference is not finite: {list(xs)}")
    family = design.n_arms  # registered, never len(diffs): a failed arm keeps its share of α
    out: dict[str, ArmDecision] = dict(decided or {})
    pending = {arm: xs for arm, xs in diffs.items() if arm not in kept}
    if design.multiplicity == HOLM:
        out.update(_decide_holm(design, look, pending, _claims(kept)))
        return out
    lb = _boundaries(float(design.boundary_alpha), tuple(design.looks), family)[look]
    for arm, xs in pending.items():
        out[arm] = _decide_one(design, lb, xs)
    return out


def _decide_holm(design: Design, look: int, pending: Mapping[str, Sequence[float]], before: tuple[int, int]
                 ) -> dict[str, ArmDecision]:
    """Holm's step-down at one look, each kind of claim on its own: test the undecided arms at the levels the claims
    so far allow; each new claim raises its kind's level, so test again until none is added (the levels only grow:
    at most 2·n_arms rounds; the same claims as walking the sorted p's). Each arm is stated at the step where its
    claim was first made, or, without one, at the last step."""
    claims, first = before, {arm: [None, None] for arm in pending}
    for _ in _rounds(design):
        lb = step_boundary(design, look, *claims)
        now = {arm: _decide_one(design, lb, xs, claims) for arm, xs in pending.items()}
        for arm, d in now.items():
            for kind, made in enumerate(_claims([d])):
                if made and first[arm][kind] is None:
                    first[arm][kind] = claims[kind]
        made = _claims(now)
        new = (before[0] + made[0], before[1] + made[1])
        if new == claims:
            break
        claims = new
    else:
        raise _not_converging(design)
    out = {}
    for arm, xs in pending.items():
        at = tuple(claims[k] if first[arm][k] is None else first[arm][k] for k in (0, 1))
        out[arm] = _decide_one(design, step_boundary(design, look, *at), xs, at)  # type: ignore[arg-type]
    return out


@dataclass(frozen=True)
class SimulationResult:
    """Monte-Carlo operating characteristics of the whole procedure (all looks, all arms, the family)."""

    design: Design
    deltas: tuple[float, ...]  # true mean paired difference per arm
    sds: tuple[float, ...]  # true sd of the paired differences per arm
    n_sim: int
    seed: int
    p_better: tuple[float, ...]  # per arm
    p_worse: tuple[float, ...]
    p_tie: tuple[float, ...]
    p_undecided: tuple[float, ...]
    expected_n: tuple[float, ...]  # expected replicates per arm (it stops when decided)
    p_any_better_or_worse: float  # family: at least one arm better or worse
    expected_n_baseline: float  # expected replicates of the baseline: until the last arm stops
    max_n: int  # the registered maximum per arm
    skew: float = 0.0  # skewness of the simulated paired differences (0: normal)
    p_any_tie: float = 0.0  # family: at least one arm tie (at |Δ| ≥ SESOI, the family-wise rate of false ties)

    def mc_se(self, p: float) -> float:
        """Monte-Carlo standard error of a probability from ``n_sim`` runs: √(p(1 − p)/n_sim)."""
        return math.sqrt(max(p * (1 - p), 0.0) / self.n_sim)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["design"] = {**asdict(self.design), "looks": list(self.design.looks)}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def standard_draws(rng: np.random.Generator, shape: tuple[int, ...], skew: float) -> np.ndarray:
    """Draws with mean 0, sd 1 and skewness ``skew``: standard normal at 0, else a standardised Pearson type III, (G
    − k)/√k with G ~ Gamma(k = 4/g²), negated for g < 0 (a skew-normal cannot reach |g| ≈ 1)."""
    if skew == 0:
        return rng.standard_normal(shape)
    k = 4.0 / skew**2
    z = (rng.standard_gamma(k, shape) - k) / math.sqrt(k)
    return z if skew > 0 else -z


@dataclass(frozen=True)
class SimulatedDecisions:
    """Each simulated comparison's final decision per arm with the n, mean and sd it used: (arms, n_sim)."""

    code: np.ndarray  # index into VERDICTS
    n: np.ndarray  # replicates the decision used: the look it was decided at, or the maximum
    mean: np.ndarray  # mean of those n paired differences
    sd: np.ndarray  # their sample sd (ddof 1)


def simulate_decisions(design: Design, deltas: Sequence[float], sd: float | Sequence[float], n_sim: int,
                       seed: int, skew: float = 0.0) -> SimulatedDecisions:
    """The exact procedure (every look, every arm of the family, decided arms stopping) on ``n_sim`` comparisons
    whose differences have mean deltas[a], sd sd[a] and skewness ``skew``."""
    design.check()
    if not _finite(skew):
        raise ValueError(f"skew: must be a finite number, got {skew!r}")
    delta = np.asarray(deltas, dtype=float)
    sds = np.broadcast_to(np.asarray(sd, dtype=float), delta.shape).copy()
    if delta.ndim != 1 or delta.size != design.n_arms:
        raise ValueError(f"deltas: one true effect per registered arm ({design.n_arms}), got {list(delta)}")
    if not np.all(np.isfinite(sds)) or np.any(sds < 0):
        raise ValueError(f"sd: must be finite and >= 0, got {list(sds)}")
    if n_sim < 1:
        raise ValueError(f"n_sim: must be >= 1, got {n_sim}")
    rng = np.random.Generator(np.random.PCG64(seed))
    x = delta[:, None, None] + sds[:, None, None] * standard_draws(rng, (delta.size, n_sim, design.n_max), skew)
    code = np.full((delta.size, n_sim), -1)
    n_used = np.full((delta.size, n_sim), design.n_max)
    mean_used, sd_used = np.zeros(code.shape), np.zeros(code.shape)
    eq_made = np.zeros(code.shape, dtype=bool)  # a tie, or better/worse flagged smaller than the SESOI
    rule = _holm_look if design.multiplicity == HOLM else _bonferroni_look
    for look, lb in enumerate(boundaries(design)):
        xs = x[:, :, : lb.n]
        mean, s = xs.mean(axis=2), xs.std(axis=2, ddof=1)
        c, small = rule(design, look, mean, s / math.sqrt(lb.n), code, eq_made)
        now = (code == -1) & ((c != _U) | (lb.n == design.n_max))  # decided here, or undecided at the maximum
        code[now], n_used[now], mean_used[now], sd_used[now] = c[now], lb.n, mean[now], s[now]
        eq_made[now] = (c == _T)[now] | small[now]
    return SimulatedDecisions(code=code, n=n_used, mean=mean_used, sd=sd_used)


def _bonferroni_look(design: Design, look: int, mean: np.ndarray, se: np.ndarray, code: np.ndarray,
                     eq_made: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each simulated arm's code and small-effect flag at ``look``: one boundary for every arm."""
    c, *_, small = _look_rule(mean, se, step_boundary(design, look, 0, 0), design.sesoi)
    return c, small


class _Critical(NamedTuple):
    """The critical t's :func:`_look_rule` reads, one per simulated comparison (Holm's level differs by them)."""

    sup_t: np.ndarray
    eq_t: np.ndarray


def _holm_look(design: Design, look: int, mean: np.ndarray, se: np.ndarray, code: np.ndarray,
               eq_made: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_decide_holm` on (arms, n_sim) arrays: each comparison's undecided arms at the levels its claims so
    far allow, again until no claim is added. Decided arms' codes are not read."""
    m = design.n_arms
    sup_t = np.array([step_boundary(design, look, j, 0).sup_t for j in range(m)])
    eq_t = np.array([step_boundary(design, look, 0, j).eq_t for j in range(m)])
    pending = code == -1
    before = (((code == _B) | (code == _W)).sum(axis=0), eq_made.sum(axis=0))
    claims = before
    for _ in _rounds(design):
        crit = _Critical(sup_t[np.minimum(claims[0], m - 1)], eq_t[np.minimum(claims[1], m - 1)])
        c, *_, small = _look_rule(mean, se, crit, design.sesoi)  # type: ignore[arg-type]
        new = (before[0] + (pending & ((c == _B) | (c == _W))).sum(axis=0),
               before[1] + (pending & ((c == _T) | small)).sum(axis=0))
        if all(np.array_equal(a, b) for a, b in zip(new, claims)):
            return c, small
        claims = new
    raise _not_converging(design)


def _rounds(design: Design) -> range:
    """Holm's rounds at one look: each adds a claim, so 2·n_arms + 1 reach the fixed point when levels only grow."""
    return range(2 * design.n_arms + 1)


def _not_converging(design: Design) -> RuntimeError:
    return RuntimeError(f"Holm's step-down did not settle within {2 * design.n_arms + 1} rounds: a level fell as "
                        "claims were added (step_boundary must grow with the claims)")


def simulate(design: Design, deltas: Sequence[float], sd: float | Sequence[float], n_sim: int,
             seed: int, skew: float = 0.0) -> SimulationResult:
    """Operating characteristics of :func:`simulate_decisions` (independent arms: the least favourable case)."""
    sim = simulate_decisions(design, deltas, sd, n_sim, seed, skew)
    code, n_used = sim.code, sim.n
    share = [tuple(float(v) for v in (code == k).mean(axis=1)) for k in (_B, _W, _T, _U)]
    delta = np.asarray(deltas, dtype=float)
    sds = np.broadcast_to(np.asarray(sd, dtype=float), delta.shape)
    return SimulationResult(
        design=design, deltas=tuple(float(v) for v in delta), sds=tuple(float(v) for v in sds), n_sim=n_sim,
        seed=seed, p_better=share[0], p_worse=share[1], p_tie=share[2], p_undecided=share[3],
        expected_n=tuple(float(v) for v in n_used.mean(axis=1)),
        p_any_better_or_worse=float(((code == _B) | (code == _W)).any(axis=0).mean()),
        expected_n_baseline=float(n_used.max(axis=0).mean()), max_n=design.n_max, skew=float(skew),
        p_any_tie=float((code == _T).any(axis=0).mean()),
    )


CARD_N_SIM = 20_000  # per scenario; Monte-Carlo se of a rate near 0.05 is 0.0015
CARD_SEED = 20261202
CARD_SKEWS = (-1.0, -0.5, 0.5, 1.0)  # the card's lines for skewed paired differences


@dataclass(frozen=True)
class SkewLine:
    """The rule's rates when the paired differences are skewed (the bounds are exact only for normal ones)."""

    skew: float
    type_i: float  # P(any arm better or worse | every Δ = 0), family-wise
    tie_at_sesoi: float  # P(tie | |Δ| = SESOI), mean over arms, the worse of Δ = +SESOI and Δ = −SESOI
    tie_side: str  # which of "+SESOI" / "−SESOI" was the worse


@dataclass(frozen=True)
class DesignCard:
    """What a registration promises, simulated at the pilot's spread by :func:`simulate`, every arm at the same true
    Δ in each scenario (docs/ab-protocol.md, "The design card")."""

    design: Design
    pilot_sd: tuple[float, ...]  # sd of the paired differences per arm, from the pilot
    expected_effect: float  # the expected Δ (negative = the arms better), stated at registration
    n_sim: int
    seed: int
    type_i: float  # P(any arm better or worse | every Δ = 0), family-wise; must be ≤ α
    tie_at_zero: float  # P(tie | Δ = 0), mean over arms
    tie_at_sesoi: float  # P(tie | Δ = +SESOI), mean over arms; must be ≤ α (the TOST error)
    power_sesoi: float  # P(better | Δ = −SESOI), mean over arms
    power_expected: float  # P(the right direction | Δ = expected_effect), mean over arms
    expected_n: dict[str, float]  # scenario -> expected replicates per arm
    expected_n_baseline: dict[str, float]  # scenario -> expected replicates of the baseline (until the last arm stops)
    max_n: int
    skew_lines: tuple[SkewLine, ...] = ()  # the rates when the differences are skewed (CARD_SKEWS)
    tie_family: float = 0.0  # P(any arm tie | every Δ at the SESOI), the worse of ±: the separate ties' family rate
    tie_family_side: str = "+SESOI"

    def mc_se(self, p: float) -> float:
        return math.sqrt(max(p * (1 - p), 0.0) / self.n_sim)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["design"] = {**asdict(self.design), "looks": list(self.design.looks)}
        d["pilot_sd"] = list(self.pilot_sd)
        d["boundaries"] = [asdict(b) for b in boundaries(self.design)]
        d["skew_lines"] = [{**asdict(x), "type_i_se": self.mc_se(x.type_i), "tie_se": self.mc_se(x.tie_at_sesoi)}
                           for x in self.skew_lines]
        return d

    def skew_text(self) -> list[str]:
        """The card's skew lines: what happens when the normality the bounds assume fails."""
        if not self.skew_lines:
            return []
        se = self.mc_se
        return ["  if the paired differences are skewed (Pearson type III at the pilot sd; the bounds are exact "
                "for normal differences):"] + [
            f"    skew {x.skew:+.1f}: type-I (family) {x.type_i:.4f} ± {se(x.type_i):.4f}   "
            f"P(tie | |Δ|=SESOI), the worse side ({x.tie_side}): {x.tie_at_sesoi:.4f} ± {se(x.tie_at_sesoi):.4f}"
            for x in self.skew_lines]

    @property
    def expects_the_sesoi(self) -> bool:
        """The expected effect is the SESOI in the arms' favour (Δ = −SESOI): one scenario, one power."""
        return expects_the_sesoi(self.design, self.expected_effect)

    def power_text(self) -> list[str]:
        """Power at the SESOI and at the expected effect, one line when they are one effect."""
        sesoi = f"P(better | Δ=−{self.design.sesoi:g})"
        if self.expects_the_sesoi:
            return [f"  power at the SESOI, which is the expected effect, {sesoi}: {self.power_sesoi:.3f}"]
        return [f"  power at the SESOI {sesoi}: {self.power_sesoi:.3f}",
                f"  power at the expected effect (Δ={self.expected_effect:+g}): {self.power_expected:.3f}"]

    def tie_family_text(self) -> list[str]:
        """The family-wise rate of the separate tie claims; above α under Bonferroni with several arms, the remedy
        named."""
        rate, se, alpha = self.tie_family, self.mc_se(self.tie_family), self.design.alpha
        line = (f"  P(any arm tie | every Δ at {self.tie_family_side}), the separate ties' family-wise rate: "
                f"{rate:.4f} ± {se:.4f}")
        if self.design.multiplicity == HOLM or rate <= alpha + 3 * se:
            return [line]
        return [line, f"   above α {alpha:g}: each tie is at α per arm; register multiplicity: holm for "
                "family-wise ties"]

    def to_text(self) -> str:
        dz = self.design
        se = self.mc_se
        rows = "\n".join(
            f"    look {b.look + 1}: n {b.n:>3}  better/worse |t| > {b.sup_t:8.3f} (p < {b.sup_p:.3g})"
            f"   tie: both TOST t > {b.eq_t:7.3f} (p < {b.eq_p:.3g})"
            for b in boundaries(dz))
        sd = ", ".join(f"{v:.4g}" for v in self.pilot_sd)
        held = dz.holdback_words()
        family = ("Holm's step-down for better/worse and for ties" if dz.multiplicity == HOLM
                  else "Bonferroni; TOST α per arm")
        return "\n".join([
            f"Design card: α {dz.alpha:g} (family of {dz.n_arms} arm(s), {family}), "
            f"SESOI {dz.sesoi:g} bpb, looks {list(dz.looks)}, {SPENDING} spending" + (f"; {held}" if held else ""),
            f"  pilot sd of paired differences: {sd}; expected effect {self.expected_effect:+g} bpb",
            rows,
            f"  type-I error P(better or worse | Δ=0), family: {self.type_i:.4f} ± {se(self.type_i):.4f}",
            f"  P(tie | Δ=0): {self.tie_at_zero:.3f}   P(tie | Δ=+SESOI): {self.tie_at_sesoi:.4f}",
            *self.tie_family_text(),
            *self.power_text(),
            *self.skew_text(),
            "  expected replicates per arm / of the baseline: " + "; ".join(
                f"{k} {self.expected_n[k]:.1f} / {self.expected_n_baseline[k]:.1f}" for k in self.expected_n),
            f"  maximum replicates per arm: {self.max_n}   ({self.n_sim} simulated comparisons per scenario, "
            f"seed {self.seed})",
        ])


def design_card(design: Design, pilot_sd: float | Sequence[float], expected_effect: float,
                n_sim: int = CARD_N_SIM, seed: int = CARD_SEED) -> DesignCard:
    """Simulate the registered procedure at the pilot's spread: type-I error, P(tie) at 0 and at the SESOI, power at
    the SESOI and the expected effect, expected and maximum replicates."""
    design.check()
    sd = tuple(float(v) for v in np.broadcast_to(np.asarray(pilot_sd, dtype=float), (design.n_arms,)))
    if not math.isfinite(expected_effect) or expected_effect == 0:
        raise ValueError(f"expected_effect: a non-zero Δ in bpb (negative = the arms better), got {expected_effect}")
    m, s = design.n_arms, design.sesoi
    scen = {
        "Δ=0": simulate(design, [0.0] * m, sd, n_sim, seed),
        "Δ=+SESOI": simulate(design, [s] * m, sd, n_sim, seed + 1),
        "Δ=−SESOI": simulate(design, [-s] * m, sd, n_sim, seed + 2),
    }
    if expects_the_sesoi(design, expected_effect):  # the same effect: the same scenario, one power
        exp = scen["Δ=−SESOI"]
    else:
        exp = scen[f"Δ={expected_effect:+g}"] = simulate(design, [expected_effect] * m, sd, n_sim, seed + 3)
    right = exp.p_better if expected_effect < 0 else exp.p_worse
    return DesignCard(
        design=design, pilot_sd=sd, expected_effect=float(expected_effect), n_sim=n_sim, seed=seed,
        type_i=scen["Δ=0"].p_any_better_or_worse, tie_at_zero=float(np.mean(scen["Δ=0"].p_tie)),
        tie_at_sesoi=float(np.mean(scen["Δ=+SESOI"].p_tie)),
        power_sesoi=float(np.mean(scen["Δ=−SESOI"].p_better)), power_expected=float(np.mean(right)),
        expected_n={k: float(np.mean(r.expected_n)) for k, r in scen.items()},
        expected_n_baseline={k: r.expected_n_baseline for k, r in scen.items()}, max_n=design.n_max,
        skew_lines=skew_lines(design, sd, n_sim, seed + 10),
        **_tie_family(scen["Δ=+SESOI"], scen["Δ=−SESOI"]),
    )


def _tie_family(plus: SimulationResult, minus: SimulationResult) -> dict[str, Any]:
    """The worse side's P(any arm tie): the family-wise rate of false ties, every arm at the SESOI."""
    side, rate = max((("+SESOI", plus.p_any_tie), ("−SESOI", minus.p_any_tie)), key=lambda x: x[1])
    return {"tie_family": rate, "tie_family_side": side}


def expects_the_sesoi(design: Design, expected_effect: float) -> bool:
    """Whether the expected effect is −SESOI (to rounding): then one scenario gives both powers."""
    return math.isclose(expected_effect, -design.sesoi, rel_tol=1e-12, abs_tol=0.0)


def skew_lines(design: Design, sd: Sequence[float], n_sim: int, seed: int,
               skews: Sequence[float] = CARD_SKEWS) -> tuple[SkewLine, ...]:
    """Type-I error and P(tie | |Δ| = SESOI) at skewness ±g (three scenarios per g, each its own seed)."""
    m, s = design.n_arms, design.sesoi
    out = []
    for i, g in enumerate(skews):
        zero = simulate(design, [0.0] * m, sd, n_sim, seed + 3 * i, skew=g)
        ties = {side: float(np.mean(simulate(design, [d] * m, sd, n_sim, seed + 3 * i + j, skew=g).p_tie))
                for j, (side, d) in enumerate((("+SESOI", s), ("−SESOI", -s)), start=1)}
        side = max(ties, key=lambda k: ties[k])
        out.append(SkewLine(float(g), zero.p_any_better_or_worse, ties[side], side))
    return tuple(out)


def nearest_skew_line(skew: float, lines: Sequence[Mapping[str, float]]) -> str:
    """The card's skew line for a measured skewness: the smallest |g| ≥ |skew|, each rate the worse of ±g (the
    sample skew's sign is uncertain); "" for a card without skew lines."""
    if not lines:
        return ""
    sizes = sorted({abs(float(x["skew"])) for x in lines})
    size = next((g for g in sizes if abs(skew) <= g), sizes[-1])
    at = [x for x in lines if abs(float(x["skew"])) == size]
    type_i, tie = max(float(x["type_i"]) for x in at), max(float(x["tie_at_sesoi"]) for x in at)
    if abs(skew) <= size:
        return (f"the card's |skew| ≤ {size:g} line applies: type-I ≤ {type_i:.3f}, "
                f"P(tie | |Δ| = SESOI) ≤ {tie:.3f}")
    return (f"beyond the card's largest line (|skew| {size:g}: type-I {type_i:.3f}, P(tie | |Δ| = SESOI) "
            f"{tie:.3f}): the error rates are larger than the card states")
