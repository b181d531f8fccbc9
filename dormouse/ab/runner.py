"""``dormouse ab NAME [OVERRIDES...]``: run a registered comparison look by look, then report (docs/ab-protocol.md,
"Running a comparison"). Build the plan (every pair composed and validated, the launcher built) and refuse anything
wrong before any run; take the comparison's lock; check the registration stamp and the code fingerprint; save the
design card; then for each stage (:func:`dormouse.ab.looks.stages_of`: the tune stage, the looks) hand the launcher
the pairs it needs, each through :func:`dormouse.ab.pairjob.run_pair`, and replay; finally analyse and write the
outputs. The command around it is :mod:`dormouse.ab.command`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from dormouse.ab import fingerprint, tune
from dormouse.ab.launch import DONE, InProcessLauncher, Job, Launcher, LaunchError
from dormouse.ab.launch_request import LaunchRequest, resolve_launch
from dormouse.ab.live import PairBoard
from dormouse.ab.looks import Progress, ReadRecord, progress, read_pair, stages_of
from dormouse.ab.pairjob import (
    Pair,
    PairTask,
    TrainFn,
    finish_complete_runs,
    pair_state,
    read_launch_record,
    run_pair,
)
from dormouse.ab.plan import ComparisonPlan, build_plan
from dormouse.ab.records import RunRecord
from dormouse.ab.registration import bind_registration, check_same_code, ensure_design_card, refuse_protocol_1
from dormouse.ab.registry import ComparisonError, Registered
from dormouse.ab.report import bad_run_lines, write_outputs
from dormouse.ab.results import ComparisonResults, analyze
from dormouse.ab.status import verdict_table
from dormouse.ab.wandb_summary import log_verdict
from dormouse.errors import Interrupted
from dormouse.run.files import AB_ROOT, LAUNCH
from dormouse.run.lock import comparison_lock


def plan_pairs(reg: Registered, overrides: list[str], comp_dir: Path) -> list[Pair]:
    """Every confirmatory pair of a registration composed and validated (protocol 1 too: `dormouse ab rerun`
    re-runs a published pair), with a tune stage's lrs from ``comp_dir``'s ``tune.json`` or ``results.json``."""
    plan = build_plan(reg, overrides, Path(comp_dir).parent)
    chosen = tune.recorded_choice(Path(comp_dir))
    if plan.tune_pairs and chosen is not None:
        plan.choose_lrs(chosen)
    if plan.comp_dir != Path(comp_dir).resolve():  # a directory not named after the comparison
        for p in plan.pairs:
            p.run_dir = Path(comp_dir).resolve() / p.name
            p.cfg.run.dir = str(Path(comp_dir).resolve())
    return plan.pairs


def run_comparison(
    name: str | Registered,
    overrides: list[str],
    *,
    restart: bool = False,
    root: Path = AB_ROOT,
    console: Console | None = None,
    train_fn: TrainFn | None = None,
    registry: Path | None = None,
    launch: LaunchRequest | None = None,
) -> ComparisonResults:
    """Run (or continue) comparison ``name`` look by look, write its results and return them as written
    (``complete``: every run the schedule needed finished; ``plan.comp_dir``: where). ``overrides``
    apply after the registered ones and are part of the registration hash; ``train_fn`` defaults to
    :func:`dormouse.train.loop.train` (a non-importable one needs the in-process launcher). Raises
    :class:`ComparisonError` or :class:`LockHeld` before any run; a failed pair makes its arm ``invalid`` (still in
    the family); a signal raises :class:`dormouse.errors.Interrupted` once the running pairs have checkpointed."""
    console = console or Console()
    plan = build_plan(name, overrides, root, registry)
    refuse_protocol_1(plan.reg)
    try:
        launcher = resolve_launch(launch or LaunchRequest(), plan.all_pairs).launcher(plan.comp_dir, plan.name)
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    code = fingerprint.compute()
    with comparison_lock(plan.comp_dir) as lock:
        if lock.stale_message():
            console.print(f"[yellow]note:[/] {lock.stale_message()}")
        stamp = bind_registration(plan.comp_dir, plan.reg, plan.overrides, restart, console)
        check_same_code(plan, code)
        for line in finish_complete_runs(plan.all_pairs, plan.comp_dir):  # a finished run is kept
            console.print(f"[yellow]note:[/] {line}")
        card = ensure_design_card(plan, console)
        state, read = _run_stages(plan, launcher, train_fn or _default_train_fn(), code.sha256, console)
        written = _report(plan, launcher, state, read, {k: v for k, v in stamp.items() if k != "registered"}, card)
        log_verdict(plan.arm_cfgs[plan.reg.spec.baseline].logging, plan.comp_dir, written)  # wandb on: its summary run
    console.print(verdict_table(written))
    for line in bad_run_lines(written):  # the registered bad-run policy's finding, beside the verdicts
        console.print(line, soft_wrap=True, highlight=False)
    console.print(f"report: {plan.files.report}")
    return written


def _report(plan: ComparisonPlan, launcher: Launcher, state: Progress, read: ReadRecord, stamp: dict[str, Any],
            card: dict[str, Any]) -> ComparisonResults:
    """Analyse the last replay of the looks, with the records it read, and write the outputs; returns the results
    as written."""
    results, records = analyze(plan, state, read, registration=stamp, design_card=card,
                               launch=_launch_record(plan, launcher, state))
    return write_outputs(plan.comp_dir, results, records)[0]


def _reader(errors: dict[str, str]) -> ReadRecord:
    """Each pair's record read from disk once: one replay of the looks, and the report it feeds, share them."""
    read: dict[str, RunRecord] = {}

    def record(p: Pair) -> RunRecord:
        if p.name not in read:
            read[p.name] = read_pair(p, errors.get(p.name))
        return read[p.name]

    return record


def _launch_record(plan: ComparisonPlan, launcher: Launcher, state: Progress) -> dict[str, Any]:
    """How this invocation launched, and how each pair the analysis uses ran (from its attempt records)."""
    used = [p for p in plan.pairs if state.ran(p)]
    return {"this_invocation": launcher.settings(),
            "pairs": {p.name: _pair_launch(plan.comp_dir, p.name) for p in used}}


def _run_stages(plan: ComparisonPlan, launcher: Launcher, train_fn: TrainFn, code: str,
                console: Console) -> tuple[Progress, ReadRecord]:
    """For each stage in order (the tune stage, then the looks): run its pending runs, replay the stages from disk,
    let each save what it settled; until nothing is pending. Returns the last replay and its reader, which holds
    the records it read."""
    errors: dict[str, str] = {}  # this invocation's failed pairs: name -> why
    while True:
        read = _reader(errors)
        state = progress(plan, read, failed=set(errors))
        for stage in stages_of(plan):  # what a stage settled, before a later stage's runs (the tune choice)
            stage.save(plan, state)
        if state.finished:
            return state, read
        _run_batch(plan, launcher, train_fn, code, state, errors, console)


def _run_batch(plan: ComparisonPlan, launcher: Launcher, train_fn: TrainFn, code: str,
               state: Progress, errors: dict[str, str], console: Console) -> None:
    """Run the pending pairs of the stage replayed last (each job checks ``code`` against its own); failures go to
    ``errors``."""
    todo = state.pending
    for pair in todo:
        st, why = pair_state(pair)
        if st in ("resume", "restart"):
            console.print(f"[cyan]{pair.name}[/]: {why}")
    workers = not isinstance(launcher, InProcessLauncher)
    tasks = [Job(p.name, run_pair, (PairTask(p, plan.comp_dir, train_fn, launcher.name, output_to_file=workers,
                                             fingerprint=code),)) for p in todo]
    settings = ", ".join(f"{k}={v}" for k, v in launcher.settings().items() if v is not None)
    console.print(f"ab {plan.name}: {state.stage.describe(plan, state)}: {len(tasks)} runs to train ({settings})"
                  + (f"; workers' output in {plan.comp_dir / LAUNCH}" if workers else ""))
    with PairBoard(plan.name, todo, console) as board:
        outcomes = launcher.run(tasks, board.start, board.finish)
    errors.update({o.key: o.note for o in outcomes if o.status != DONE})
    if launcher.stopped_by is not None:
        console.print(f"[yellow]interrupted[/]: rerun `dormouse ab {escape(plan.reg.argument)}` with the same "
                      "overrides to continue (finished runs are kept, interrupted ones resume from their checkpoints)")
        raise Interrupted(launcher.stopped_by, "the comparison was interrupted")
    for pair in todo:  # never loop on a pair that came back done but is not complete on disk
        if pair.name not in errors and pair_state(pair)[0] != "complete":
            errors[pair.name] = "the launcher returned without the run's final eval"


def _pair_launch(comp_dir: Path, pair: str) -> dict[str, Any]:
    """How a pair ran, from its attempt records: the thread counts, launchers and hosts of its attempts."""
    attempts = read_launch_record(comp_dir, pair).get("attempts", [])
    return {"attempts": len(attempts),
            "threads": sorted({a["threads"] for a in attempts if a.get("threads") is not None}),
            "launchers": sorted({a["launcher"] for a in attempts if a.get("launcher")}),
            "hosts": sorted({a["host"] for a in attempts if a.get("host")}),
            "cuda_visible_devices": sorted({str(a["cuda_visible_devices"]) for a in attempts
                                            if a.get("cuda_visible_devices") is not None})}


def _default_train_fn() -> TrainFn:
    from dormouse.train.loop import train  # torch and the model: loaded only when a pair is trained here

    return train
