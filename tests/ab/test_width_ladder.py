"""A width ladder: a study along model.d_model whose width rule grows the heads and the MLP with the width, and whose
data rule gives each point bytes_per_param x N bytes (N the shared parameters at its width), every arm at the
baseline's FLOPs for them; a point whose runs would repeat the training split more than registered is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from dormouse.ab.comparison.registry import ABSpecError, ComparisonError
from dormouse.ab.study.plans import build_point_plans, ladder_points
from dormouse.ab.study.questions import study_plan
from dormouse.ab.study.registry import load_study
from dormouse.model.flops import step_tokens, training_cost
from dormouse.model.shape import shared_params
from tests.helpers.registrations import registration, write_registry

FIXED = "[preset=tiny, model.max_iter=2, data.seq_len=32, data.eval_bytes=2048, train.batch_size=4, " \
        "train.warmup=2, train.eval_every=10, train.device=cpu, logging.progress=off]"
LADDER = """study:
  axis: model.d_model
  points: [16, 32, 48]
  seed_stride: 1000
  smallest_change: 0.05
  expected_change: -0.1
  width: {head_dim: 8, mlp_ratio: 3.0}
  data: {bytes_per_param: 0.5, unit: flops, evals: 2}
"""


def ladder(tmp_path: Path, tail: str = LADDER) -> Path:
    text = registration("s", ("prenorm", "gr", "prenorm_aa"), looks="[2]", sesoi=0.05, fixed=FIXED, tail=tail)
    return write_registry(tmp_path, "s", text)


def test_each_point_grows_heads_and_mlp_with_the_width_and_trains_bytes_per_parameter(tmp_path: Path) -> None:
    study = load_study("s", ladder(tmp_path))
    plans = build_point_plans(study, [], tmp_path / "ab")
    for width, plan in zip((16, 32, 48), plans):
        base, gr = plan.arm_cfgs["prenorm"], plan.arm_cfgs["gr"]
        assert (base.model.d_model, base.model.n_heads, base.model.mlp_hidden) == (width, width // 8, 3 * width)
        n = shared_params(width, 3 * width, True)
        bytes_run = int(base.train.steps) * step_tokens(base)
        assert abs(bytes_run - 0.5 * n) <= step_tokens(base) / 2  # the nearest whole step
        # flops: GR trains the baseline's FLOPs (its own steps), within half of one of its steps
        per_step = training_cost(gr)["flops_per_step"]
        assert abs(training_cost(gr)["flops"] - training_cost(base)["flops"]) <= per_step / 2 + 1e-6 * per_step
    rows = ladder_points(study, plans)
    assert [r.params for r in rows] == [shared_params(w, 3 * w, True) for w in (16, 32, 48)]


def test_the_plan_states_each_points_width_parameters_bytes_and_flops(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    from dormouse.ab.launchers.request import LaunchRequest

    study_plan(load_study("s", ladder(tmp_path)), [], root=tmp_path / "ab", launch=LaunchRequest(), console=console)
    text = console.export_text()
    assert "params" in text and "bytes/run" in text and "FLOPs/run" in text
    assert f"{shared_params(48, 144, True):,}" in text


def test_a_point_that_would_repeat_its_training_bytes_is_refused_before_any_run(tmp_path: Path) -> None:
    greedy = LADDER.replace("bytes_per_param: 0.5", "bytes_per_param: 400")
    with pytest.raises(ComparisonError) as exc:
        build_point_plans(load_study("s", ladder(tmp_path, greedy)), [], tmp_path / "ab")
    assert any("point d_model-48" in ln and "study.data.epochs=1" in ln for ln in exc.value.lines), exc.value.lines


@pytest.mark.parametrize("old, new, field", [
    ("axis: model.d_model", "axis: model.max_iter", "study.width"),
    ("head_dim: 8", "head_dim: 6", "study.width.head_dim"),
    ("unit: flops", "unit: steps", "study.data.unit"),
    ("bytes_per_param: 0.5", "bytes_per_param: 0", "study.data.bytes_per_param"),
])
def test_a_bad_ladder_field_is_refused_naming_it(tmp_path: Path, old: str, new: str, field: str) -> None:
    tail = LADDER.replace(old, new).replace("points: [16, 32, 48]", "points: [1, 2]" if "max_iter" in new else
                                            "points: [16, 32, 48]")
    with pytest.raises(ABSpecError) as exc:
        load_study("s", ladder(tmp_path, tail))
    assert any(f"field '{field}'" in ln for ln in exc.value.lines), exc.value.lines


def test_a_width_rule_beside_a_fixed_head_count_is_refused(tmp_path: Path) -> None:
    text = registration("s", ("prenorm", "gr", "prenorm_aa"), looks="[2]", sesoi=0.05,
                        fixed=FIXED.replace("[preset=tiny,", "[preset=tiny, model.n_heads=2,"), tail=LADDER)
    with pytest.raises(ABSpecError) as exc:
        load_study("s", write_registry(tmp_path, "s", text))
    assert any("field 'fixed'" in ln and "study.width sets" in ln for ln in exc.value.lines), exc.value.lines


def test_the_trend_in_log10_flops_is_the_change_per_decade_of_each_points_budget(tmp_path: Path) -> None:
    """Under trend log10_flops each point's x is log10 of its FLOPs budget and the contrast is the OLS slope per
    decade: on differences lying exactly on a line in x the estimate is that line's slope (numpy's fit, the oracle)."""
    import numpy as np

    from dormouse.ab.study.interaction import decide_all

    study = load_study("s", ladder(tmp_path, LADDER.replace("  width:", "  trend: log10_flops\n  width:")))
    design = study.interaction_design()
    x = np.log10([p.reg.spec.budget.value for p in study.points()])
    assert design.positions == pytest.approx(tuple(x)) and design.span == 1.0
    line = 0.01 - 0.03 * (x - x.mean())  # Δ falls 0.03 bpb per decade of compute
    diffs = [[v - 0.002, v + 0.002, v] for v in line]
    decision = decide_all(design, {"gr": diffs})["gr"]
    assert decision.estimate == pytest.approx(float(np.polyfit(x, line, 1)[0]), abs=1e-12)
    assert "per unit of log10 training FLOPs" in decision.sentence("gr", "prenorm", "model.d_model")


def test_the_trend_per_decade_holds_its_error_rate_when_nothing_changes(tmp_path: Path) -> None:
    """The whole ladder simulated (every point's sequential procedure, then the rule per decade) at Δ = 0 everywhere:
    P(any arm grows or shrinks) within α + 3 Monte-Carlo se (4000 studies: se 0.0034 at 0.05)."""
    import numpy as np

    from dormouse.ab.study.interaction import GROWS, SHRINKS, VERDICTS, simulate_study

    study = load_study("s", ladder(tmp_path, LADDER.replace("  width:", "  trend: log10_flops\n  width:")))
    design = study.interaction_design()
    codes, _, _ = simulate_study(design, study.point_design(), [0.0] * 3, [0.03] * 3, 4000, seed=5)
    claims = np.isin(codes, [VERDICTS.index(GROWS), VERDICTS.index(SHRINKS)]).any(axis=0).mean()
    assert claims <= design.alpha + 3 * np.sqrt(design.alpha * (1 - design.alpha) / 4000)


def test_a_trend_in_flops_without_flops_budgets_is_refused(tmp_path: Path) -> None:
    tail = LADDER.replace("  width:", "  trend: log10_flops\n  width:").replace("unit: flops", "unit: tokens")
    with pytest.raises(ABSpecError) as exc:
        load_study("s", ladder(tmp_path, tail))
    assert any("field 'study.trend'" in ln and "needs each point's training FLOPs" in ln for ln in exc.value.lines)


def test_a_finished_ladder_reports_each_arms_fitted_law_and_labels_delta_at_1e18_an_extrapolation(
        tmp_path: Path) -> None:
    """Planted final bpb on a law of each run's FLOPs (the baseline L = 1.5 + 2·(C/1e8)^−0.3, GR 0.03 lower at every
    point, seed jitter ±0.002): the report recovers the baseline's α within its interval, GR's Δ at 1e18 is about
    −0.03 (a parallel law), and the section and the plot say it is an extrapolation."""
    import json

    from dormouse.ab.comparison.command import ab_run
    from dormouse.model.flops import training_cost
    from tests.helpers.ab_exit import exit_code
    from tests.helpers.fake_train import FakeTrain

    jitter = (0.002, -0.002, 0.001, -0.001)

    def planted(run: object) -> float:
        c = training_cost(run.cfg)["flops"]  # type: ignore[attr-defined]
        shift = -0.03 if run.arm == "gr" else 0.0  # type: ignore[attr-defined]
        return 1.5 + 2.0 * (c / 1e8) ** -0.3 + shift + jitter[run.seed % 4]  # type: ignore[attr-defined]

    tail = LADDER.replace("  width:", "  trend: log10_flops\n  width:").replace("points: [16, 32, 48]",
                                                                                 "points: [16, 32, 48, 64]")
    text = registration("s", ("prenorm", "gr", "prenorm_aa"), looks="[4]", sesoi=0.05, fixed=FIXED, tail=tail)
    reg = write_registry(tmp_path, "s", text)
    code = exit_code(ab_run, "s", [], root=tmp_path / "ab", console=Console(record=True, width=200), registry=reg,
                     err=Console(record=True, width=200), train_fn=FakeTrain(planted))
    assert code == 0
    r = json.loads((tmp_path / "ab" / "s" / "results.json").read_text())
    base = r["scaling"]["curves"]["prenorm"]
    assert base["alpha_interval"][0] <= 0.3 <= base["alpha_interval"][1]
    assert r["scaling"]["delta_at"]["gr"]["delta"] == pytest.approx(-0.03, abs=0.005)
    report = (tmp_path / "ab" / "s" / "report.md").read_text()
    assert "Δ at 1e+18 training FLOPs: an extrapolation" in report and "loss_vs_flops.png" in report
    assert (tmp_path / "ab" / "s" / "loss_vs_flops.png").is_file()
