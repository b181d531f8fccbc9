"""The tuning regret: how far an arm's chosen lr may be from the best it tried, from its tune seeds' spread, and the
verdicts whose margin is smaller than the regret that could move them (fragile to tuning, descriptive)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rich.console import Console

from dormouse.ab.comparison.runner import run_comparison
from dormouse.ab.tune.regret import Regret, decision_margin, fragile, regret_bound
from tests.helpers.fake_train import FakeTrain
from tests.helpers.registrations import registration, write_registry

# Three lrs, three seeds each, every lr's seeds spread by sd 0.1: pooled sd 0.1 on 6 df. The chosen 2e-3 (mean 2.0)
# against 1e-3 (2.1) and 4e-3 (2.4), Bonferroni over the 2: t_6 at one-sided 0.025 is 2.4469 (t table), se
# 0.1·sqrt(2/3) = 0.08165, so the bound is −0.1 + 2.4469 · 0.08165 = 0.09979 (4e-3's is below 0).
THREE_SEEDS = {1e-3: [2.0, 2.2, 2.1], 2e-3: [1.9, 2.0, 2.1], 4e-3: [2.3, 2.4, 2.5]}


def test_the_regret_bound_is_the_hand_computed_upper_bound_from_the_seeds_spread() -> None:
    regret = regret_bound(THREE_SEEDS, 2e-3)
    assert regret is not None and regret.df == 6 and regret.compared == 2
    assert regret.upper == pytest.approx(-0.1 + 2.4469 * 0.1 * math.sqrt(2 / 3), abs=2e-5)


def test_one_seed_per_lr_gives_no_regret_bound_and_a_diverged_lr_is_never_better() -> None:
    assert regret_bound({lr: vs[:1] for lr, vs in THREE_SEEDS.items()}, 2e-3) is None
    with_diverged = {**THREE_SEEDS, 8e-3: [math.inf, math.inf, math.inf]}
    assert regret_bound(with_diverged, 2e-3) == regret_bound(THREE_SEEDS, 2e-3)


def test_one_tune_seed_per_lr_takes_the_seed_sd_from_the_confirmatory_runs() -> None:
    """One seed per lr (2.0, 1.9, 2.3: the chosen 2e-3 at 1.9) and confirmatory finals of sd 0.1 on 3 df: the bound
    against 1e-3 is −0.1 + t_3(0.025) · 0.1 · sqrt(2) = −0.1 + 3.1824 · 0.14142 = 0.35006."""
    one = {lr: vs[:1] for lr, vs in THREE_SEEDS.items()}
    regret = regret_bound(one, 2e-3, fallback=[1.9, 2.1, 2.0 - math.sqrt(0.005), 2.0 + math.sqrt(0.005)])
    assert regret is not None and regret.spread_from == "confirmatory" and regret.df == 3
    assert regret.upper == pytest.approx(-0.1 + 3.1824 * 0.1 * math.sqrt(2), abs=2e-4)


def test_a_verdict_is_fragile_when_its_margin_is_smaller_than_the_regret_that_could_move_it() -> None:
    better = {"interval": [-0.05, -0.01], "eq_interval": [-0.04, -0.02]}
    assert decision_margin("better", better, 0.02) == pytest.approx(0.01)
    assert fragile("better", better, 0.02, arm=None, baseline=Regret(0.02, 6, 2)) is True
    assert fragile("better", better, 0.02, arm=Regret(0.5, 6, 2), baseline=Regret(0.005, 6, 2)) is False
    tie = {"interval": [-0.01, 0.01], "eq_interval": [-0.005, 0.012]}
    assert decision_margin("tie", tie, 0.02) == pytest.approx(0.008)
    assert fragile("tie", tie, 0.02, arm=Regret(0.01, 6, 2), baseline=Regret(0.001, 6, 2)) is True
    assert fragile("undecided", tie, 0.02, arm=Regret(0.01, 6, 2), baseline=Regret(0.01, 6, 2)) is None


def test_a_tuned_comparison_reports_each_arms_regret_beside_its_verdict(tmp_path: Path) -> None:
    """Three tune seeds per lr: final bpb 2 + 0.05·|log2(lr / 2e-3)| + a seed term of sd ~0.01."""
    text = registration("tr", ("prenorm", "gr", "prenorm_aa"), looks="[3]", tail=(
        "tune:\n  lrs: [0.001, 0.002, 0.004]\n  replicates: 3\n  init_seed_base: 9001\n  data_seed_base: 9101\n"))
    fake = FakeTrain(lambda r: 2.0 + 0.05 * abs(math.log2(r.lr / 2e-3)) + 0.01 * (r.seed % 3)
                     + (-0.1 if r.arm == "gr" else 0.0))
    results = run_comparison("tr", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                             train_fn=fake, registry=write_registry(tmp_path, "tr", text))
    regrets = {arm: a.beside["tune_regret"] for arm, a in results.arms.items()}
    assert all(r is not None and r["df"] == 6 for r in regrets.values()), regrets
    assert regrets["prenorm_aa"] == regrets["prenorm"]  # the A/A arm runs at its baseline's lr
    assert results.arms["gr"].beside["fragile_to_tuning"] in (True, False)
    assert "Tuning regret" in (results.plan.comp_dir / "report.md").read_text()
