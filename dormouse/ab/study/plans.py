"""A registered study's plans, read by ``dormouse ab STUDY`` and by ``ab plan``, ``status`` and ``design`` (no torch):
its directory and registration, every point's comparison plan (a CLI override may not set the axis) and its card."""

from __future__ import annotations

from dataclasses import dataclass
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
    if not lines and study.study.data is not None:
        lines = _repeats(study, plans)
    if lines:
        raise ComparisonError(lines)
    return plans


@dataclass(frozen=True)
class LadderPoint:
    """One point of a width ladder as ``ab plan`` states it: its width, the shared parameters, and what a run of the
    baseline trains (bytes, training FLOPs) against the training split's bytes."""

    name: str
    width: int
    params: int
    bytes: int
    flops: float
    train_bytes: int

    @property
    def epochs(self) -> float:
        return self.bytes / self.train_bytes


def ladder_points(study: RegisteredStudy, plans: list[ComparisonPlan]) -> list[LadderPoint]:
    """Each point's size and budget, from the baseline's composed config (the budget already applied)."""
    from dormouse.data import read_corpus
    from dormouse.model.flops import step_tokens, training_cost
    from dormouse.model.shape import shared_params

    out = []
    for point, plan in zip(study.points(), plans):
        cfg = plan.arm_cfgs[plan.spec.baseline]
        m = cfg.model
        out.append(LadderPoint(point.name, int(m.d_model), shared_params(int(m.d_model), m.mlp_hidden, m.tie_head),
                               int(cfg.train.steps) * step_tokens(cfg), training_cost(cfg)["flops"],
                               len(read_corpus(cfg.data).train)))
    return out


def _repeats(study: RegisteredStudy, plans: list[ComparisonPlan]) -> list[str]:
    """A point whose runs would pass over the training split more often than the registered epochs allow."""
    rule = study.study.data
    assert rule is not None
    return [f"point {p.name}: a run trains {p.bytes:,} bytes, {p.epochs:.2f} passes over the {p.train_bytes:,} "
            f"training bytes, more than study.data.epochs={rule.epochs:g} allows: lower study.data.bytes_per_param, "
            "drop the point, bring a larger corpus (data.hf_dataset), or register more epochs"
            for p in ladder_points(study, plans) if p.epochs > float(rule.epochs) + 1e-9]


def ladder_lines(study: RegisteredStudy, plans: list[ComparisonPlan]) -> list[str]:
    """``ab plan``'s table of a width ladder (nothing for another study)."""
    if study.study.width is None and study.study.data is None:
        return []
    out = [f"{'point':<14} {'width':>6} {'params':>10} {'bytes/run':>12} {'FLOPs/run':>10} {'epochs':>7}"]
    for p in ladder_points(study, plans):
        out.append(f"{p.name:<14} {p.width:>6} {p.params:>10,} {p.bytes:>12,} {p.flops:>10.3g} {p.epochs:>7.2f}")
    return out


def card_of(study: RegisteredStudy) -> StudyCard:
    t = study.template
    return study_card(study.interaction_design(), study.point_design(), float(t.pilot_sd),
                      float(t.expected_effect), float(study.study.expected_change))
