"""The tune stage's choice rule (docs/ab-protocol.md, "The tune stage", steps 0–3): :data:`RULES` a registration may
name, :func:`choose` among the lrs an arm ran, and :func:`next_step`, the bracketing around it (an extension beyond
an edge, a second seed for a close call). Pure functions of the tune values so the stage replays them from disk, and
apart from :mod:`dormouse.ab.tune.stage` so the registry can name the rules without the engine. Each arm's budget is
``(len(grid) + extensions) * (R + 1 if second_seed_gap else R)``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from statistics import fmean

RULE = "lowest_mean_final_bpb"
RULES = {RULE: "the lr with the lowest mean final bpb over the tune replicates run there; a diverged run counts "
               "as +inf; ties go to the smaller lr. Bracketing (registered `extensions` > 0): while the best lr "
               "is the highest (lowest) lr the arm ran, the next grid point beyond it (top × ratio, bottom / "
               "ratio) runs, up to `extensions` added points per arm; a diverged run stops that side "
               "(stability-limited). With `second_seed_gap`: the best lr and each neighbour whose mean lies "
               "within the gap get one more tune seed before the choice. An arm whose choice is still an edge "
               "of what it ran is flagged unbracketed"}
HIGH, LOW = "high", "low"
RATIO_RTOL = 1e-6  # a grid is geometric when every step's ratio equals the first within this relative error
_DIGITS = 12  # an extension lr is rounded to this many significant digits: 4.5e-3 * 1.5 is 6.75e-3, not ...01


def choose(finals: dict[float, list[float]]) -> float:
    """The lowest mean final bpb, +inf for a diverged run, ties to the smaller lr (step 1)."""
    return min(sorted(finals), key=lambda lr: fmean(finals[lr]))


def grid_ratio(lrs: list[float]) -> float | None:
    """The constant ratio of a sorted geometric grid of >= 2 points (rounded like an extension lr), else None."""
    if len(lrs) < 2 or any(not (x > 0 and math.isfinite(x)) for x in lrs):
        return None
    steps = [b / a for a, b in zip(lrs, lrs[1:])]
    if steps[0] <= 1 or any(abs(s - steps[0]) > RATIO_RTOL * steps[0] for s in steps):
        return None
    return _round((lrs[-1] / lrs[0]) ** (1 / (len(lrs) - 1)))


def _round(x: float) -> float:
    return float(f"{x:.{_DIGITS}g}")


@dataclass(frozen=True)
class Bracketing:
    """A registered tune stage as the rule reads it (``second_seed_gap`` None: no second seed)."""

    grid: tuple[float, ...]
    replicates: int
    extensions: int = 0
    second_seed_gap: float | None = None

    @property
    def ratio(self) -> float | None:
        return grid_ratio(list(self.grid))

    @property
    def seeds(self) -> int:
        """Tune replicates an lr may run: R, plus the second seed when a gap is registered."""
        return self.replicates + (1 if self.second_seed_gap is not None else 0)

    @property
    def budget(self) -> int:
        """The maximum tune runs of one arm, the same for every arm."""
        return (len(self.grid) + self.extensions) * self.seeds

    def lr_at(self, k: int) -> float:
        """Grid point k (0-based; negative or past the end: extension points, bottom / ratio**n, top * ratio**n)."""
        if 0 <= k < len(self.grid):
            return float(self.grid[k])
        ratio = self.ratio
        if ratio is None:
            raise ValueError(f"the grid {list(self.grid)} is not geometric: it cannot be extended")
        base, n = (self.grid[0], k) if k < 0 else (self.grid[-1], k - len(self.grid) + 1)
        return _round(float(base) * ratio ** n)

    def potential_lrs(self) -> list[float]:
        return [self.lr_at(k) for k in range(-self.extensions, len(self.grid) + self.extensions)]


@dataclass(frozen=True)
class Request:
    """One tune run the rule needs: an lr at tune replicate j (j = R: the second seed)."""

    lr: float
    replicate: int


@dataclass(frozen=True)
class ArmChoice:
    """An arm's choice and what the rule did to reach it (docs/ab-protocol.md, "The tune stage")."""

    lr: float
    runs: int
    budget: int
    extended: tuple[float, ...]
    second_seed: tuple[float, ...]
    stability_limited: tuple[str, ...]
    unbracketed: str | None
    bad_mode_lrs: tuple[float, ...] = ()  # lrs a tune seed of which fell in a bad mode: dropped from the choice

    def to_dict(self) -> dict[str, object]:
        out = {"runs": self.runs, "budget": self.budget, "extended": list(self.extended),
               "second_seed": list(self.second_seed), "stability_limited": list(self.stability_limited),
               "unbracketed": self.unbracketed}
        return {**out, "bad_mode_lrs": list(self.bad_mode_lrs)} if self.bad_mode_lrs else out


@dataclass(frozen=True)
class Step:
    """What the rule says next: tune runs to make first, or (none left) the arm's choice."""

    requests: tuple[Request, ...] = ()
    choice: ArmChoice | None = None


Values = dict[tuple[float, int], float]  # (lr, tune replicate j) -> final bpb (+inf: diverged)


def _means(values: Values) -> dict[float, list[float]]:
    by_lr: dict[float, list[float]] = {}
    for (lr, _), v in sorted(values.items()):
        by_lr.setdefault(lr, []).append(v)
    return by_lr


def _neighbours(tried: list[float], lr: float) -> dict[str, float]:
    """The adjacent lrs the arm ran, by side."""
    i = tried.index(lr)
    return {**({LOW: tried[i - 1]} if i > 0 else {}), **({HIGH: tried[i + 1]} if i + 1 < len(tried) else {})}


def _extension(rule: Bracketing, tried: list[float], best: float) -> Request | None:
    """Step 1: the next point beyond ``best`` when it is an edge of what the arm ran and budget is left."""
    added = sum(lr not in rule.grid for lr in tried)
    if added >= rule.extensions:
        return None
    k = rule.potential_lrs().index(best) - rule.extensions  # best's grid index (negative below the grid)
    if best == tried[-1]:
        return Request(rule.lr_at(k + 1), 0)
    if best == tried[0]:
        return Request(rule.lr_at(k - 1), 0)
    return None


def _second_seeds(rule: Bracketing, values: Values, means: dict[float, float], best: float) -> list[Request]:
    """Step 2: ``best`` and its neighbours within the gap, those without seed R yet."""
    gap, r = rule.second_seed_gap, rule.replicates
    if gap is None or not math.isfinite(means[best]):
        return []
    near = [lr for lr in _neighbours(sorted(means), best).values() if means[lr] - means[best] <= gap]
    if not near:
        return []
    return [Request(lr, r) for lr in sorted([best, *near]) if (lr, r) not in values]


def next_step(rule: Bracketing, values: Values, dropped: frozenset[float] = frozenset()) -> Step:
    """The rule on an arm's settled tune values: the runs it needs next, else its choice. An lr in ``dropped`` (a
    seed of it fell in a registered bad mode) is never chosen, unless every lr the arm ran is dropped."""
    missing = [Request(lr, j) for lr in rule.grid for j in range(rule.replicates) if (lr, j) not in values]
    if missing:
        return Step(requests=tuple(missing))
    finals = _means(values)
    tried = sorted(finals)
    kept = {lr: vs for lr, vs in finals.items() if lr not in dropped}
    best = choose(kept or finals)
    means = {lr: fmean(vs) for lr, vs in finals.items()}
    ext = _extension(rule, tried, best)
    if ext is not None:
        return _asking(values, [Request(ext.lr, j) for j in range(rule.replicates)])
    seconds = _second_seeds(rule, values, means, best)
    if seconds:
        return _asking(values, seconds)
    choice = _choice(rule, values, finals, best)
    return Step(choice=replace(choice, bad_mode_lrs=tuple(sorted(set(dropped) & set(finals)))))


def _asking(values: Values, requests: list[Request]) -> Step:
    """A round of requests; asking again for a run the arm has would replay forever: a bug, said at once."""
    again = [q for q in requests if (q.lr, q.replicate) in values]
    if again:
        raise RuntimeError(f"the tune rule asked again for runs it has: {again}")
    return Step(requests=tuple(requests))


def _choice(rule: Bracketing, values: Values, finals: dict[float, list[float]], best: float) -> ArmChoice:
    """Step 3: the choice and its flags."""
    tried = sorted(finals)
    limited = tuple(side for side, lr in sorted(_neighbours(tried, best).items())
                    if any(v == math.inf for v in finals[lr]))
    unbracketed = HIGH if best == tried[-1] else LOW if best == tried[0] else None
    return ArmChoice(lr=best, runs=len(values), budget=rule.budget,
                     extended=tuple(lr for lr in tried if lr not in rule.grid),
                     second_seed=tuple(lr for lr in tried if (lr, rule.replicates) in values),
                     stability_limited=limited, unbracketed=unbracketed)


def replay(rule: Bracketing, value_of: Callable[[float, int], float]) -> ArmChoice:
    """Run the rule to its choice with ``value_of(lr, j)`` as every tune run (a simulation, a test)."""
    values: Values = {}
    while True:
        step = next_step(rule, values)
        if step.choice is not None:
            return step.choice
        for req in step.requests:
            values[(req.lr, req.replicate)] = value_of(req.lr, req.replicate)
