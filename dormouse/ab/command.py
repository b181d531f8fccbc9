"""``dormouse ab NAME [OVERRIDES...]`` as a command: one question per invocation, and its exit code.

A run (:func:`dormouse.ab.runner.run_comparison`), or one of the read-only questions: ``--plan`` (what a
run would do), ``--status`` (where a comparison stands) and ``--design`` (the registered design's card,
saved with the comparison). Every refusal is printed as ``error:`` lines and exits 2, before any run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from dormouse.ab import tune
from dormouse.ab.card import design_card_for, save_design_card
from dormouse.ab.launch import LaunchError
from dormouse.ab.launch_request import LaunchRequest, resolve_launch
from dormouse.ab.lock import LockHeld
from dormouse.ab.looks import progress, read_pair
from dormouse.ab.pairjob import TrainFn
from dormouse.ab.plan import build_plan
from dormouse.ab.registration import read_stamp, refuse_protocol_1, registration_hash, registration_state
from dormouse.ab.registry import PROTOCOL, ComparisonError, load_spec
from dormouse.ab.runner import run_comparison
from dormouse.ab.status import comparison_status, render_looks, render_plan, render_status, tune_cost_line
from dormouse.config.schema import ConfigError
from dormouse.errors import Interrupted, print_error
from dormouse.run.files import AB_ROOT, ComparisonFiles


def _say(console: Console, line: str) -> None:
    console.print(line, soft_wrap=True, highlight=False, markup=False)


def plan_command(name: str, overrides: list[str], *, root: Path, registry: Path | None, launch: LaunchRequest,
                 console: Console) -> None:
    """``--plan``: compose and check everything a run would, print the plan and its looks, write nothing."""
    plan = build_plan(name, overrides, root, registry)
    try:
        settings = resolve_launch(launch, plan.pairs).settings()
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    render_plan(plan, launch=settings, registration=registration_state(plan.comp_dir, plan.reg, plan.overrides),
                console=console)
    if plan.tune_pairs:
        outcome = tune.settle(plan, read_pair, set())
        _say(console, tune_cost_line(plan))
        for line in tune.plan_lines(plan, outcome):
            _say(console, line)


def design_command(name: str, overrides: list[str], *, root: Path, registry: Path | None,
                   console: Console) -> None:
    """``--design``: simulate the registered design, print its card and save it with the comparison (unless
    the comparison directory holds another registration's runs). Trains nothing."""
    plan = build_plan(name, overrides, root, registry)
    refuse_protocol_1(plan.reg)
    card = design_card_for(plan)
    _say(console, card.to_text())
    if plan.tune_pairs:
        _say(console, tune_cost_line(plan))
    stamp = read_stamp(plan.comp_dir)
    if stamp is not None and stamp.get("hash") != registration_hash(plan.reg, plan.overrides):
        console.print(f"not saved: {plan.comp_dir} holds a comparison started under another registration")
        return
    save_design_card(plan, card)
    console.print(f"saved: {plan.files.design} (the report shows it)")


def status_command(name: str, *, root: Path, registry: Path | None, console: Console) -> int:
    """``--status``: where a comparison stands, pair by pair and look by look (read-only; safe while it
    runs). Exit 0; 2 if never started."""
    reg = load_spec(name, registry)
    comp_dir = (Path(root) / reg.spec.name).resolve()
    stamp = read_stamp(comp_dir)
    if stamp is None:
        console.print(f"ab {reg.spec.name}: not started ({ComparisonFiles(comp_dir).registration} does not exist); "
                      f"`dormouse ab {reg.argument} --plan` shows what it would run")
        return 2
    if stamp.get("sha256") != reg.sha256:
        console.print(f"[yellow]note:[/] {reg.source} changed since the comparison started; the runs below "
                      "follow the file as it is now")
    plan = build_plan(reg, list(stamp.get("overrides", [])), root)
    status = comparison_status(plan)
    render_status(plan, status, console)
    if plan.reg.protocol == PROTOCOL:
        failed = {r["pair"] for r in status["pairs"] if r["state"] == "failed"}
        state = progress(plan, read_pair, failed=failed)
        for line in tune.plan_lines(plan, state.tune):
            _say(console, line)
        render_looks(plan, state, console)
    return 0


def _answer(name: str, overrides: list[str], *, restart: bool, root: Path, console: Console,
            train_fn: TrainFn | None, registry: Path | None, launch: LaunchRequest, plan: bool, status: bool,
            design: bool) -> int:
    """The one question asked, answered: its exit code (refusals raise; see :func:`ab_command`)."""
    if sum((plan, status, design)) > 1:
        raise ComparisonError(["--plan, --status and --design are different questions: ask one at a time"])
    if design:
        design_command(name, overrides, root=root, registry=registry, console=console)
        return 0
    if status:
        return status_command(name, root=root, registry=registry, console=console)
    if plan:
        plan_command(name, overrides, root=root, registry=registry, launch=launch, console=console)
        return 0
    comp_dir = run_comparison(name, overrides, restart=restart, root=root, console=console,
                              train_fn=train_fn, registry=registry, launch=launch)
    results = json.loads(ComparisonFiles(comp_dir).results.read_text())
    return 0 if results["complete"] else 1


def ab_command(
    name: str,
    overrides: list[str],
    *,
    restart: bool = False,
    root: Path = AB_ROOT,
    console: Console | None = None,
    err_console: Console | None = None,
    train_fn: TrainFn | None = None,
    registry: Path | None = None,
    launch: LaunchRequest | None = None,
    plan: bool = False,
    status: bool = False,
    design: bool = False,
) -> int:
    """The whole CLI command: returns the exit code. 0 = every pair the schedule needed finished (whatever
    the verdicts); 1 = some pair failed (the report says which; rerun to retry); 2 = refused before any run
    (a bad request, runs computed by other code, or another live process holds the comparison); 130/143 =
    interrupted (Ctrl-C / SIGTERM; rerun to resume). ``plan`` and ``status`` only read (exit 0; ``status``
    exits 2 if never started); ``design`` prints the design card and saves it (exit 0)."""
    # In a file or a pipe rich assumes 80 columns and would wrap every table cell: give it room.
    console = console or Console(width=None if sys.stdout.isatty() else 200)
    err = err_console or Console(stderr=True, highlight=False)
    try:
        return _answer(name, overrides, restart=restart, root=root, console=console, train_fn=train_fn,
                       registry=registry, launch=launch or LaunchRequest(), plan=plan, status=status,
                       design=design)
    except (ComparisonError, ConfigError, LaunchError) as exc:
        for line in exc.lines:
            print_error(err, line)
        return 2
    except LockHeld as exc:
        print_error(err, str(exc))
        return 2
    except Interrupted as exc:
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
