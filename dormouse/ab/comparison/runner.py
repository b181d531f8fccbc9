"""``dormouse ab NAME [OVERRIDES...]``: run a registered comparison look by look, then report (docs/ab-protocol.md,
"Running a comparison"). Build the plan (every run composed and validated, the launcher built) and refuse anything
wrong before any run; take the comparison's lock; check the registration stamp and the code fingerprint; save the
design card; then for each stage (:func:`dormouse.ab.rule.looks.stages_of`: the tune stage, the looks) hand the launcher
the runs it needs, each through :func:`dormouse.ab.runs.job.train_run`, and replay; finally analyse and write the
outputs. The command around it is :mod:`dormouse.ab.comparison.command`."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from dormouse.ab.comparison import fingerprint
from dormouse.ab.comparison.binding import bind_registration, check_same_code, ensure_design_card, refuse_protocol_1
from dormouse.ab.comparison.plan import ComparisonPlan, arm_problem_lines, build_plan
from dormouse.ab.comparison.registry import ComparisonError, Registered
from dormouse.ab.comparison.status import verdict_table
from dormouse.ab.launchers.base import DONE, Job, Launcher, LaunchError, Outcome
from dormouse.ab.launchers.local import InProcessLauncher
from dormouse.ab.launchers.request import LaunchRequest, resolve_launch
from dormouse.ab.reporting.report import bad_run_lines, write_outputs
from dormouse.ab.reporting.results import ComparisonResults, analyze
from dormouse.ab.rule.looks import Progress, ReadRecord, last_look_line, progress, read_run, stages_of
from dormouse.ab.runs.board import RunBoard
from dormouse.ab.runs.job import (
    Run,
    RunTask,
    TrainFn,
    finish_complete_runs,
    read_launch_record,
    run_state,
    train_run,
)
from dormouse.ab.runs.records import RunRecord
from dormouse.config.schema import wandb_on
from dormouse.errors import Interrupted
from dormouse.run.files import AB_ROOT, LAUNCH
from dormouse.run.lock import comparison_lock


def machine_problems(plan: ComparisonPlan) -> list[str]:
    """What this machine cannot run of each arm (CUDA absent, a device not visible, a kernel the device cannot run),
    as ``dormouse train`` refuses it before step 0; a line each naming the arm, a shared one said once."""
    from dormouse.train.preflight import environment_problems  # torch: only a comparison about to train asks

    arm_lines: dict[str, list[str]] = {}
    for arm, cfg in plan.arm_cfgs.items():
        if machine := environment_problems(cfg):
            arm_lines[arm] = machine
    return arm_problem_lines(plan.reg, arm_lines)


def refuse_what_this_machine_cannot_run(plan: ComparisonPlan) -> None:
    """:func:`machine_problems` as one :class:`ComparisonError`, before any run."""
    if lines := machine_problems(plan):
        raise ComparisonError(lines)


def plan_runs(reg: Registered, overrides: list[str], comp_dir: Path) -> list[Run]:
    """Every confirmatory run of a registration composed and validated (protocol 1 too: `dormouse ab rerun`
    re-runs a published run) and runnable here, with a tune stage's lrs from ``comp_dir``'s ``tune.json`` or
    ``results.json``."""
    plan = build_plan(reg, overrides, Path(comp_dir).parent)
    refuse_what_this_machine_cannot_run(plan)
    if plan.tune_runs:
        from dormouse.ab.tune.stage import recorded_choice  # the tune wing loads only for a tuned comparison

        chosen = recorded_choice(Path(comp_dir))
        if chosen is not None:
            plan.choose_lrs(chosen)
    if plan.comp_dir != Path(comp_dir).resolve():  # a directory not named after the comparison
        for p in plan.runs:
            p.run_dir = Path(comp_dir).resolve() / p.name
            p.cfg.run.dir = str(Path(comp_dir).resolve())
    return plan.runs


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
    :class:`ComparisonError` or :class:`LockHeld` before any run; a failed run makes its arm ``invalid`` (still in
    the family); a signal raises :class:`dormouse.errors.Interrupted` once the running runs have checkpointed."""
    console = console or Console()
    plan = build_plan(name, overrides, root, registry)
    refuse_what_this_machine_cannot_run(plan)
    refuse_protocol_1(plan.reg)
    try:
        launcher = resolve_launch(launch or LaunchRequest(), plan.all_runs).launcher(plan.comp_dir, plan.name)
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    code = fingerprint.compute()
    with stop_on_term(lambda: say_interrupted(plan.reg.argument, console)), comparison_lock(plan.comp_dir) as lock:
        if lock.stale_message():
            console.print(f"[yellow]note:[/] {lock.stale_message()}")
        stamp = bind_registration(plan.comp_dir, plan.reg, plan.overrides, restart, console)
        check_same_code(plan, code)
        for line in finish_complete_runs(plan.all_runs, plan.comp_dir):  # a finished run is kept
            console.print(f"[yellow]note:[/] {line}")
        card = ensure_design_card(plan, console)
        state, read = _run_stages(plan, launcher, train_fn or _default_train_fn(), code.sha256, console)
        written = _report(plan, launcher, state, read, {k: v for k, v in stamp.items() if k != "registered"}, card)
        _log_verdict(plan, written)
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
    """Each run's record read from disk once: one replay of the looks, and the report it feeds, share them."""
    read: dict[str, RunRecord] = {}

    def record(p: Run) -> RunRecord:
        if p.name not in read:
            read[p.name] = read_run(p, errors.get(p.name))
        return read[p.name]

    return record


def _launch_record(plan: ComparisonPlan, launcher: Launcher, state: Progress) -> dict[str, Any]:
    """How this invocation launched, and how each run the analysis uses ran (from its attempt records)."""
    used = [p for p in plan.runs if state.ran(p)]
    return {"this_invocation": launcher.settings(),
            "pairs": {p.name: _run_launch(plan.comp_dir, p.name) for p in used}}


def _run_stages(plan: ComparisonPlan, launcher: Launcher, train_fn: TrainFn, code: str,
                console: Console) -> tuple[Progress, ReadRecord]:
    """For each stage in order (the tune stage, then the looks): run its pending runs, replay the stages from disk,
    let each save what it settled; until nothing is pending. Returns the last replay and its reader, which holds
    the records it read."""
    errors: dict[str, str] = {}  # this invocation's failed runs: name -> why
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
    """Run the pending runs of the stage replayed last (each job checks ``code`` against its own); failures go to
    ``errors``."""
    todo = state.pending
    adopted = launcher.adoptable([p.name for p in todo])  # a killed driver's jobs, still in the queue
    for run in todo:
        st, why = run_state(run)
        if run.name in adopted or st in ("resume", "restart"):
            console.print(f"[cyan]{run.name}[/]: {escape(adopted.get(run.name, why))}")
    workers = not isinstance(launcher, InProcessLauncher)
    tasks = [Job(p.name, train_run, (RunTask(p, plan.comp_dir, train_fn, launcher.name, output_to_file=workers,
                                             fingerprint=code),), _complete_on_disk(p)) for p in todo]
    settings = ", ".join(f"{k}={v}" for k, v in launcher.settings().items() if v is not None)
    decided = last_look_line(plan, state)
    if decided is not None:  # why the arms of the next look run on, and the others do not
        console.print(f"ab {plan.name}: {decided}", soft_wrap=True, highlight=False, markup=False)
    console.print(f"ab {plan.name}: {state.stage.describe(plan, state)}: {len(tasks)} runs to train ({settings})"
                  + (f"; workers' output in {plan.comp_dir / LAUNCH}" if workers else ""))
    with RunBoard(plan.name, todo, console) as board:
        outcomes = launcher.run(tasks, board.start, board.finish)
    errors.update(_failures(outcomes, {p.name: p for p in todo}, plan.comp_dir, console))
    if launcher.stopped_by is not None:
        say_interrupted(plan.reg.argument, console)
        raise Interrupted(launcher.stopped_by, "the comparison was interrupted")
    for run in todo:  # never loop on a run that came back done but is not complete on disk
        if run.name not in errors and run_state(run)[0] != "complete":
            errors[run.name] = "the launcher returned without the run's final eval"


def _complete_on_disk(run: Run) -> Callable[[], bool]:
    return lambda: run_state(run)[0] == "complete"


def _failures(outcomes: list[Outcome], runs: dict[str, Run], comp_dir: Path, console: Console) -> dict[str, str]:
    """The outcomes that fail their run: run -> why. A run whose final eval is on disk is complete whatever its
    job said after it (a job killed, or lost, past its final eval: :func:`run_state`'s rule), so it counts; the
    note says so and its log gets the done line it may lack."""
    failed = {}
    for o in outcomes:
        if o.status == DONE:
            continue
        run = runs.get(o.key)
        if run is not None and run_state(run)[0] == "complete":
            console.print(f"[yellow]note:[/] {escape(o.key)}: {o.status} ({escape(o.note)}), but its final eval is "
                          "on disk: complete, counted", soft_wrap=True, highlight=False)
            for line in finish_complete_runs([run], comp_dir):
                console.print(f"[yellow]note:[/] {escape(line)}", soft_wrap=True, highlight=False)
            continue
        failed[o.key] = o.note
    return failed


def say_interrupted(argument: str, console: Console) -> None:
    """The driver's last line when a signal stopped it: how to continue."""
    console.print(f"[yellow]interrupted[/]: rerun `dormouse ab {escape(argument)}` with the same overrides to "
                  "continue (finished runs are kept, interrupted ones resume from their checkpoints)")


@contextmanager
def stop_on_term(say: Callable[[], None]) -> Iterator[None]:
    """A SIGTERM that reaches the driver between runs stops it as Ctrl-C does: the ``with`` blocks inside unwind
    (the comparison's lock released), ``say`` tells how to continue, and :class:`Interrupted` exits 143. During a
    run the training loop's or the ``--jobs`` launcher's own handler stands in for this one."""
    got: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()  # only the main thread may install a handler
    previous = signal.signal(signal.SIGTERM, handler) if main else None
    try:
        yield
    except KeyboardInterrupt:
        if not got:
            raise
        say()
        raise Interrupted(128 + got[0], "the comparison was interrupted by SIGTERM") from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _run_launch(comp_dir: Path, run: str) -> dict[str, Any]:
    """How a run ran, from its attempt records: the thread counts, launchers and hosts of its attempts."""
    attempts = read_launch_record(comp_dir, run).get("attempts", [])
    return {"attempts": len(attempts),
            "threads": sorted({a["threads"] for a in attempts if a.get("threads") is not None}),
            "launchers": sorted({a["launcher"] for a in attempts if a.get("launcher")}),
            "hosts": sorted({a["host"] for a in attempts if a.get("host")}),
            "cuda_visible_devices": sorted({str(a["cuda_visible_devices"]) for a in attempts
                                            if a.get("cuda_visible_devices") is not None})}


def _log_verdict(plan: ComparisonPlan, written: ComparisonResults) -> None:
    """With wandb on for the runs, the verdict goes to their group as one summary run."""
    logging = plan.arm_cfgs[plan.reg.spec.baseline].logging
    if wandb_on(logging):
        from dormouse.ab.reporting.wandb_summary import log_verdict  # wandb's summary: only when wandb is on

        log_verdict(logging, plan.comp_dir, written)


def _default_train_fn() -> TrainFn:
    from dormouse.train.loop import train  # torch and the model: loaded only when a run is trained here

    return train
