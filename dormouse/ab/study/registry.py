"""A registered study: a protocol-2 registration plus a ``study:`` block (docs/ab-protocol.md, "A registered
study"), holding a comparison at each value of one config axis and one primary question across them. Point i is the
file's comparison named ``<axis leaf>-<value>``, at α/P, with ``axis=value`` in ``fixed`` and every seed base + i ×
stride; its registration text carries the study file's sha256, so editing the study changes every point's stamp.
Points run with the comparison machinery unchanged in ``<root>/<study>/<point>/``."""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dormouse.ab.comparison.budget import BudgetSpec
from dormouse.ab.comparison.registry import (
    RUNNER_KEYS,
    STUDY_KEY,
    TUNED_KEY,
    ABSpecError,
    ComparisonSpec,
    Registered,
    _load_plugins,
    _looks_like_path,
    _read_text,
    override_key,
    parse_spec,
    validate_spec,
)
from dormouse.ab.rule.family import BONFERRONI
from dormouse.ab.rule.sequential import Design
from dormouse.ab.study.interaction import InteractionDesign, point_design

WIDTH_AXIS = "model.d_model"  # the axis a width rule grows the model along
TRENDS = ("axis", "log10_flops")
TREND_FLOPS = "log10_flops"  # the change per decade of each point's training FLOPs budget


@dataclass
class WidthRule:
    """``study.width``: what grows with ``model.d_model`` at each point (docs/ab-protocol.md, "A width ladder")."""

    head_dim: int = MISSING  # model.n_heads = d_model / head_dim: the head dimension stays fixed
    mlp_ratio: float | None = None  # model.mlp_hidden = round(mlp_ratio x d_model); null: the model's 8/3 rule


@dataclass
class DataRule:
    """``study.data``: each point's budget from its shared parameter count N (dormouse/model/shape.py)."""

    bytes_per_param: float = MISSING  # the point trains bytes_per_param x N bytes (of the baseline, per run)
    unit: str = "flops"  # flops: every arm trains the baseline's FLOPs for those bytes; tokens: those bytes
    evals: int | None = None  # eval points per run (null: the baseline's count at its train.eval_every)
    epochs: float = 1.0  # the most passes over the training split a run may make (refused above, before any run)


@dataclass
class StudyBlock:
    """The ``study:`` block of a registered study (docs/ab-protocol.md, "A registered study")."""

    axis: str = MISSING
    points: list[Any] = MISSING  # numbers; Any so that an int axis (model.max_iter) keeps its type
    seed_stride: int = MISSING
    smallest_change: float = MISSING
    expected_change: float = MISSING
    alpha_holdback: float = 1.0
    multiplicity: str = "bonferroni"  # bonferroni | holm: the correction of the interaction's claims over the arms
    # one budget per point ({unit, value, evals}, one unit for all), or null: every point the template's budget
    budgets: list[Any] | None = None
    width: WidthRule | None = None  # axis model.d_model only: heads and MLP grown with the width
    trend: str = "axis"  # the change's x: "axis" (log2 of the value, over the range) or "log10_flops" (per decade)
    data: DataRule | None = None  # each point's budget from its parameter count (beside no other budget)


@dataclass
class Point:

    index: int
    value: Any
    reg: Registered

    @property
    def name(self) -> str:
        return self.reg.spec.name


@dataclass
class RegisteredStudy:
    """A loaded study: the template comparison (the file without ``study:``), the block, text and source."""

    template: ComparisonSpec
    study: StudyBlock
    text: str
    source: str
    given: str

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def argument(self) -> str:
        return Registered(spec=self.template, text=self.text, source=self.source, given=self.given).argument

    @property
    def tested(self) -> list[str]:
        return self.template.tested

    @property
    def axis(self) -> str:
        return self.study.axis

    @property
    def values(self) -> list[Any]:
        return list(self.study.points)

    def interaction_design(self) -> InteractionDesign:
        """The primary rule's registered design: α, τ, the points, the family of tested arms and its correction;
        under ``trend: log10_flops`` each point's x is log10 of its training FLOPs budget."""
        positions = tuple(math.log10(c) for c in self.point_flops()) if self.study.trend == TREND_FLOPS else None
        return InteractionDesign(alpha=float(self.template.alpha), smallest_change=float(self.study.smallest_change),
                                 points=tuple(float(v) for v in self.study.points), n_arms=len(self.tested),
                                 alpha_holdback=float(self.study.alpha_holdback),
                                 multiplicity=self.study.multiplicity, positions=positions,
                                 position_name="log10 training FLOPs" if positions else "")

    def point_flops(self) -> list[float]:
        """Each point's training FLOPs budget (a trend in log10 FLOPs registers one per point)."""
        return [float(p.reg.spec.budget.value) for p in self.points()]  # type: ignore[union-attr]

    def point_design(self) -> Design:
        """The sequential design every point runs (α/P, the registered SESOI, looks and hold-back)."""
        t = self.template
        return point_design(self.interaction_design(), float(t.sesoi), tuple(t.looks), float(t.alpha_holdback),
                            t.multiplicity or BONFERRONI)

    def points(self) -> list[Point]:
        return study_points(self)


# Registration fields a point's text leaves out while unset (null): the options of the rule a study may register.
OPTIONAL_KEYS = ("budget", "reference", "bad_mode", "multiplicity", "contrast")


def point_name(axis: str, value: Any) -> str:
    """A point's comparison name and directory: the axis's last key and the value, ``max_iter-4``."""
    return f"{axis.rsplit('.', 1)[-1]}-{value:g}"


def load_study(name: str, registry: Path | None = None) -> RegisteredStudy:
    """Load, schema-check and validate study ``name``; :class:`ABSpecError` names each bad field (``study.<field>``
    for the block's)."""
    text, source = _read_text(name, registry)
    raw = OmegaConf.create(text)
    block_raw = raw.pop(STUDY_KEY)
    try:
        block: StudyBlock = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(StudyBlock), block_raw))  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        raise ABSpecError([f"{source}: field 'study.{key}': {msg} (study fields: "
                           f"{', '.join(StudyBlock.__dataclass_fields__)})"]) from exc
    except ValueError as exc:  # not a mapping (a number, null): OmegaConf refuses to merge it at all
        raise ABSpecError([f"{source}: field 'study': {block_raw!r} must be a mapping of the study fields "
                           f"({', '.join(StudyBlock.__dataclass_fields__)})"]) from exc
    template = parse_spec(OmegaConf.to_yaml(raw), source)
    if not isinstance(template, ComparisonSpec):
        raise ABSpecError([f"{source}: field 'protocol': a study is a protocol-2 registration (protocol: 2)"])
    _load_plugins(template, name, registry, source)
    expected = None if _looks_like_path(name) else name
    problems = validate_spec(template, source, expected) + study_problems(template, block, source)
    if problems:
        raise ABSpecError(problems)
    study = RegisteredStudy(template=template, study=block, text=text, source=source, given=name)
    problems = [line for p in study_points(study) for line in validate_spec(p.reg.spec, p.reg.source)]
    problems += _seed_overlaps(study)
    if not problems and block.trend == TREND_FLOPS:  # the points' budgets must rise with the width
        problems += [f"{source}: field 'study.trend': the points' training FLOPs {what}"
                     for key, what in study.interaction_design().field_problems() if key == "positions"]
    if problems:
        raise ABSpecError(problems)
    return study


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def study_problems(template: ComparisonSpec, block: StudyBlock, source: str) -> list[str]:
    """Every problem of the ``study:`` block, one line each naming the field (``study.<field>``)."""
    lines: list[str] = []

    def bad(key: str, msg: str) -> None:
        lines.append(f"{source}: field '{key}': {msg}")

    axis = block.axis
    if not axis or "=" in axis or axis.strip() != axis or axis.startswith(("+", "~")):
        bad("study.axis", f"{axis!r} must be a config key (e.g. model.max_iter)")
    elif axis in RUNNER_KEYS:
        bad("study.axis", f"{axis!r} is a key the runner sets for every run ({', '.join(RUNNER_KEYS)})")
    elif axis == TUNED_KEY:
        bad("study.axis", f"{axis!r} is what each point's tune stage chooses per arm; a study of the learning "
            "rate is a tune grid, not a study")
    else:
        setters = [("fixed", o) for o in template.fixed] + [
            (f"arms.{a}", o) for a, ovs in template.arms.items() for o in ovs]
        for where, o in setters:
            if override_key(o) == axis:
                bad(where, f"override {o!r} sets {axis}, the study's axis: each point sets it")
    points = list(block.points)
    if not all(_number(v) for v in points):
        bad("study.points", f"{points} must be finite numbers (the axis's values)")
    else:
        design = InteractionDesign(alpha=float(template.alpha), smallest_change=float(block.smallest_change),
                                   points=tuple(float(v) for v in points), n_arms=max(1, len(template.tested)),
                                   alpha_holdback=float(block.alpha_holdback), multiplicity=block.multiplicity)
        for name, what in design.field_problems():
            if name != "alpha":  # the template's own check names 'alpha'
                bad(f"study.{name}", what)
        if len({point_name(axis, v) for v in points}) != len(points):
            bad("study.points", f"{points}: two values give the same point name")
    if block.seed_stride < 1:
        bad("study.seed_stride", f"{block.seed_stride} must be >= 1")
    _budgets_problems(template, block, bad)
    _ladder_problems(template, block, bad)
    if not (_number(block.expected_change) and block.expected_change != 0):
        bad("study.expected_change", f"{block.expected_change} must be a finite non-zero number (bpb; < 0 = grows)")
    return lines


def _budgets_problems(template: ComparisonSpec, block: StudyBlock, bad: Any) -> None:
    """Per-point budgets: one per point, each a budget's fields, all in one unit (points compared on one scale)."""
    if block.budgets is None:
        return
    if template.budget is not None:
        bad("study.budgets", "set beside the template's budget: give the budget once, in one of the two")
    if len(block.budgets) != len(list(block.points)):
        bad("study.budgets", f"{len(block.budgets)} budgets for {len(list(block.points))} points: one per point")
    units = []
    for i, raw in enumerate(block.budgets):
        try:
            budget = point_budget(raw)
        except (TypeError, ValueError, OmegaConfBaseException) as exc:
            bad(f"study.budgets[{i}]", f"{raw!r} is not a budget ({{unit, value, evals}}): {exc}")
            continue
        units.append(budget.unit)
        for key, problem in budget.problems(f"study.budgets[{i}]"):
            bad(key, problem)
    if len(set(units)) > 1:
        bad("study.budgets", f"the points mix units ({', '.join(units)}): a study compares its points in one unit")


WIDTH_KEYS = ("model.n_heads", "model.mlp_hidden")  # what a width rule sets at each point


def _ladder_problems(template: ComparisonSpec, block: StudyBlock, bad: Any) -> None:
    """A width rule grows the model along model.d_model only, into whole even heads, and nothing else sets what it
    sets; a data rule needs a positive rate and a budget unit, and no other budget beside it."""
    width, data = block.width, block.data
    if width is not None:
        if block.axis != WIDTH_AXIS:
            bad("study.width", f"a width rule needs the axis {WIDTH_AXIS}, not {block.axis!r}")
        elif not (isinstance(width.head_dim, int) and width.head_dim >= 2 and width.head_dim % 2 == 0):
            bad("study.width.head_dim", f"{width.head_dim!r} must be an even integer >= 2 (RoPE rotates pairs)")
        else:
            odd = [v for v in block.points if not (_number(v) and v % width.head_dim == 0)]
            if odd:
                bad("study.width.head_dim", f"{width.head_dim} does not divide the widths {odd}: each point's "
                    "model.n_heads = d_model / head_dim must be whole")
        if width.mlp_ratio is not None and not (_number(width.mlp_ratio) and width.mlp_ratio > 0):
            bad("study.width.mlp_ratio", f"{width.mlp_ratio} must be a number > 0, or null (the model's 8/3 rule)")
        setters = [("fixed", o) for o in template.fixed] + [
            (f"arms.{a}", o) for a, ovs in template.arms.items() for o in ovs]
        for where, o in setters:
            if override_key(o) in WIDTH_KEYS:
                bad(where, f"override {o!r} sets {override_key(o)}, which study.width sets at each point")
    flops_budgets = (data is not None and data.unit == "flops") or (
        block.budgets is not None and all(isinstance(b, dict) or OmegaConf.is_dict(b) for b in block.budgets)
        and all(str(b.get("unit")) == "flops" for b in block.budgets))
    if block.trend not in TRENDS:
        bad("study.trend", f"{block.trend!r} must be one of {', '.join(TRENDS)}")
    elif block.trend == TREND_FLOPS and not flops_budgets:
        bad("study.trend", "log10_flops needs each point's training FLOPs: a data rule with unit flops, or "
            "study.budgets in flops")
    if data is None:
        return
    if not (_number(data.bytes_per_param) and data.bytes_per_param > 0):
        bad("study.data.bytes_per_param", f"{data.bytes_per_param} must be a number > 0")
    if data.unit not in ("flops", "tokens"):
        bad("study.data.unit", f"{data.unit!r} must be flops or tokens (the budget units that match cost)")
    if not (_number(data.epochs) and data.epochs > 0):
        bad("study.data.epochs", f"{data.epochs} must be a number > 0 (passes over the training split)")
    if template.budget is not None or block.budgets is not None:
        bad("study.data", "set beside another budget (the template's budget or study.budgets): give one rule")


def width_overrides(block: StudyBlock, value: Any) -> list[str]:
    """What the width rule sets at the point of width ``value`` (nothing without a rule)."""
    width = block.width
    if width is None:
        return []
    out = [f"model.n_heads={int(value) // int(width.head_dim)}"]
    if width.mlp_ratio is not None:
        out.append(f"model.mlp_hidden={round(float(width.mlp_ratio) * int(value))}")
    return out


def data_budget(study: RegisteredStudy, spec: ComparisonSpec) -> BudgetSpec:
    """The point's budget under the data rule: bytes_per_param x N bytes, N the shared parameters at the point's
    width (the arm's own left out: the same N for every arm); under flops the baseline's training FLOPs for them."""
    from dormouse.config.schema import compose_config
    from dormouse.model.flops import flop_count
    from dormouse.model.shape import shared_params

    rule = study.study.data
    assert rule is not None
    cfg = compose_config([*spec.fixed, *spec.arms[spec.baseline]])
    n = shared_params(int(cfg.model.d_model), cfg.model.mlp_hidden, bool(cfg.model.tie_head))
    tokens = float(rule.bytes_per_param) * n
    value = tokens if rule.unit == "tokens" else tokens * flop_count(cfg).training_per_token
    return BudgetSpec(unit=rule.unit, value=float(f"{value:.6g}"), evals=rule.evals)


def point_budget(raw: Any) -> BudgetSpec:
    """One point's budget from its ``study.budgets`` entry."""
    merged = OmegaConf.merge(OmegaConf.structured(BudgetSpec), raw)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def _shifted(template: ComparisonSpec, axis: str, value: Any, index: int, stride: int, n_points: int) -> ComparisonSpec:
    spec = copy.deepcopy(template)
    shift = index * stride
    spec.name = point_name(axis, value)
    spec.alpha = float(template.alpha) / n_points
    spec.fixed = [*template.fixed, f"{axis}={value}"]
    spec.init_seed_base += shift
    spec.data_seed_base += shift
    if spec.aa_data_seed_base is not None:
        spec.aa_data_seed_base += shift
    if spec.tune is not None:
        spec.tune.init_seed_base += shift
        spec.tune.data_seed_base += shift
    spec.description = f"Point {spec.name} of study {template.name}. {template.description}"
    return spec


def _point_spec(study: RegisteredStudy, index: int, value: Any) -> ComparisonSpec:
    points = list(study.study.points)
    spec = _shifted(study.template, study.axis, value, index, int(study.study.seed_stride), len(points))
    spec.fixed += width_overrides(study.study, value)
    if study.study.budgets is not None:
        spec.budget = point_budget(study.study.budgets[index])
    elif study.study.data is not None:
        spec.budget = data_budget(study, spec)
    return spec


def study_points(study: RegisteredStudy) -> list[Point]:
    """Each point's comparison, in the axis's order."""
    points = list(study.study.points)
    out = []
    for i, value in enumerate(points):
        spec = _point_spec(study, i, value)
        # The study file's sha256, not its path: the point's stamp follows the file's bytes wherever it is read.
        # The header is part of the point's registered bytes: a published study's stamps hash it as written.
        header = (f"# Point {spec.name} ({study.axis}={value}) of the registered study {study.name} (study file\n"
                  f"# sha256 {study.sha256}), made by dormouse.ab.study; not a file to edit.\n")
        fields = OmegaConf.to_container(OmegaConf.structured(spec))
        for key in OPTIONAL_KEYS:  # unset: no key, so the stamps of points registered without one hash these bytes
            if getattr(spec, key) is None:
                del fields[key]  # type: ignore[arg-type,union-attr]
        text = header + OmegaConf.to_yaml(fields)
        reg = Registered(spec=spec, text=text, source=f"{study.source} [point {spec.name}]", given=study.given)
        out.append(Point(i, value, reg))
    return out


def _streams(spec: ComparisonSpec) -> dict[str, list[tuple[str, range]]]:
    """A point's seeds per kind (init, data): which stream, which seeds."""
    n = spec.planned_replicates
    init = [("init_seed_base", range(spec.init_seed_base, spec.init_seed_base + n))]
    data = [("data_seed_base", range(spec.data_seed_base, spec.data_seed_base + n))]
    if spec.aa_data_seed_base is not None:
        data.append(("aa_data_seed_base", range(spec.aa_data_seed_base, spec.aa_data_seed_base + n)))
    if spec.tune is not None:
        streams = spec.tune.streams()
        init.append(("tune.init_seed_base", streams["tune.init_seed_base"]))
        data.append(("tune.data_seed_base", streams["tune.data_seed_base"]))
    return {"init": init, "data": data}


def _seed_overlaps(study: RegisteredStudy) -> list[str]:
    """Refuse, naming the stride, points sharing a seed: they would share weights or data order, and the rule treats
    points as independent."""
    seen: dict[str, list[tuple[str, str, range]]] = {"init": [], "data": []}
    for p in study.points():
        for kind, streams in _streams(p.reg.spec).items():
            for field_name, seeds in streams:
                for other_point, other_field, other in seen[kind]:
                    if other_point != p.name and max(seeds.start, other.start) < min(seeds.stop, other.stop):
                        return [f"{study.source}: field 'study.seed_stride': {study.study.seed_stride} makes point "
                                f"{p.name}'s {field_name} seeds {seeds.start}..{seeds.stop - 1} overlap point "
                                f"{other_point}'s {other_field} seeds {other.start}..{other.stop - 1}; the points "
                                "must be independent: take a stride larger than every stream's length"]
                seen[kind].append((p.name, field_name, seeds))
    return []
