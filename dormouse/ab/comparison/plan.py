"""One plan per comparison, built once and read by the run, ``ab plan``, ``ab status`` and ``ab design``: the
registration, its replicates (init and data-order seeds), looks and every run's composed config
(docs/ab-protocol.md, "Running a comparison"). :func:`build_plan` composes each arm once (Hydra is the slow part)
and validates every run and its corpus before anything runs, without torch; a problem all arms share is said once.
What this machine can run (device, kernel) is the run's check (:func:`dormouse.ab.comparison.runner.machine_problems`).
Replicate k (1-based) uses ``base + k − 1`` of each stream, so a longer schedule only adds replicates; the bad-run
policy's R spares continue the streams past the maximum. Tune runs beyond the grid are made on demand
(:meth:`ComparisonPlan.tune_run`). A protocol-1 registration plans its listed seeds as one look."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from dormouse.ab.comparison.budget import ArmBudget, apply_budget, arm_budgets, budget_of, budget_owned_keys
from dormouse.ab.comparison.registry import (
    RUNNER_KEYS,
    TUNED_KEY,
    ComparisonError,
    ComparisonSpec,
    Registered,
    load_spec,
    override_key,
)
from dormouse.ab.runs.job import Run
from dormouse.config.schema import ConfigError, arm_name, validate
from dormouse.data import DataError, read_corpus
from dormouse.run.files import ComparisonFiles, run_name
from dormouse.train.run_config import load_run_config

if TYPE_CHECKING:
    from dormouse.ab.rule.sequential import Design


@dataclass(frozen=True)
class Replicate:
    """One replicate: every arm trains once with these seeds (``data_seed`` None: protocol 1, the arm's)."""

    index: int  # 1-based
    init_seed: int
    data_seed: int | None
    aa_data_seed: int | None


@dataclass
class ComparisonPlan:
    """Everything a comparison will run, in the order it runs it (replicate-major)."""

    reg: Registered
    overrides: list[str]
    comp_dir: Path
    replicates: list[Replicate]
    looks: list[int]  # cumulative replicates per arm at each look
    runs: list[Run]  # the confirmatory runs (with a tune stage: their train.lr set by choose_lrs)
    tune_runs: list[Run] = field(default_factory=list)  # the tune runs the grid needs, run first (tune.py)
    chosen_lrs: dict[str, float] | None = None  # arm -> train.lr, once the tune stage chose
    arm_cfgs: dict[str, DictConfig] = field(default_factory=dict)  # each arm's composed config (the tune runs')
    budgets: dict[str, ArmBudget] = field(default_factory=dict)  # each arm's steps and cost under the budget
    _tune_made: dict[tuple[str, float, int], Run] = field(default_factory=dict, repr=False)

    def tune_run(self, arm: str, lr: float, j: int) -> Run:
        """Tune run of ``arm`` at ``lr``, replicate ``j`` (j = replicates: the second seed), made once."""
        key = (arm, float(lr), int(j))
        if key not in self._tune_made:
            run, lines = _make_tune_run(self, *key)
            if lines:
                raise ComparisonError(lines)
            self._tune_made[key] = run
        return self._tune_made[key]

    def potential_tune_runs(self) -> list[Run]:
        """Every tune run the stage may run within its budget (what may be found on disk)."""
        tune = getattr(self.spec, "tune", None)
        if tune is None:
            return []
        rule = tune.bracketing()
        made = [self.tune_run(a, lr, j) for j in range(rule.seeds) for a in self.tuned_arms
                for lr in rule.potential_lrs()]
        return list({p.name: p for p in [*self.tune_runs, *made]}.values())

    @property
    def tuned_arms(self) -> list[str]:
        """The arms the tune stage trains: every arm but the A/A arm (it takes its baseline's lr)."""
        return [a for a in self.arms if a != self.reg.spec.aa_arm]

    def lr_source(self, arm: str) -> str:
        """Whose tuned lr an arm runs at: its own, or for the A/A arm its baseline's, never its own."""
        return str(self.reg.spec.baseline) if arm == self.reg.spec.aa_arm else arm

    @property
    def lr_pending(self) -> bool:
        """A tune stage whose choice is not made yet: the confirmatory runs must not run."""
        return bool(self.tune_runs) and self.chosen_lrs is None

    def choose_lrs(self, chosen: dict[str, float]) -> None:
        """Set each confirmatory run's ``train.lr`` to its arm's tuned choice; a different choice from an earlier
        call is a bug, refused."""
        if self.chosen_lrs is not None and self.chosen_lrs != chosen:
            raise ComparisonError([f"the tune choice changed within one invocation: {self.chosen_lrs} -> {chosen}"])
        for run in self.runs:
            run.cfg.train.lr = float(chosen[run.arm])
        self.chosen_lrs = dict(chosen)

    @property
    def all_runs(self) -> list[Run]:
        """Every run that may exist on disk: the potential tune runs (the grid's first), the confirmatory."""
        return [*self.potential_tune_runs(), *self.runs]

    @property
    def spec(self) -> Any:
        return self.reg.spec

    @property
    def name(self) -> str:
        return str(self.reg.spec.name)

    @property
    def files(self) -> ComparisonFiles:
        return ComparisonFiles(self.comp_dir)

    @property
    def arms(self) -> list[str]:
        return list(self.reg.spec.arms)

    def runs_to(self, n_replicates: int, arms: list[str] | None = None) -> list[Run]:
        keep = set(self.arms if arms is None else arms)
        return [p for p in self.runs if p.replicate <= n_replicates and p.arm in keep]

    def run_of(self, arm: str, replicate: int) -> Run:
        """The confirmatory run of ``arm`` at ``replicate`` (a spare's too)."""
        return next(p for p in self.runs if p.arm == arm and p.replicate == replicate)

    def look_label(self, replicate: int) -> str:
        """The look a replicate first belongs to (1-based), or ``spare`` for the bad-run policy's spares."""
        return next((str(i + 1) for i, n in enumerate(self.looks) if replicate <= n), "spare")

    def design(self) -> Design:
        """The registered sequential design; the family is fixed at registration."""
        spec = self.reg.spec
        if not isinstance(spec, ComparisonSpec):
            raise ComparisonError([f"{self.reg.source}: protocol 1 has no sequential design (read only)"])
        return spec.design()


def check_cli_overrides(reg: Registered, overrides: list[str]) -> None:
    """CLI overrides may tune the environment (device, steps, wandb) but not set a runner-owned key or a key an arm
    sets: that would erase the difference measured."""
    arm_keys = {override_key(o): arm for arm, ovs in reg.spec.arms.items() for o in ovs}
    tuned = TUNED_KEY if getattr(reg.spec, "tune", None) is not None else None
    budget = budget_of(reg.spec)
    budget_owned = budget_owned_keys(budget, for_every_arm=True)
    lines = []
    for o in overrides:
        key = override_key(o)
        if "=" not in o:
            lines.append(f"override {o!r} is not key=value")
        elif key in RUNNER_KEYS:
            lines.append(f"override {o!r} sets {key}, which `dormouse ab` sets for every run "
                         f"({', '.join(RUNNER_KEYS)})")
        elif key == tuned:
            lines.append(f"override {o!r} sets {key}, which this registration's tune stage chooses per arm")
        elif key in budget_owned:
            lines.append(f"override {o!r} sets {key}, which this registration's budget (unit {budget.unit}) sets "
                         "for every arm")
        elif key in arm_keys:
            lines.append(f"override {o!r} sets {key}, which arm {arm_keys[key]!r} sets: it would change what "
                         "the arms differ in; register another comparison instead")
    if lines:
        raise ComparisonError(lines)


def replicates_of(spec: Any) -> list[Replicate]:
    """The registered replicates up to the maximum, then the bad-run policy's spares."""
    if not isinstance(spec, ComparisonSpec):
        return [Replicate(i + 1, int(s), None, None) for i, s in enumerate(spec.seeds)]
    aa = spec.aa_data_seed_base
    return [Replicate(k + 1, spec.init_seed_base + k, spec.data_seed_base + k, None if aa is None else aa + k)
            for k in range(spec.planned_replicates)]


def looks_of(spec: Any) -> list[int]:
    return [int(n) for n in spec.looks] if isinstance(spec, ComparisonSpec) else [len(spec.seeds)]


def build_plan(reg: Registered | str, overrides: list[str], root: Path, registry: Path | None = None) -> ComparisonPlan:
    """Load, check and compose the whole comparison; :class:`ComparisonError` lists every problem. Writes nothing."""
    if isinstance(reg, str):
        reg = load_spec(reg, registry)
    overrides = list(overrides)
    check_cli_overrides(reg, overrides)
    comp_dir = (Path(root) / reg.spec.name).resolve()
    replicates = replicates_of(reg.spec)
    arm_cfgs = _compose_arms(reg, overrides, comp_dir, replicates[0])
    budgets = _budgets(reg, arm_cfgs)
    runs: list[Run] = []
    for rep in replicates:
        for arm, base_cfg in arm_cfgs.items():
            cfg = copy.deepcopy(base_cfg)
            cfg.train.seed = rep.init_seed
            if rep.data_seed is not None:
                cfg.train.data_seed = rep.aa_data_seed if arm == reg.spec.aa_arm else rep.data_seed
            cfg.run.name = run_name(arm, rep.init_seed)
            runs.append(Run(arm, rep.init_seed, cfg, comp_dir / cfg.run.name, replicate=rep.index))
    plan = ComparisonPlan(reg, overrides, comp_dir, replicates, looks_of(reg.spec), runs, arm_cfgs=arm_cfgs,
                          budgets=budgets)
    plan.tune_runs = _tune_runs(plan)
    return plan


def _budgets(reg: Registered, arm_cfgs: dict[str, DictConfig]) -> dict[str, ArmBudget]:
    """Each arm's budget, set into its config (a flops or tokens budget sets train.steps and train.eval_every), the
    configs validated again; protocol 1 trains for train.steps."""
    if not isinstance(reg.spec, ComparisonSpec):
        return {}
    budget = budget_of(reg.spec)
    try:
        budgets = arm_budgets(budget, arm_cfgs, str(reg.spec.baseline))
    except ValueError as exc:
        raise ComparisonError([f"{reg.source}: field 'budget.value': {exc}"]) from None
    apply_budget(arm_cfgs, budgets)
    problems = {arm: validate(cfg) for arm, cfg in arm_cfgs.items()}
    lines = arm_problem_lines(reg, {arm: lns for arm, lns in problems.items() if lns})
    if lines:
        raise ComparisonError(lines)
    return budgets


def tune_run_name(arm: str, lr: float, init_seed: int) -> str:
    """The run directory name of one tune run (never a confirmatory run's: those are ``<arm>-s<seed>``)."""
    return f"tune-{arm}-lr{lr:g}-s{init_seed}"


def _tune_runs(plan: ComparisonPlan) -> list[Run]:
    """The grid's tune runs, replicate-major, validated together (every problem said at once)."""
    tune = getattr(plan.spec, "tune", None)
    if tune is None:
        return []
    made = [_make_tune_run(plan, arm, float(lr), j) for j in range(int(tune.replicates))
            for arm in plan.tuned_arms for lr in tune.lrs]
    lines = [ln for _, lns in made for ln in lns]
    if lines:
        raise ComparisonError(lines)
    for run, _ in made:
        plan._tune_made[(run.arm, float(run.cfg.train.lr), run.replicate - 1)] = run
    return [run for run, _ in made]


def _make_tune_run(plan: ComparisonPlan, arm: str, lr: float, j: int) -> tuple[Run, list[str]]:
    """One tune run (arm at ``lr``, tune replicate ``j``: seeds ``base + j``) and its config's problems."""
    tune = plan.spec.tune
    init_seed, data_seed = tune.init_seed_base + j, tune.data_seed_base + j
    cfg = copy.deepcopy(plan.arm_cfgs[arm])
    cfg.train.lr, cfg.train.seed, cfg.train.data_seed = float(lr), init_seed, data_seed
    cfg.run.name = tune_run_name(arm, float(lr), init_seed)
    lines = [f"{plan.reg.source}: tune run {cfg.run.name}: {ln}" for ln in validate(cfg)]
    return Run(arm, init_seed, cfg, plan.comp_dir / cfg.run.name, replicate=j + 1), lines


def _compose_arms(reg: Registered, overrides: list[str], comp_dir: Path, first: Replicate) -> dict[str, DictConfig]:
    """Each arm's config composed once (at the first replicate's seeds) and validated."""
    spec = reg.spec
    lines: list[str] = []
    arm_lines: dict[str, list[str]] = {}
    arm_cfgs: dict[str, DictConfig] = {}
    for arm, arm_overrides in spec.arms.items():
        try:
            # The registered overrides alone: their composition is the same for every plan of this registration
            # (compose_config keeps it), and the keys the runner owns are set on the copy (no Hydra parse).
            cfg = load_run_config([*spec.fixed, *arm_overrides, *overrides])
        except ConfigError as exc:
            arm_lines[arm] = list(exc.lines)
            continue
        cfg.run.dir, cfg.run.name = str(comp_dir), run_name(arm, first.init_seed)
        cfg.train.seed = first.init_seed
        if first.data_seed is not None:
            cfg.train.data_seed = first.aa_data_seed if arm == spec.aa_arm else first.data_seed
        cfg.logging.wandb_group, cfg.logging.wandb_job_type = spec.name, arm
        problems = validate(cfg)
        if problems:
            arm_lines[arm] = problems
            continue
        arm_cfgs[arm] = cfg
    lines += arm_problem_lines(reg, arm_lines)
    if not lines and spec.aa_arm is not None:
        base_kind, aa_kind = arm_name(arm_cfgs[spec.baseline]), arm_name(arm_cfgs[spec.aa_arm])
        if base_kind != aa_kind:
            lines.append(f"{reg.source}: field 'aa_arm': {spec.aa_arm!r} selects {aa_kind} but the baseline "
                         f"{spec.baseline!r} selects {base_kind}; an A/A arm is the baseline again")
    if not lines:
        lines += _data_problems(reg, arm_cfgs)
    if lines:
        raise ComparisonError(lines)
    return arm_cfgs


def arm_problem_lines(reg: Registered, arm_lines: dict[str, list[str]]) -> list[str]:
    """Each arm's problems, a line each naming the arm; one every arm has (a bad CLI or fixed override) is the
    comparison's: said once."""
    shared = [ln for ln in dict.fromkeys(ln for lns in arm_lines.values() for ln in lns)
              if len(arm_lines) == len(reg.spec.arms) and all(ln in lns for lns in arm_lines.values())]
    return [*(f"{reg.source}: every arm: {ln}" for ln in shared),
            *(f"{reg.source}: arm {arm!r}: {ln}" for arm, lns in arm_lines.items() for ln in lns if ln not in shared)]


def _data_problems(reg: Registered, arm_cfgs: dict[str, DictConfig]) -> list[str]:
    """Read each distinct data config's corpus once before any run: a missing or short corpus, or a
    ``data.eval_bytes`` larger than the val split, is refused naming it."""

    lines: list[str] = []
    seen: dict[str, str | None] = {}
    for arm, cfg in arm_cfgs.items():
        data = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items()}  # type: ignore[union-attr]
        key = json.dumps(data, sort_keys=True)
        if key not in seen:
            try:
                read_corpus(cfg.data)
                seen[key] = None
            except DataError as exc:
                seen[key] = str(exc)
        if seen[key] is not None:
            lines.append(f"{reg.source}: arm {arm!r}: {seen[key]}")
    return lines
