"""The registered budget: a FLOP budget gives each built-in arm the hand-computed steps and evals at the same fractions,
a registration without a budget composes every run as it always has, a bad budget is refused naming its field, and
the other matched view reads the curves at the cheaper run's total."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rich.console import Console

from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.registry import ABSpecError, ComparisonError, load_spec
from dormouse.ab.comparison.runner import run_comparison
from dormouse.ab.reporting.matched import View, matched_diffs, read_at
from dormouse.ab.runs.records import RunRecord
from dormouse.ab.study.registry import load_study
from dormouse.config.eval_schedule import eval_steps
from dormouse.model.flops import training_cost
from dormouse.train.run_config import load_run_config
from tests.helpers.plugin_arms import plugin_loaded
from tests.helpers.registrations import registration, write_registry

SMOKE_FLOPS = load_spec("smoke_flops").text  # smoke's arms at 6e9 training FLOPs each
# What every run of conf/ab/smoke.yaml composes to (name, arm, replicate, then the resolved config, the comparison
# directory written <root>), recorded from a registration without a budget block.
FIXED = "[preset=tiny, train.eval_every=10, train.device=cpu, logging.progress=off]"  # no train.steps: a budget's
SMOKE_PLAN_SHA256 = "6657b90407d0870789c80f9e1657737219618cf18c26ae09d01fab6194fbf478"


def plan_text(name: str, root: Path, registry: Path | None = None) -> str:
    plan = build_plan(name, [], root, registry)
    text = "".join(f"# {r.name} {r.arm} {r.replicate}\n" + OmegaConf.to_yaml(r.cfg, resolve=True)
                   for r in plan.all_runs)
    return text.replace(str(root.resolve()), "<root>")


def test_the_smoke_registration_composes_every_run_byte_for_byte_as_recorded(tmp_path: Path) -> None:
    text = plan_text("smoke", tmp_path)
    assert hashlib.sha256(text.encode()).hexdigest() == SMOKE_PLAN_SHA256


def test_an_explicit_step_budget_composes_the_runs_of_train_steps(tmp_path: Path) -> None:
    registry = write_registry(tmp_path, "smoke", load_spec("smoke").text.replace(
        "  - train.steps=150\n", "") + "budget:\n  unit: steps\n  value: 150\n")
    assert plan_text("smoke", tmp_path / "root", registry) == plan_text("smoke", tmp_path / "root")


def test_a_flop_budget_gives_each_builtin_arm_the_hand_computed_steps(tmp_path: Path) -> None:
    """Training FLOPs per step at the smoke model (×3 the forward, 128 tokens a step): pre-norm 90112 per token,
    GR 98304 (its gates), Full AttnRes 92416, Block 91776 (tests/model/test_flops.py). 6e9 over each, rounded to
    the nearest step: 173.40, 158.95, 169.07, 170.25. Every arm evaluates 4 times, as the baseline's
    train.eval_every=50 does over 173 steps (50, 100, 150, 173)."""
    plan = build_plan(str(write_registry(tmp_path, "smoke_flops", SMOKE_FLOPS) / "smoke_flops.yaml"), [], tmp_path)
    steps = {run.arm: run.cfg.train.steps for run in plan.runs if run.replicate == 1}
    assert steps == {"prenorm": 173, "gr": 159, "attnres_full": 169, "attnres_block": 170, "prenorm_aa": 173}
    every = {run.arm: run.cfg.train.eval_every for run in plan.runs if run.replicate == 1}
    assert every == {"prenorm": 43.25, "gr": 39.75, "attnres_full": 42.25, "attnres_block": 42.5,
                     "prenorm_aa": 43.25}
    for arm, b in plan.budgets.items():
        assert abs(b.flops - 6e9) <= b.flops_per_step / 2, arm  # within half a step of the budget
    assert {t.arm: t.cfg.train.steps for t in plan.tune_runs} == {}  # smoke has no tune stage


def test_a_fractional_eval_spacing_evaluates_at_the_same_fractions_of_every_run() -> None:
    assert eval_steps(43.25, 173) == [44, 87, 130, 173]
    assert eval_steps(39.75, 159) == [40, 80, 120, 159]
    assert eval_steps(50, 173) == [50, 100, 150, 173]
    assert eval_steps(7 / 3, 7) == [3, 5, 7]  # 7 / (7/3) lands a hair under 3 in floating point


def test_a_token_budget_gives_an_arm_with_a_larger_batch_fewer_steps(tmp_path: Path) -> None:
    text = registration("tok", ("prenorm", "gr", "prenorm_aa"), looks="[2]",
                        fixed=FIXED,
                        overrides={"gr": "[model.use_gr=true, train.batch_size=16]"},
                        tail="budget:\n  unit: tokens\n  value: 40960\n")
    plan = build_plan("tok", [], tmp_path, write_registry(tmp_path, "tok", text))
    tokens = {a: b.tokens for a, b in plan.budgets.items()}
    batch = load_run_config(["preset=tiny"]).train.batch_size
    assert tokens["gr"] == 40960 and plan.budgets["gr"].steps * 16 * plan.arm_cfgs["gr"].data.seq_len == 40960
    assert plan.budgets["prenorm"].steps == round(40960 / (batch * plan.arm_cfgs["prenorm"].data.seq_len))


@pytest.mark.parametrize("tail, field", [
    ("budget:\n  unit: joules\n  value: 1\n", "budget.unit"),
    ("budget:\n  unit: flops\n", "budget.value"),
    ("budget:\n  unit: flops\n  value: -3\n", "budget.value"),
    ("budget:\n  unit: steps\n  value: 10.5\n", "budget.value"),
    ("budget:\n  unit: steps\n  value: 10\n  evals: 3\n", "budget.evals"),
])
def test_a_bad_budget_is_refused_in_one_line_naming_its_field(tmp_path: Path, tail: str, field: str) -> None:
    registry = write_registry(tmp_path, "b", registration("b", ("prenorm", "gr", "prenorm_aa"), tail=tail, fixed=FIXED))
    with pytest.raises(ABSpecError) as exc:
        build_plan("b", [], tmp_path, registry)
    assert len(exc.value.lines) == 1 and f"field '{field}'" in exc.value.lines[0], exc.value.lines


def test_a_flop_budget_too_small_for_one_step_is_refused_before_any_run(tmp_path: Path) -> None:
    text = SMOKE_FLOPS.replace("value: 6.0e9", "value: 1.0e6")
    with pytest.raises(ComparisonError) as exc:
        build_plan(str(write_registry(tmp_path, "smoke_flops", text) / "smoke_flops.yaml"), [], tmp_path)
    assert exc.value.lines == [exc.value.lines[0]] and "field 'budget.value'" in exc.value.lines[0]
    assert "less than one training step of arm 'prenorm'" in exc.value.lines[0]


def test_the_steps_a_budget_sets_cannot_be_set_elsewhere(tmp_path: Path) -> None:
    """train.steps in fixed, or an arm's own train.eval_every, would be overwritten: refused naming where."""
    with pytest.raises(ABSpecError) as exc:
        build_plan(str(write_registry(tmp_path, "smoke_flops", SMOKE_FLOPS.replace(
            "  - train.warmup=10\n", "  - train.warmup=10\n  - train.steps=99\n")) / "smoke_flops.yaml"), [], tmp_path)
    assert "field 'fixed'" in exc.value.lines[0] and "train.steps" in exc.value.lines[0]
    with pytest.raises(ComparisonError) as cli:
        build_plan(str(write_registry(tmp_path, "smoke_flops", SMOKE_FLOPS) / "smoke_flops.yaml"), ["train.steps=10"],
                   tmp_path)
    assert "budget (unit flops)" in cli.value.lines[0]


def test_a_study_whose_points_mix_budget_units_is_refused(tmp_path: Path) -> None:
    study = ("study:\n  axis: model.max_iter\n  points: [2, 3]\n  seed_stride: 100\n  smallest_change: 0.02\n"
             "  expected_change: 0.02\n  budgets:\n    - {unit: flops, value: 1.0e9}\n"
             "    - {unit: tokens, value: 9000}\n")
    text = registration("s", ("prenorm", "gr", "prenorm_aa"),
                        fixed=FIXED, tail=study)
    with pytest.raises(ABSpecError) as exc:
        load_study("s", write_registry(tmp_path, "s", text))
    assert any("field 'study.budgets'" in ln and "mix units" in ln for ln in exc.value.lines), exc.value.lines


def test_a_plugin_arm_without_a_flop_count_is_counted_as_the_block_and_said_so(tmp_path: Path) -> None:
    with plugin_loaded():
        text = registration("p", ("prenorm", "sgate", "prenorm_aa"), overrides={"sgate": "[model.use_sgate=true]"},
                            fixed=FIXED,
                            tail="budget:\n  unit: flops\n  value: 1.0e8\n")
        plan = build_plan("p", [], tmp_path, write_registry(tmp_path, "p", text))
        base = training_cost(plan.arm_cfgs["prenorm"])["flops_per_step"]
        assert not plan.budgets["sgate"].arm_counted and plan.budgets["prenorm"].arm_counted
        assert plan.budgets["sgate"].flops_per_step == base  # the block's count alone


def record(arm: str, steps: int, curve: list[tuple[int, float]], replicate: int = 1) -> RunRecord:
    rows = [{"step": s, "bpb": b} for s, b in curve]
    return RunRecord(arm, replicate, Path(arm), arm, steps, rows=rows, final=rows[-1], replicate=replicate)


def test_the_other_view_reads_both_runs_at_the_cheaper_runs_total_between_eval_points() -> None:
    """Matched FLOPs: the arm costs 2 per step and ran 100 steps (200), the baseline 1 per step for 150 (150): both
    are read at 150, the arm at step 75, between its evals at 50 (3.0) and 100 (2.0): 2.5; the baseline at its end."""
    view = View("flops", {"gr": 2.0, "prenorm": 1.0})
    arm = record("gr", 100, [(50, 3.0), (100, 2.0)])
    base = record("prenorm", 150, [(50, 3.5), (100, 3.0), (150, 2.75)])
    assert read_at(arm, view, 150) == 2.5
    assert matched_diffs(view, [arm], {1: base}) == [2.5 - 2.75]
    assert read_at(arm, view, 50) is None  # before its first eval: never extrapolated


def test_a_flop_budget_comparison_runs_every_arm_to_the_same_flops_and_reports_both_views(tmp_path: Path) -> None:
    """Real training on the tiny model: pre-norm, GR and the A/A arm, two replicates, 20 pre-norm steps of FLOPs."""
    fixed = FIXED
    base_cfg = load_run_config(["preset=tiny", "model.use_prenorm=true"])
    value = 20 * training_cost(base_cfg)["flops_per_step"]
    text = registration("f", ("prenorm", "gr", "prenorm_aa"), looks="[2]", fixed=fixed,
                        tail=f"budget:\n  unit: flops\n  value: {value}\n")
    results = run_comparison("f", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                             registry=write_registry(tmp_path, "f", text))
    flops = {arm: a.cost["flops"] for arm, a in results.arms.items()}
    per_step = {arm: b.flops_per_step for arm, b in results.plan.budgets.items()}
    assert all(abs(f - value) <= per_step[arm] / 2 for arm, f in flops.items()), flops
    assert results.arms["gr"].cost["steps"] < results.arms["prenorm"].cost["steps"] == 20
    assert all(r["final"]["step"] == results.plan.budgets[r["arm"]].steps for r in results.runs)
    view = results.arms["gr"].other_view
    assert view["unit"] == "steps" and len(view["diffs"]) == 2 and view["hodges_lehmann"] is not None
    report = (results.plan.comp_dir / "report.md").read_text()
    assert "## Budget and the other matched view" in report and "Δ at matched **steps**" in report
    assert "| steps | FLOPs/token | FLOPs | FLOPs × |" in report
    assert results.arms["gr"].outcome.verdict in ("better", "worse", "tie", "undecided")
