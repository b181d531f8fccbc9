"""``dormouse ab``'s questions, one function per verb, each returning the command's exit code.

:func:`ab_run` runs a comparison (:func:`dormouse.ab.comparison.runner.run_comparison`) or a registered study
(:func:`dormouse.ab.study.runner.run_study`); :func:`ab_plan` (what a run would do), :func:`ab_status` (where it
stands) and :func:`ab_design` (the registered design's card, saved with it) only read
(:mod:`dormouse.ab.comparison.questions`; a study's, :mod:`dormouse.ab.study.questions`). Refusals raise their
:class:`dormouse.errors.DormouseError`; the CLI's one handler (dormouse/cli/exits.py) says them and exits
with their code (2 refused before any run, 130/143 interrupted).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from dormouse.ab.comparison.registry import is_study
from dormouse.ab.launchers.request import LaunchRequest
from dormouse.ab.runs.job import TrainFn
from dormouse.run.files import AB_ROOT

if TYPE_CHECKING:  # the annotation only: a plain comparison loads nothing of the study
    from dormouse.ab.study.registry import RegisteredStudy

__all__ = ["ab_design", "ab_plan", "ab_run", "ab_status", "stdout_console"]


def stdout_console() -> Console:
    """The verbs' stdout: in a file or a pipe rich assumes 80 columns and would wrap every table cell."""
    return Console(width=None if sys.stdout.isatty() else 200)


def _registered_study(name: str, registry: Path | None) -> RegisteredStudy | None:
    """The registered study ``name`` names, loaded (the study's modules load only then); None for a comparison."""
    if not is_study(name, registry):
        return None
    from dormouse.ab.study.registry import load_study

    return load_study(name, registry)


def ab_run(name: str, overrides: list[str], *, restart: bool = False, root: Path = AB_ROOT,
           console: Console | None = None, train_fn: TrainFn | None = None, registry: Path | None = None,
           launch: LaunchRequest | None = None) -> int:
    """Run (or continue) ``name`` to its verdicts. 0 = every run the schedule needed finished (whatever the
    verdicts); 1 = some run failed (the report says which; rerun to retry); from the results just computed."""
    console = console or stdout_console()
    if (study := _registered_study(name, registry)) is not None:  # every point, then the study's answer
        from dormouse.ab.study.runner import run_study

        written = run_study(study, overrides, restart=restart, root=root, console=console, train_fn=train_fn,
                            launch=launch)
        return 0 if written["complete"] else 1
    from dormouse.ab.comparison.runner import run_comparison

    results = run_comparison(name, overrides, restart=restart, root=root, console=console, train_fn=train_fn,
                             registry=registry, launch=launch)
    return 0 if results.complete else 1


def ab_plan(name: str, overrides: list[str], *, root: Path = AB_ROOT, console: Console | None = None,
            registry: Path | None = None, launch: LaunchRequest | None = None) -> int:
    """What a run would do: the runs, their overrides, what is done, the launch settings and the cost (exit 0)."""
    console, launch = console or stdout_console(), launch or LaunchRequest()
    if (study := _registered_study(name, registry)) is not None:
        from dormouse.ab.study.questions import study_plan

        study_plan(study, overrides, root=root, launch=launch, console=console)
    else:  # the read-only questions load only for the verbs that ask them, not for a run
        from dormouse.ab.comparison.questions import plan_command

        plan_command(name, overrides, root=root, registry=registry, launch=launch, console=console)
    return 0


def ab_status(name: str, *, root: Path = AB_ROOT, console: Console | None = None,
              registry: Path | None = None) -> int:
    """Where ``name`` stands (read-only, safe while it runs): exit 0; 2 if it never started."""
    console = console or stdout_console()
    if (study := _registered_study(name, registry)) is not None:
        from dormouse.ab.study.questions import study_status

        return study_status(study, root=root, console=console)
    from dormouse.ab.comparison.questions import status_command

    return status_command(name, root=root, registry=registry, console=console)


def ab_design(name: str, overrides: list[str], *, root: Path = AB_ROOT, console: Console | None = None,
              registry: Path | None = None) -> int:
    """The registered design's card (type-I error, power, expected replicates), printed and saved (exit 0)."""
    console = console or stdout_console()
    if (study := _registered_study(name, registry)) is not None:
        from dormouse.ab.study.questions import study_design

        study_design(study, overrides, root=root, console=console)
    else:
        from dormouse.ab.comparison.questions import design_command

        design_command(name, overrides, root=root, registry=registry, console=console)
    return 0
