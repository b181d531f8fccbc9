"""How far an arm's tuned lr may be from the best it tried (docs/ab-protocol.md, "The tune stage": regret): the
largest one-sided 95 % bound on mean(chosen) − mean(other lr), Bonferroni over the others, on the seeds' pooled sd
(the confirmatory runs' with one tune seed per lr); and whether a verdict is fragile to it (descriptive)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, variance
from typing import Any

LEVEL = 0.95  # one-sided, over the chosen lr's comparisons together (Bonferroni)


@dataclass(frozen=True)
class Regret:
    """The regret bound of one arm's choice: ``upper`` in bpb, on ``df`` pooled degrees of freedom."""

    upper: float
    df: int
    compared: int  # the other lrs with a finite mean
    spread_from: str = "tune"  # whose seeds gave the sd: "tune", or "confirmatory" (one tune seed per lr)

    def to_dict(self) -> dict[str, Any]:
        return {"upper": self.upper, "df": self.df, "compared": self.compared, "level": LEVEL,
                "spread_from": self.spread_from}


def regret_bound(by_lr: dict[float, list[float]], chosen: float, fallback: list[float] | None = None) -> Regret | None:
    """The bound for ``chosen`` among ``by_lr`` (lr -> its tune seeds' final bpb; +inf: diverged, never better);
    without two finite seeds at any lr the spread of ``fallback`` (the arm's confirmatory finals); None when
    neither has one, or no other lr has a finite mean."""
    from scipy import stats

    finite = {lr: [v for v in vs if math.isfinite(v)] for lr, vs in by_lr.items()}
    finite = {lr: vs for lr, vs in finite.items() if vs}
    if chosen not in finite:
        return None
    df = sum(len(vs) - 1 for vs in finite.values())
    others = [lr for lr in finite if lr != chosen]
    spare = [v for v in fallback or [] if math.isfinite(v)]
    if not others or (df == 0 and len(spare) < 2):
        return None
    if df:
        pooled, source = math.sqrt(sum((len(vs) - 1) * variance(vs) for vs in finite.values() if len(vs) > 1) / df), \
            "tune"
    else:
        pooled, df, source = math.sqrt(variance(spare)), len(spare) - 1, "confirmatory"
    t = float(stats.t.isf((1 - LEVEL) / len(others), df))
    mc, nc = fmean(finite[chosen]), len(finite[chosen])
    upper = max(mc - fmean(finite[lr]) + t * pooled * math.sqrt(1 / nc + 1 / len(finite[lr])) for lr in others)
    return Regret(max(0.0, upper), df, len(others), source)


def decision_margin(verdict: str, decision: dict[str, Any], sesoi: float) -> float | None:
    """How far the decided interval lies inside its verdict's region: below 0 (better), above 0 (worse), inside
    ±SESOI (tie); None for an undecided arm."""
    if verdict == "better":
        return -float(decision["interval"][1])
    if verdict == "worse":
        return float(decision["interval"][0])
    if verdict == "tie":
        lo, hi = decision["eq_interval"]
        return min(sesoi - float(hi), float(lo) + sesoi)
    return None


def moving_regret(verdict: str, arm: Regret | None, baseline: Regret | None) -> float | None:
    """The regret that could undo the verdict: a better-tuned baseline lowers its bpb (Δ rises: a ``better`` at
    risk), a better-tuned arm lowers its own (a ``worse`` at risk); a ``tie`` either way."""
    pick = {"better": [baseline], "worse": [arm], "tie": [arm, baseline]}.get(verdict, [])
    known = [r.upper for r in pick if r is not None]
    return max(known) if known and len(known) == len(pick) else None


def fragile(verdict: str, decision: dict[str, Any] | None, sesoi: float, arm: Regret | None,
            baseline: Regret | None) -> bool | None:
    """Whether the verdict's margin is smaller than the regret that could move it (None: not known)."""
    if decision is None:
        return None
    margin, regret = decision_margin(verdict, decision, sesoi), moving_regret(verdict, arm, baseline)
    return None if margin is None or regret is None else margin < regret
