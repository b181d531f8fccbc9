"""``dormouse ab NAME [OVERRIDES...]`` as a command: one question per invocation, and its exit code.

A run (:func:`dormouse.ab.runner.run_comparison`; a registered study's, :func:`dormouse.ab.study_runner.run_study`),
or one of the read-only questions (:mod:`dormouse.ab.questions`; a study's, :mod:`dormouse.ab.study_command`):
``--plan`` (what a run would do), ``--status`` (where a comparison stands) and ``--design`` (the registered
design's card, saved with the comparison). Every refusal is printed as ``error:`` lines and exits 2, before any run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from dormouse.ab.launch import LaunchError
from dormouse.ab.launch_request import LaunchRequest
from dormouse.ab.lock import LockHeld
from dormouse.ab.pairjob import TrainFn
from dormouse.ab.questions import design_command, plan_command, status_command
from dormouse.ab.registry import ComparisonError
from dormouse.ab.runner import run_comparison
from dormouse.ab.study import is_study, load_study
from dormouse.ab.study_command import study_answer
from dormouse.config.schema import ConfigError
from dormouse.errors import Interrupted, print_error
from dormouse.run.files import AB_ROOT, ComparisonFiles

__all__ = ["ab_command", "design_command", "plan_command", "status_command"]


def _answer(name: str, overrides: list[str], *, restart: bool, root: Path, console: Console,
            train_fn: TrainFn | None, registry: Path | None, launch: LaunchRequest, plan: bool, status: bool,
            design: bool) -> int:
    """The one question asked, answered: its exit code (refusals raise; see :func:`ab_command`)."""
    if sum((plan, status, design)) > 1:
        raise ComparisonError(["--plan, --status and --design are different questions: ask one at a time"])
    if is_study(name, registry):  # a registered study: the same questions, asked of every point
        return study_answer(load_study(name, registry), overrides, restart=restart, root=root, console=console,
                            train_fn=train_fn, launch=launch, plan=plan, status=status, design=design)
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
