"""The registered training budget (docs/ab-protocol.md, "The budget"): ``steps`` (the default), or each arm trained to
the same training FLOPs or bytes, its steps the budget over its cost per step rounded to the nearest step and its
evals at the same fractions of its run. Torch-free: ``ab plan`` and ``ab design`` read it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from dormouse.config.eval_schedule import eval_steps
from dormouse.model.flops import flop_count, step_tokens
from dormouse.run.loglines import human

UNITS = ("steps", "flops", "tokens")


@dataclass
class BudgetSpec:
    """The ``budget:`` block of a registration (every arm alike)."""

    unit: str = "steps"
    value: float | None = None  # null under steps: train.steps as composed
    evals: int | None = None  # flops/tokens: eval points per run; null: the baseline's count at its train.eval_every

    @property
    def matches_cost(self) -> bool:
        """A budget in FLOPs or tokens: each arm's steps follow from its cost per step."""
        return self.unit != "steps"

    def problems(self, where: str = "budget") -> list[tuple[str, str]]:
        """``(field, problem)`` pairs, the field relative to the registration (``budget.unit``)."""
        out: list[tuple[str, str]] = []
        if self.unit not in UNITS:
            return [(f"{where}.unit", f"{self.unit!r} is not a budget unit ({', '.join(UNITS)})")]
        value = self.value
        if value is None:
            if self.matches_cost:
                out.append((f"{where}.value", f"required under unit {self.unit} (the {self.unit} every arm trains)"))
        elif not (math.isfinite(value) and value > 0):
            out.append((f"{where}.value", f"{value} must be a finite number > 0"))
        elif self.unit == "steps" and value != int(value):
            out.append((f"{where}.value", f"{value} must be a whole number of steps"))
        if self.evals is not None:
            if not self.matches_cost:
                out.append((f"{where}.evals", "applies under unit flops or tokens; under steps train.eval_every "
                                              "places the evals"))
            elif self.evals < 1:
                out.append((f"{where}.evals", f"{self.evals} must be >= 1"))
        return out


def budget_owned_keys(budget: BudgetSpec, for_every_arm: bool) -> tuple[str, ...]:
    """The keys a registration's ``fixed`` or the CLI (``for_every_arm``), or an arm's overrides, may not set: the
    steps whenever the budget sets them; under flops or tokens an arm's own ``train.eval_every`` too."""
    if budget.matches_cost:
        return ("train.steps",) if for_every_arm else ("train.steps", "train.eval_every")
    return ("train.steps",) if budget.value is not None else ()


def budget_of(spec: Any) -> BudgetSpec:
    """A registration's budget; one without a ``budget`` block trains for ``train.steps``."""
    return getattr(spec, "budget", None) or BudgetSpec()


@dataclass(frozen=True)
class ArmBudget:
    """What the budget gives one arm: its steps (``exact`` before rounding), its cost per step, its eval spacing."""

    steps: int
    exact: float  # the budget over the cost per step (= steps under a step budget)
    flops_per_step: float
    tokens_per_step: int
    eval_every: float
    arm_counted: bool  # False: the arm declares no FLOP count (its own work left out)

    @property
    def flops(self) -> float:
        return self.flops_per_step * self.steps

    @property
    def tokens(self) -> int:
        return self.tokens_per_step * self.steps

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "exact_steps": self.exact, "flops_per_step": self.flops_per_step,
                "tokens_per_step": self.tokens_per_step, "flops": self.flops, "tokens": self.tokens,
                "eval_every": self.eval_every, "arm_flops_counted": self.arm_counted}


def arm_budgets(budget: BudgetSpec, arm_cfgs: dict[str, DictConfig], baseline: str) -> dict[str, ArmBudget]:
    """Each arm's steps and eval spacing under ``budget``, from its composed config; a budget too small for one step
    of an arm is a ValueError naming the arm (the field is ``budget.value``)."""
    counts = {arm: flop_count(cfg) for arm, cfg in arm_cfgs.items()}  # each arm's count, made once
    per_unit = {arm: counts[arm].training_per_token * step_tokens(cfg) if budget.unit == "flops"
                else float(step_tokens(cfg)) for arm, cfg in arm_cfgs.items()}
    evals = budget.evals
    if budget.matches_cost and evals is None:  # the baseline's evals at its own budget and train.eval_every
        base_steps = _rounded(float(budget.value or 0) / per_unit[baseline])
        evals = len(eval_steps(arm_cfgs[baseline].train.eval_every, max(1, base_steps)))
    out: dict[str, ArmBudget] = {}
    for arm, cfg in arm_cfgs.items():
        count, tokens = counts[arm], step_tokens(cfg)
        flops_per_step = count.training_per_token * tokens
        if not budget.matches_cost:
            steps = int(budget.value) if budget.value is not None else int(cfg.train.steps)
            out[arm] = ArmBudget(steps, float(steps), flops_per_step, tokens, cfg.train.eval_every, count.arm_counted)
            continue
        exact = float(budget.value or 0) / per_unit[arm]
        steps = _rounded(exact)
        if steps < 1:
            raise ValueError(f"{budget.value:g} {budget.unit} is less than one training step of arm "
                             f"{arm!r} ({per_unit[arm]:.4g} {budget.unit} per step)")
        every = steps / int(evals or 1)
        out[arm] = ArmBudget(steps, exact, flops_per_step, tokens, int(every) if every == int(every) else every,
                             count.arm_counted)
    return out


def _rounded(exact: float) -> int:
    """The nearest whole step (halves up), so an arm trains within half a step of the budget."""
    return int(math.floor(exact + 0.5))


def apply_budget(arm_cfgs: dict[str, DictConfig], budgets: dict[str, ArmBudget]) -> None:
    """Set each arm's ``train.steps`` and ``train.eval_every`` to its budget's."""
    for arm, cfg in arm_cfgs.items():
        cfg.train.steps = budgets[arm].steps
        cfg.train.eval_every = budgets[arm].eval_every


def rounding_line(budget: BudgetSpec, arm: str, b: ArmBudget) -> str:
    """How an arm's steps follow from the budget, the rounding stated."""
    if not budget.matches_cost:
        return f"{arm}: {b.steps} steps"
    off = (b.steps - b.exact) / b.exact
    return (f"{arm}: {budget.value:.4g} {budget.unit} / {human(_unit_per_step(budget, b))} per step = "
            f"{b.exact:.2f} -> {b.steps} steps (nearest whole step: {off:+.2%} of the budget), an eval every "
            f"{b.eval_every:g} steps")


def _unit_per_step(budget: BudgetSpec, b: ArmBudget) -> float:
    return b.flops_per_step if budget.unit == "flops" else float(b.tokens_per_step)
