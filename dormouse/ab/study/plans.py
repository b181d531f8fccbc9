"""A registered study's plans, read by ``dormouse ab STUDY`` and by ``ab plan``, ``status`` and ``design`` (no torch):
its directory and registration, every point's comparison plan (a CLI override may not set the axis) and its card."""

from __future__ import annotations

from pathlib import Path

from dormouse.ab.comparison.plan import ComparisonPlan, build_plan
from dormouse.ab.comparison.registry import ComparisonError, Registered, override_key
from dormouse.ab.study.interaction import StudyCard, study_card
from dormouse.ab.study.registry import RegisteredStudy


def study_registration(study: RegisteredStudy) -> Registered:
    """The study file as a registration, for the study directory's stamp (the file's exact bytes)."""
    return Registered(spec=study.template, text=study.text, source=study.source, given=study.given)


def study_dir(study: RegisteredStudy, root: Path) -> Path:
    return (Path(root) / study.name).resolve()


def check_study_overrides(study: RegisteredStudy, overrides: list[str]) -> None:
    """A CLI override may not set the study's axis: it would make every point the same point."""
    bad = [o for o in overrides if override_key(o) == study.axis]
    if bad:
        raise ComparisonError([f"override {o!r} sets {study.axis}, the axis of study {study.name}: each point "
                               "sets it (study.points)" for o in bad])


def build_point_plans(study: RegisteredStudy, overrides: list[str], root: Path) -> list[ComparisonPlan]:
    """Every point's plan, composed and checked; all problems of all points at once, before any run."""
    check_study_overrides(study, overrides)
    plans, lines = [], []
    for point in study.points():
        try:
            plans.append(build_plan(point.reg, overrides, study_dir(study, root)))
        except ComparisonError as exc:
            lines += [f"point {point.name}: {line}" for line in exc.lines]
    if lines:
        raise ComparisonError(lines)
    return plans


def card_of(study: RegisteredStudy) -> StudyCard:
    t = study.template
    return study_card(study.interaction_design(), study.point_design(), float(t.pilot_sd),
                      float(t.expected_effect), float(study.study.expected_change))
