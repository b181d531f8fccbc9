"""Where a sequential comparison stands: its stages (the tune stage when registered, then the confirmatory looks)
replayed from the runs on disk, so the runner, ``ab status`` and the report see the same looks (docs/ab-protocol.md,
"Running a comparison"). At look i the baseline, the A/A arm and every undecided arm run ``looks[i]`` replicates
(under a bad-run policy, :func:`dormouse.ab.rule.bad_runs.assign`'s); a decided arm runs no more. An arm whose runs
failed or ran not as asked is ``invalid`` and stays in the family, so it never loosens the others' correction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dormouse.ab.comparison.plan import ComparisonPlan
from dormouse.ab.comparison.registry import ComparisonError, against_the_mean
from dormouse.ab.rule import bad_runs
from dormouse.ab.rule.contrast import ContrastState, decide_look
from dormouse.ab.rule.sequential import UNDECIDED, decide
from dormouse.ab.runs.job import Run
from dormouse.ab.runs.records import RunRecord, is_finite_number, load_record
from dormouse.config.schema import arm_name

# An arm whose runs failed or whose counters show it did not run as asked: no verdict, but it stays in the
# registered multiplicity family (sequential.Design.n_arms). The statistical verdicts are sequential.VERDICTS.
INVALID = "invalid"
ReadRecord = Callable[[Run], RunRecord]


@dataclass
class Look:
    """One look taken: its index (0-based), replicates per arm, the arms it decided on and their decisions."""

    index: int
    n: int
    arms: list[str]
    decisions: dict[str, Any]  # arm -> sequential.ArmDecision


@dataclass
class Progress:

    looks: list[Look] = field(default_factory=list)
    decisions: dict[str, Any] = field(default_factory=dict)  # each tested arm's latest ArmDecision
    invalid: dict[str, str] = field(default_factory=dict)  # arm -> why (failed or incomplete runs, counters)
    tune: Any = None  # the tune stage's tune.TuneOutcome (None: the registration has none)
    next_look: int | None = None  # the look the pending runs are for (None with tune runs pending)
    stage: Stage | None = None  # the stage the pending runs are for: the last one replayed
    pending: list[Run] = field(default_factory=list)  # runs to run before the next look can be taken
    used: dict[str, list[int]] = field(default_factory=dict)  # arm -> the replicates its analysis uses, in order
    made: dict[str, list[int]] = field(default_factory=dict)  # arm -> every replicate it ran (replaced ones too)
    replaced: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # arm -> (replicate, its spare)
    diffs: dict[str, list[float]] = field(default_factory=dict)  # arm -> Δ over the replicates it uses
    contrast: ContrastState | None = None  # the registered contrast (None: the registration has none)

    def ran(self, run: Run) -> bool:
        """The looks ran this run for its arm: a replicate its analysis uses, one the bad-run policy replaced, or one
        the registered contrast used."""
        c = self.contrast
        return run.replicate in self.made.get(run.arm, ()) or (
            c is not None and run.arm in c.arms and c.decision is not None and run.replicate <= c.decision.n)

    @property
    def finished(self) -> bool:
        """Nothing left to run: every arm decided or invalid, or the maximum reached, or a blocked look."""
        return not self.pending

    def verdict(self, arm: str) -> str:
        if arm in self.invalid:
            return INVALID
        d = self.decisions.get(arm)
        return UNDECIDED if d is None else str(d.verdict)


class Stage(Protocol):
    """One stage of a comparison, replayed from the runs on disk; the runner runs its pending runs in batches."""

    def replay(self, plan: ComparisonPlan, read: ReadRecord, failed: set[str], out: Progress) -> bool:
        """Fill ``out`` with where the stage stands; True once it is settled and the next stage may go on."""
        ...

    def describe(self, plan: ComparisonPlan, state: Progress) -> str:
        """What a batch of the stage's pending runs is for, in the runner's line."""
        ...

    def save(self, plan: ComparisonPlan, state: Progress) -> None:
        """Write what the stage settled before a later stage runs (the runner calls it; a replay writes nothing)."""
        ...


def read_run(run: Run, error: str | None = None) -> RunRecord:
    return load_record(run.arm, run.seed, run.run_dir, arm_name(run.cfg), run.steps, error,
                       replicate=run.replicate)


def paired_differences(recs: list[RunRecord], base: dict[int, RunRecord], key: str = "bpb") -> list[float]:
    """Δ per replicate, arm − baseline at metric ``key`` of the final eval, over the replicates both finished with a
    finite value: what the looks decide on (``bpb``) and the report states (``bpb@k`` too)."""
    out = []
    for r in recs:
        b = base.get(r.replicate)
        if r.final and b is not None and b.final and is_finite_number(r.final.get(key)) \
                and is_finite_number(b.final.get(key)):
            out.append(float(r.final[key]) - float(b.final[key]))
    return out


def mean_reference(base: list[RunRecord], aa: list[RunRecord]) -> dict[int, RunRecord]:
    """Per replicate, the mean of the baseline's and the A/A arm's values (``bpb``, ``bpb@k``, at the final eval and
    along the curve): the registered ``reference: baseline_and_aa``, over the replicates both finished. It keeps the
    baseline's arm name and steps (the A/A arm is the baseline again)."""
    aa_by = {r.replicate: r for r in aa}
    out = {}
    for b in base:
        a = aa_by.get(b.replicate)
        if b.final and a is not None and a.final:
            rows = [_mean_row(rb, ra) for rb, ra in zip(b.rows, a.rows) if rb.get("step") == ra.get("step")]
            out[b.replicate] = RunRecord(b.arm, b.seed, b.run_dir, b.kind, b.steps, rows=rows,
                                         final=_mean_row(b.final, a.final), replicate=b.replicate)
    return out


def _mean_row(b: dict[str, Any], a: dict[str, Any]) -> dict[str, Any]:
    """The step and the mean of each bpb value two eval rows both hold."""
    return {"step": b.get("step"), **{k: (float(v) + float(a[k])) / 2 for k, v in b.items() if k.startswith("bpb")
                                      and is_finite_number(v) and is_finite_number(a.get(k))}}


def reference_runs(plan: ComparisonPlan, made: dict[str, list[RunRecord]]) -> dict[int, RunRecord]:
    """What a tested arm's Δ is taken against: the baseline's runs, or the registered mean reference."""
    spec = plan.spec
    base = made[spec.baseline]
    if against_the_mean(spec):
        return mean_reference(base, made[spec.aa_arm])
    return {r.replicate: r for r in base}


def _use(out: Progress, arm: str, n: int, made: dict[str, list[RunRecord]], chosen: dict[str, bad_runs.Assignment],
         plan: ComparisonPlan) -> None:
    """Record the replicates the arm's analysis uses of those it ``made`` (the policy's, else the first ``n``); a
    tested arm's Δ against the registered reference, the A/A arm's against the baseline (the calibration)."""
    base, aa = plan.spec.baseline, plan.spec.aa_arm
    pick = chosen.get(arm)
    runs = {r.replicate: r for r in made[arm]}
    used = list(pick.used) if pick is not None else list(range(1, n + 1))
    out.used[arm] = sorted({*out.used.get(arm, []), *runs}) if arm == base else used
    out.made[arm] = sorted({*out.made.get(arm, []), *runs})
    out.replaced[arm] = [] if pick is None else list(pick.replacements)
    if arm != base:
        against = {r.replicate: r for r in made[base]} if arm == aa else reference_runs(plan, made)
        out.diffs[arm] = paired_differences([runs[k] for k in used if k in runs], against)


def _finding_free(records: list[RunRecord]) -> bool:
    return all(not r.findings for r in records)


def stages_of(plan: ComparisonPlan) -> list[Stage]:
    """The plan's stages in the order they run: the tune stage when one is registered, then the looks."""
    if not plan.tune_runs:
        return [ConfirmatoryLooks()]
    from dormouse.ab.tune.stage import TuneStage  # the tune wing loads only for a tuned comparison

    return [TuneStage(), ConfirmatoryLooks()]


def progress(plan: ComparisonPlan, read: ReadRecord, failed: set[str] | None = None) -> Progress:
    """Replay the plan's stages from disk, in order, up to the first one not settled. ``read(run)`` gives a run's
    record; runs in ``failed`` are not to be run again now, so their arm is invalid instead of pending."""
    out = Progress()
    for stage in stages_of(plan):
        out.stage = stage
        if not stage.replay(plan, read, failed or set(), out):
            break
    return out


class ConfirmatoryLooks:
    """The confirmatory looks: at look i the baseline, the A/A arm and every undecided arm run ``looks[i]``
    replicates; a decided arm runs no more."""

    def replay(self, plan: ComparisonPlan, read: ReadRecord, failed: set[str], out: Progress) -> bool:
        if plan.lr_pending:  # a confirmatory run would run at an lr the tune stage has not chosen
            raise ComparisonError([f"ab {plan.name}: confirmatory runs scheduled before the tune stage chose"])
        spec = plan.spec
        base, aa = spec.baseline, spec.aa_arm
        helpers = [base] + ([aa] if aa is not None else [])
        active = list(spec.tested)
        if spec.contrast is not None:
            out.contrast = ContrastState(spec.contrast.arm, spec.contrast.against)
        for index, n in enumerate(plan.looks):
            for_contrast = [a for a in (out.contrast.arms if out.contrast and out.contrast.open else ())
                            if a not in active]  # decided against the baseline, still running for the contrast
            arms = (helpers + active if active else []) + for_contrast
            if not arms:
                break
            runs = plan.runs_to(n, arms)
            records = {p.name: read(p) for p in runs}
            to_run = [p for p in runs if not records[p.name].complete and p.name not in failed]
            chosen: dict[str, bad_runs.Assignment] = {}
            if not to_run and active:  # the spare runs the bad-run policy asks for, once the look's own runs are in
                ruled = [a for a in helpers[1:] + active if a not in out.invalid]
                chosen, to_run = _spares(plan, read, records, ruled, n, failed)
            if to_run:
                out.next_look, out.pending = index, to_run
                break
            if active:
                active = self._arms_look(plan, records, helpers, active, index, n, chosen, out)
            if out.contrast is not None and out.contrast.open:
                _contrast_look(plan, records, index, n, out.contrast)
        return True

    @staticmethod
    def _arms_look(plan: ComparisonPlan, records: dict[str, RunRecord], helpers: list[str], active: list[str],
                   index: int, n: int, chosen: dict[str, bad_runs.Assignment], out: Progress) -> list[str]:
        """Take look ``index`` for the arms still compared with the baseline; the arms undecided after it."""
        spec = plan.spec
        base, aa = spec.baseline, spec.aa_arm
        by_arm = _made(plan, records, helpers + active, n, chosen)
        for arm in list(helpers + active):
            if arm not in out.invalid and not (all(r.complete for r in by_arm[arm]) and _finding_free(by_arm[arm])):
                out.invalid[arm] = _why_invalid(by_arm[arm], n)
                _use(out, arm, n, by_arm, chosen, plan)
        if base in out.invalid:  # nothing can be decided against a baseline that did not run as asked
            for arm in active:
                out.invalid.setdefault(arm, f"the baseline {base!r} is invalid: {out.invalid[base]}")
            return []
        if against_the_mean(spec) and aa in out.invalid:
            for arm in active:  # half of the registered reference did not run as asked
                out.invalid.setdefault(arm, f"the reference's A/A arm {aa!r} is invalid: {out.invalid[aa]}")
            return []
        active = [a for a in active if a not in out.invalid]
        if not active:
            return []
        for a in [*helpers, *active]:
            if a not in out.invalid:
                _use(out, a, n, by_arm, chosen, plan)
        family = plan.design()  # the registered family (n_arms fixed at registration), whatever failed
        decided = decide(family, index, {a: out.diffs[a] for a in active}, decided=dict(out.decisions))
        out.looks.append(Look(index, n, list(active), {a: decided[a] for a in active}))
        for a in active:
            out.decisions[a] = decided[a]
        return [a for a in active if decided[a].verdict == UNDECIDED]

    def describe(self, plan: ComparisonPlan, state: Progress) -> str:
        index = int(state.next_look or 0)
        arms = ", ".join(dict.fromkeys(p.arm for p in state.pending))
        return f"look {index + 1} of {len(plan.looks)} ({plan.looks[index]} replicates per arm; arms {arms})"

    def save(self, plan: ComparisonPlan, state: Progress) -> None:
        """Nothing: the report writes what the looks decided."""


def last_look_line(plan: ComparisonPlan, state: Progress) -> str | None:
    """What the last look taken decided, one clause per tested arm (its verdict, the numbers the rule compared,
    and whether it stops or continues) and one for the registered contrast, for the driver's log before the next
    look's runs; None before look 1."""
    c = state.contrast
    c_look = c.decision.look if c is not None and c.decision is not None else -1
    if state.next_look is None or (not state.looks and c_look < 0):
        return None
    index = max(c_look, state.looks[-1].index if state.looks else -1)
    parts = []
    look = state.looks[-1] if state.looks and state.looks[-1].index == index else None
    for arm in look.arms if look else ():
        d = look.decisions[arm]
        b = d.boundary
        parts.append(f"{arm} {d.verdict} (Δ {d.mean:+.4f}, p {d.p:.3g} vs {b.sup_p:.3g}, TOST p {d.p_tost:.3g} vs "
                     f"{b.eq_p:.3g}): {'continues' if d.verdict == UNDECIDED else 'stops'}")
    if look:
        parts += [f"{arm} {INVALID}: stops" for arm in plan.spec.tested
                  if arm in state.invalid and arm not in look.arms]
    if c is not None and c.decision is not None and c_look == index:
        parts.append(f"the contrast {c.arm} − {c.against} {c.verdict} (Δ {c.decision.mean:+.4f}): "
                     f"{'its arms continue' if c.open else 'decided'}")
    return (f"look {index + 1} of {len(plan.looks)} ({plan.looks[index]} replicates per arm) decided: "
            + "; ".join(parts))


def _contrast_look(plan: ComparisonPlan, records: dict[str, RunRecord], index: int, n: int,
                   state: ContrastState) -> None:
    """Decide the open contrast at look ``index`` from its two arms' first ``n`` replicates, paired; a run of
    either that failed or ran not as asked leaves it invalid."""
    recs = {a: [records[plan.run_of(a, k).name] for k in range(1, n + 1)] for a in state.arms}
    both = recs[state.arm] + recs[state.against]
    if not (all(r.complete for r in both) and _finding_free(both)):
        state.invalid = _why_invalid(both, n)
        return
    diffs = paired_differences(recs[state.arm], {r.replicate: r for r in recs[state.against]})
    if len(diffs) != n:
        state.invalid = f"at {n} replicates: {n - len(diffs)} pair(s) without a finite final bpb"
        return
    decide_look(plan.spec, state, index, diffs)


def _spares(plan: ComparisonPlan, read: ReadRecord, records: dict[str, RunRecord], arms: list[str], n: int,
            failed: set[str]) -> tuple[dict[str, bad_runs.Assignment], list[Run]]:
    """Each arm's replicates at this look under the bad-run policy, and the spare runs still to run (the baseline's
    once per arm); a failed spare run stops its arm's assignment."""
    spec = plan.spec
    base, ceiling, most = spec.baseline, spec.bad_run_ceiling, int(spec.bad_run_replacements)
    chosen: dict[str, bad_runs.Assignment] = {}
    to_run: dict[str, Run] = {}
    for arm in arms:
        def bad(k: int, arm: str = arm) -> bool | None:
            runs = [records.get(plan.run_of(a, k).name) for a in (arm, base)]
            if not all(r is not None and r.complete for r in runs):
                return None
            return any(bad_runs.is_bad(float(r.final["bpb"]), ceiling) for r in runs if r and r.final)

        while True:
            chosen[arm] = pick = bad_runs.assign(n, spec.max_replicates, most, bad)
            if pick.needs is None:
                break
            spare = [plan.run_of(a, pick.needs) for a in (arm, base)]
            for p in spare:
                records.setdefault(p.name, read(p))
            waiting = [p for p in spare if not records[p.name].complete]
            to_run.update({p.name: p for p in waiting if p.name not in failed})
            if waiting:
                break
    return chosen, list(to_run.values())


def _made(plan: ComparisonPlan, records: dict[str, RunRecord], arms: list[str], n: int,
          chosen: dict[str, bad_runs.Assignment]) -> dict[str, list[RunRecord]]:
    """The runs each arm made for this look: its first ``n`` replicates and its spares, in replicate order."""
    base = plan.spec.baseline
    out = {}
    for arm in arms:
        asked = [pick for a, pick in chosen.items() if arm in (a, base)]
        spares = {k for pick in asked for k in (*pick.spares, *([pick.needs] if pick.needs else []))}
        out[arm] = [records[plan.run_of(arm, k).name] for k in [*range(1, n + 1), *sorted(spares)]]
    return out


def _why_invalid(records: list[RunRecord], n: int) -> str:
    parts = []
    missing = [r for r in records if not r.complete]
    if missing:
        parts.append("incomplete runs: " + "; ".join(
            f"{r.run_dir.name}: {r.error or 'no final eval at step ' + str(r.steps)}" for r in missing))
    flagged = [r for r in records if r.findings]
    if flagged:
        count = sum(len(r.findings) for r in flagged)
        parts.append(f"failed the counter/log check ({count} finding(s) in "
                     f"{', '.join(r.run_dir.name for r in flagged)})")
    return f"at {n} replicates: " + "; ".join(parts)
