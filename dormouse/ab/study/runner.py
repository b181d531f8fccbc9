"""``dormouse ab STUDY``: run a registered study point by point with the comparison machinery, then report
(docs/ab-protocol.md, "A registered study"). Every point's plan (:mod:`dormouse.ab.study.plans`) is built and this
machine checked for each before any run; the study directory is locked and bound to the study file's bytes and
overrides; the study card is saved; each point runs :func:`~dormouse.ab.comparison.runner.run_comparison` in
``<root>/<study>/<point>/`` (a failed point is reported and the next runs); then :mod:`dormouse.ab.study.report`.
The study adds no engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from dormouse.ab.comparison.binding import bind_registration, busy_runs, ensure_card, refuse_busy
from dormouse.ab.comparison.registry import ComparisonError
from dormouse.ab.comparison.runner import machine_problems, run_comparison, say_interrupted, stop_on_term
from dormouse.ab.launchers.request import LaunchRequest
from dormouse.ab.runs.job import TrainFn
from dormouse.ab.study.plans import build_point_plans, card_of, study_dir, study_registration
from dormouse.ab.study.registry import RegisteredStudy
from dormouse.run.files import AB_ROOT, StudyFiles
from dormouse.run.lock import comparison_lock


def run_study(study: RegisteredStudy, overrides: list[str], *, restart: bool = False, root: Path = AB_ROOT,
              console: Console | None = None, train_fn: TrainFn | None = None,
              launch: LaunchRequest | None = None) -> dict[str, Any]:
    """Run (or continue) a study point by point and report; returns its results as written (``complete``: every
    point's schedule finished). Refusals come before any run."""
    from dormouse.ab.study.report import write_study_outputs  # matplotlib: only when a report is written

    console = console or Console()
    plans = build_point_plans(study, overrides, root)
    if lines := [f"point {point.name}: {line}" for point, plan in zip(study.points(), plans)
                 for line in machine_problems(plan)]:
        raise ComparisonError(lines)
    sdir = study_dir(study, root)
    with stop_on_term(lambda: say_interrupted(study.argument, console)), comparison_lock(sdir) as lock:
        if lock.stale_message():
            console.print(f"[yellow]note:[/] {lock.stale_message()}")
        if restart and sdir.exists():  # no point's run is deleted while another process trains it
            refuse_busy([f"{plan.name}/{run}" for plan in plans for run in busy_runs(plan.comp_dir)], study.argument)
        reg = study_registration(study)
        stamp = bind_registration(sdir, reg, overrides, restart, console)
        card = ensure_card(sdir, reg, overrides, lambda: card_of(study), console, f"ab {study.name}: simulating "
                           "the study card (every point's looks, then the interaction rule)")
        for point in study.points():
            console.print(f"[bold]study {study.name}: point {point.index + 1} of {len(plans)}, {point.name} "
                          f"({study.axis}={point.value})[/]")
            run_comparison(point.reg, overrides, root=sdir, console=console, train_fn=train_fn, launch=launch)
        results = write_study_outputs(study, sdir, {k: v for k, v in stamp.items() if k != "registered"}, card)
    for line in results["summary"]:
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    console.print(f"study report: {StudyFiles(sdir).report}")
    return results

