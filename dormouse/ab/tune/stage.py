"""The tune stage: each arm's learning rate chosen before any confirmatory run, by a rule fixed in advance
(:mod:`dormouse.ab.tune.rule`) on seed streams of its own (docs/ab-protocol.md, "The tune stage"). Every arm but the
A/A arm trains the grid, then what its bracketing asks for, round by round; the A/A arm takes its baseline's choice.
The rounds are replayed from the runs on disk every time, so a resume recomputes the same choice, which is recorded
in ``tune.json`` and checked against it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dormouse.ab.comparison.registry import ComparisonError
from dormouse.ab.rule.bad_mode import Marker, bad_mode_lrs
from dormouse.ab.runs.job import Run, read_launch_record
from dormouse.ab.runs.records import RunRecord
from dormouse.ab.tune.rule import RULES, ArmChoice, Bracketing, Values, next_step
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import ComparisonFiles, RunFiles

if TYPE_CHECKING:  # annotations only: the plan module composes configs (dormouse.train.start)
    from dormouse.ab.comparison.plan import ComparisonPlan

TUNE_RECORD = "tune.json"
# A run whose attempt record does not say whether it diverged: the loop's TrainError message, kept in the run's
# error file (dormouse/ab/runs/job.py writes its traceback there), is its only trace.
_LEGACY_DIVERGED = "TrainError: non-finite"


def diverged(rec: RunRecord) -> bool:
    """Whether the run stopped on a non-finite value, as its latest finished attempt recorded (``diverged`` in
    ``launch/RUN.json``)."""
    if rec.complete:
        return False
    attempts = read_launch_record(rec.run_dir.parent, rec.run_dir.name).get("attempts", [])
    ended = [a for a in attempts if "diverged" in a]
    if ended:
        return bool(ended[-1]["diverged"])
    return _diverged_before_the_record(rec.run_dir)


def _diverged_before_the_record(run_dir: Path) -> bool:
    """A run whose attempts record no divergence: its error file holds the loop's message."""
    err = RunFiles(run_dir).ab_error
    return err.is_file() and _LEGACY_DIVERGED in err.read_text(errors="replace")


def tune_value(rec: RunRecord) -> float | None:
    """What the rule reads from one tune run: its final bpb, +inf if it diverged, None if not settled."""
    if rec.complete and rec.final is not None:
        return float(rec.final["bpb"])
    return math.inf if diverged(rec) else None


@dataclass
class TuneOutcome:
    """Where the tune stage stands: its table, the choice (once every arm's rule is done), what is left."""

    table: dict[str, dict[float, list[float | None]]] = field(default_factory=dict)  # arm -> lr -> per replicate j
    chosen: dict[str, float] = field(default_factory=dict)  # every arm, the A/A arm with its baseline's lr
    pending: list[Run] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # run -> why (failed without diverging)
    arms: dict[str, ArmChoice] = field(default_factory=dict)  # each tuned arm whose rule is done: choice, flags

    @property
    def settled(self) -> bool:
        return bool(self.chosen)


def settle(plan: ComparisonPlan, read: Callable[[Run], RunRecord], failed: set[str]) -> TuneOutcome:
    """Replay each tuned arm's rule from disk; choose once every arm is done (pending runs replicate-major)."""
    out = TuneOutcome()
    rule = plan.spec.tune.bracketing()
    for arm in plan.tuned_arms:
        _settle_arm(plan, arm, rule, read, failed, out)
    order = {a: i for i, a in enumerate(plan.arms)}
    out.pending.sort(key=lambda p: (p.replicate, order[p.arm], float(p.cfg.train.lr)))
    if out.pending or out.failed or len(out.arms) < len(plan.tuned_arms):
        return out
    tuned = {arm: choice.lr for arm, choice in out.arms.items()}
    out.chosen = {arm: tuned[plan.lr_source(arm)] for arm in plan.arms}
    return out


def _settle_arm(plan: ComparisonPlan, arm: str, rule: Bracketing, read: Callable[[Run], RunRecord],
                failed: set[str], out: TuneOutcome) -> None:
    """One arm's rounds, stopping at a round with unsettled runs (pending, or failed without diverging) or at its
    choice."""
    values: Values = {}
    cells: dict[tuple[float, int], float | None] = {}
    finished: dict[float, list[RunRecord]] = {}  # lr -> its complete tune runs: what the bad-mode marker reads
    spec_marker = plan.spec.bad_mode
    marker = None if spec_marker is None else Marker(float(spec_marker.at_fraction), float(spec_marker.margin))
    while True:
        step = next_step(rule, values, bad_mode_lrs(finished, marker))
        if step.choice is not None:
            out.arms[arm] = step.choice
            break
        unsettled = False
        for req in step.requests:
            run = plan.tune_run(arm, req.lr, req.replicate)
            rec = read(run)
            cells[(req.lr, req.replicate)] = value = tune_value(rec)
            if value is not None:
                values[(req.lr, req.replicate)] = value
                if rec.complete:
                    finished.setdefault(req.lr, []).append(rec)
                continue
            unsettled = True
            if run.name in failed:
                out.failed[run.name] = rec.error or "failed"
            else:
                out.pending.append(run)
        if unsettled:
            break
    table = out.table.setdefault(arm, {})
    for lr, j in sorted(cells):
        table.setdefault(lr, []).append(cells[(lr, j)])


class TuneStage:
    """The tune stage behind the comparison's stage seam (:class:`dormouse.ab.rule.looks.Stage`): it settles, and the
    confirmatory lrs are set, before any confirmatory run. ``out`` and ``state`` are the looks' ``Progress``."""

    def replay(self, plan: ComparisonPlan, read: Callable[[Run], RunRecord], failed: set[str], out: Any) -> bool:
        """True once the stage has chosen; else its pending runs, or every arm invalid after a failed tune run."""
        out.tune = settle(plan, read, failed)
        if out.tune.settled:
            plan.choose_lrs(out.tune.chosen)
            return True
        if out.tune.pending:
            out.pending = out.tune.pending
            return False
        why = "the tune stage could not choose: " + "; ".join(f"{k}: {v}" for k, v in out.tune.failed.items())
        for arm in plan.arms:
            out.invalid[arm] = why
        return False

    def describe(self, plan: ComparisonPlan, state: Any) -> str:
        arms = ", ".join(dict.fromkeys(p.arm for p in state.pending))
        lrs = sorted({float(p.cfg.train.lr) for p in state.pending})
        extra = sorted({float(p.cfg.train.lr) for p in state.pending if is_extension(plan, p)})
        seconds = sorted({p.name for p in state.pending if is_second_seed(plan, p)})
        rule = plan.spec.tune.bracketing()
        return (f"the tune stage (arms {arms} × lrs {', '.join(f'{x:g}' for x in lrs)}"
                + (f"; extension lr(s) {', '.join(f'{x:g}' for x in extra)}" if extra else "")
                + (f"; second seed(s) {', '.join(seconds)}" if seconds else "")
                + f"; budget {rule.budget} runs per arm)")

    def save(self, plan: ComparisonPlan, state: Any) -> None:
        """``tune.json``, once the choice is made, before any confirmatory run trains."""
        if state.tune is not None:
            record(plan, state.tune)


def to_dict(plan: ComparisonPlan, out: TuneOutcome) -> dict[str, Any]:
    """The stage as results.json and tune.json hold it: a diverged run as "diverged", one that failed otherwise as
    "failed" (with its reason in ``failed``), an unsettled one as null, ``arms`` each done arm's flags."""
    tune = plan.spec.tune
    rule = tune.bracketing()
    return {"rule": tune.rule, "rule_text": RULES[tune.rule], "lrs": [float(x) for x in tune.lrs],
            "replicates": int(tune.replicates), "init_seeds": list(tune.streams()["tune.init_seed_base"]),
            "data_seeds": list(tune.streams()["tune.data_seed_base"]),
            "extensions": rule.extensions, "second_seed_gap": rule.second_seed_gap, "ratio": rule.ratio,
            "table": {arm: {repr(lr): [_cell(v, plan.tune_run(arm, lr, j).name in out.failed) for j, v in enumerate(vs)]
                            for lr, vs in by_lr.items()} for arm, by_lr in out.table.items()},
            "chosen": dict(out.chosen), "aa_arm_takes": plan.spec.baseline if plan.spec.aa_arm else None,
            "arms": {arm: choice.to_dict() for arm, choice in out.arms.items()},
            **({"failed": dict(out.failed)} if out.failed else {})}


def _cell(value: float | None, failed: bool) -> float | str | None:
    """A diverged run as "diverged" (the rule's +inf); one that failed otherwise as "failed", never +inf: a crash
    or a refused resume says nothing about the lr."""
    return "diverged" if value == math.inf else "failed" if failed else value


def record(plan: ComparisonPlan, out: TuneOutcome) -> None:
    """Write ``tune.json`` atomically once the choice is made; refuse one differing from an earlier record (the
    confirmatory runs may have used the other lr)."""
    if not out.settled:
        return
    path = tune_path(plan.comp_dir)
    new = to_dict(plan, out)
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("chosen") != new["chosen"]:
            raise ComparisonError([f"{path} chose {old.get('chosen')} but the tune runs on disk now choose "
                                   f"{new['chosen']}: the tune runs changed after the choice; pass --restart to "
                                   "start the comparison over"])
        if old == new:
            return
    atomic_write_text(path, json.dumps(new, indent=2) + "\n")


def plan_lines(plan: ComparisonPlan, out: TuneOutcome | None) -> list[str]:
    """What ``ab plan`` and ``ab status`` say of the stage: grid, seeds, rule, budget, arm states, lrs and runs."""
    tune = plan.spec.tune
    if tune is None:
        return []
    streams, rule = tune.streams(), tune.bracketing()
    lines = [f"tune stage: {len(plan.tune_runs)} runs first (arms {', '.join(plan.tuned_arms)} × lrs "
             f"{', '.join(f'{x:g}' for x in tune.lrs)} × {tune.replicates} replicate(s); init seeds "
             f"{streams['tune.init_seed_base'].start}.., data seeds {streams['tune.data_seed_base'].start}..); "
             f"rule: {RULES[tune.rule]}"
             + (f"; the A/A arm {plan.spec.aa_arm!r} takes the lr chosen for the baseline {plan.spec.baseline!r}"
                if plan.spec.aa_arm else ""), bracketing_line(rule)]
    lines += [arm_state_line(rule, arm, out) for arm in plan.tuned_arms]
    planned = _planned_runs(plan, out)
    if out is not None and out.settled:
        lines.append("confirmatory train.lr (chosen by the tune stage): "
                     + ", ".join(f"{a}={lr:g}" for a, lr in out.chosen.items()))
    else:
        done = 0 if out is None else len(planned) - len(out.pending) - len(out.failed)
        lines.append(f"confirmatory train.lr: chosen by the tune stage once its runs finish ({done} of "
                     f"{len(planned)} settled" + (f"; failed: {', '.join(out.failed)}" if out and out.failed
                                                  else "") + ")")
    for p in planned:
        why = (" (extension)" if is_extension(plan, p) else "") + (" (second seed)" if is_second_seed(plan, p)
                                                                   else "")
        lines.append(f"  tune run {p.name}: train.lr={float(p.cfg.train.lr):g} train.seed={p.cfg.train.seed} "
                     f"train.data_seed={p.cfg.train.data_seed}{why}")
    return lines


def is_extension(plan: ComparisonPlan, run: Run) -> bool:
    return float(run.cfg.train.lr) not in {float(x) for x in plan.spec.tune.lrs}


def is_second_seed(plan: ComparisonPlan, run: Run) -> bool:
    """A tune run on the second tune seed (tune replicate R + 1, 1-based)."""
    return run.replicate > int(plan.spec.tune.replicates)


def bracketing_line(rule: Bracketing) -> str:
    """The registered bracketing and the budget, in one line."""
    ext = (f"up to {rule.extensions} grid point(s) added per arm beyond an edge its best lr sits at (×{rule.ratio:g} "
           "above, ÷ below; a divergence stops that side)" if rule.extensions else "no extension (extensions 0)")
    gap = (f"a second tune seed for the best lr and each neighbour within {rule.second_seed_gap:g} bpb of it"
           if rule.second_seed_gap is not None else "no second seed")
    return f"tune rule: {ext}; {gap}; budget {rule.budget} tune runs per arm at most, the same for every arm"


def arm_state_line(rule: Bracketing, arm: str, out: TuneOutcome | None) -> str:
    """One arm's tune state: runs used, extensions, second seeds, and once done its choice and flags."""
    by_lr = {} if out is None else out.table.get(arm, {})
    done = None if out is None else out.arms.get(arm)
    runs = sum(v is not None for vs in by_lr.values() for v in vs)
    extended = [lr for lr in by_lr if lr not in rule.grid]
    seconds = [lr for lr, vs in by_lr.items() if len(vs) > rule.replicates]
    parts = [f"{runs} of at most {rule.budget} runs settled"]
    if extended:
        parts.append("extended to " + ", ".join(f"{x:g}" for x in extended))
    if seconds:
        parts.append("second seed at " + ", ".join(f"{x:g}" for x in seconds))
    if done is None:
        parts.append("choosing")
    else:
        parts.append(f"chose {done.lr:g}")
        parts += [f"stability-limited ({side}: its neighbour diverged)" for side in done.stability_limited]
        if done.unbracketed:
            parts.append(f"UNBRACKETED ({done.unbracketed}: the choice is the {done.unbracketed} edge of what "
                         "it ran)")
    return f"  tune arm {arm}: " + "; ".join(parts)


def _planned_runs(plan: ComparisonPlan, out: TuneOutcome | None) -> list[Run]:
    """The tune runs planned so far: the grid's, then what the rule asked for beyond them."""
    runs = list(plan.tune_runs)
    if out is not None:
        for arm, by_lr in out.table.items():
            runs += [plan.tune_run(arm, lr, j) for lr, vs in by_lr.items() for j in range(len(vs))]
    return list({p.name: p for p in runs}.values())


def tune_path(comp_dir: Path) -> Path:
    return Path(comp_dir) / TUNE_RECORD


def recorded_choice(comp_dir: Path) -> dict[str, float] | None:
    """The choice recorded in ``tune.json``, else ``results.json``'s ``tune`` (a published result); or None."""
    for path, pick in ((tune_path(comp_dir), lambda d: d.get("chosen")),
                       (ComparisonFiles(Path(comp_dir)).results, lambda d: (d.get("tune") or {}).get("chosen"))):
        try:
            chosen = pick(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if chosen:
            return {str(k): float(v) for k, v in chosen.items()}
    return None
