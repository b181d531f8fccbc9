"""A registered study's read-only questions: the comparison's (ab/comparison/questions.py) asked of every point,
and the study's own answer above them.

- ``dormouse ab plan STUDY``: each point's plan and tune stage, then the study's totals; writes nothing;
- ``dormouse ab design STUDY``: the study card (the whole study simulated), then the points' comparison card (the
  same design at every point: α/P, the registered looks), saved with the study and each point;
- ``dormouse ab status STUDY``: each point's status (a point not started says so), then the study's verdicts so
  far (read only).
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from dormouse.ab.comparison.binding import design_card_for, read_stamp, save_card, save_design_card, started_elsewhere
from dormouse.ab.comparison.questions import plan_command, started_stamp, status_command
from dormouse.ab.comparison.status import tune_most_runs
from dormouse.ab.launchers.request import LaunchRequest
from dormouse.ab.study.plans import build_point_plans, card_of, ladder_lines, study_dir, study_registration
from dormouse.ab.study.registry import RegisteredStudy
from dormouse.run.files import StudyFiles


def _say(console: Console, line: str) -> None:
    console.print(line, soft_wrap=True, highlight=False, markup=False)


def study_plan(study: RegisteredStudy, overrides: list[str], *, root: Path, launch: LaunchRequest,
               console: Console) -> None:
    """Every point's plan (each composed and checked), then what the whole study may cost."""
    plans = build_point_plans(study, overrides, root)
    sdir = study_dir(study, root)
    _say(console, f"plan: study {study.name} -> {sdir}: {len(plans)} points of {study.axis} "
         f"({', '.join(map(str, study.values))}), one registered comparison each, run in that order")
    for line in ladder_lines(study, plans):  # a width ladder: each point's size and what a baseline run trains
        _say(console, line)
    most = 0
    for point, plan in zip(study.points(), plans):
        _say(console, "")
        _say(console, f"== point {point.index + 1} of {len(plans)}: {point.name} ({study.axis}={point.value}) ==")
        plan_command(point.reg, overrides, root=sdir, registry=None, launch=launch, console=console)
        most += tune_most_runs(plan) + len(plan.runs)
    _say(console, "")
    _say(console, f"study {study.name}: at most {most} runs over its {len(plans)} points (every tune budget spent, "
         "every confirmatory replicate run); fewer when arms decide early")
    _say(console, f"study {study.name}: the interaction is decided once every point is complete "
         f"(`dormouse ab design {study.argument}` shows its simulated error rates)")


def study_design(study: RegisteredStudy, overrides: list[str], *, root: Path, console: Console) -> None:
    """The study card, then the points' comparison card; each saved unless its directory holds runs of another
    registration."""
    plans = build_point_plans(study, overrides, root)
    card = card_of(study)
    _say(console, card.to_text())
    sdir = study_dir(study, root)
    if started_elsewhere(sdir, study_registration(study), overrides):
        console.print(f"not saved: {sdir} holds a study started under another registration")
        return
    save_card(sdir, study_registration(study), overrides, card)
    console.print(f"saved: {StudyFiles(sdir).design} (the study report shows it)")
    point_card = design_card_for(plans[0])  # the same design at every point (α/P, looks, pilot sd)
    _say(console, "")
    _say(console, f"Each point's comparison card (the same at {', '.join(p.name for p in plans)}):")
    _say(console, point_card.to_text())
    for plan in plans:
        if not started_elsewhere(plan.comp_dir, plan.reg, plan.overrides):
            save_design_card(plan, point_card)


def study_status(study: RegisteredStudy, *, root: Path, console: Console) -> int:
    """Each point's status, then the study's verdicts so far. Exit 0; 2 if the study never started."""
    from dormouse.ab.study.report import analyze_study, summary_lines

    sdir = study_dir(study, root)
    stamp = started_stamp(sdir, study_registration(study), console, "study")
    if stamp is None:
        return 2
    for point in study.points():
        _say(console, "")
        _say(console, f"== point {point.index + 1}: {point.name} ({study.axis}={point.value}) ==")
        if read_stamp(sdir / point.name) is None:
            _say(console, f"{point.name}: not started")
            continue
        status_command(point.reg, root=sdir, registry=None, console=console)
    _say(console, "")
    card = json.loads(StudyFiles(sdir).design.read_text()) if StudyFiles(sdir).design.is_file() else None
    for line in summary_lines(analyze_study(study, sdir, stamp, card)):
        _say(console, f"study {study.name}: {line}")
    return 0
