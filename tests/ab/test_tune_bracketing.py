"""The bracketing tune rule (dormouse/ab/tune/rule.py): extension beyond an edge the
best lr sits at, the extension budget, a divergence stopping a side (stability-limited), a second seed for
the best lr and its neighbours within the gap, the choice by the mean over every tune replicate run at an
lr, the unbracketed flag, one budget for every arm; the registration's fields; and a Monte-Carlo run of the
rule family showing that bracketing cuts the tuning regret.

The curves are written in grid steps: ``s`` = log(lr / grid[0]) / log(ratio), so grid (1, 2, 4) with ratio 2
has s = 0, 1, 2 and its extensions s = 3, 4, ... above and -1, -2, ... below.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dormouse.ab.comparison.registry import ABSpecError, load_spec
from dormouse.ab.tune.rule import Bracketing, Request, choose, next_step, replay
from tests.helpers.registrations import refusal, registration, write_registry

GRID = (1.0, 2.0, 4.0)


def v_curve(opt: float, diverge_above: float = math.inf) -> Callable[[float, int], float]:
    """A noiseless V in grid steps around ``opt`` (final bpb 2 at the optimum), +inf at lrs above
    ``diverge_above``."""
    def value(lr: float, j: int) -> float:
        if lr > diverge_above:
            return math.inf
        return 2.0 + 0.05 * abs(math.log2(lr) - opt)
    return value


def rule(**kw: object) -> Bracketing:
    return Bracketing(grid=GRID, **{"replicates": 1, "extensions": 3, **kw})  # type: ignore[arg-type]


# --- extension ------------------------------------------------------------------------------------------

def test_a_best_lr_at_the_top_edge_extends_the_grid_upward_until_bracketed() -> None:
    got = replay(rule(), v_curve(opt=3))  # optimum at lr 8, one step above the grid
    assert got.lr == 8.0 and got.extended == (8.0, 16.0) and got.unbracketed is None
    assert got.runs == 5 and got.stability_limited == ()


def test_a_best_lr_at_the_bottom_edge_extends_the_grid_downward() -> None:
    got = replay(rule(), v_curve(opt=-1))  # optimum at lr 0.5
    assert got.lr == 0.5 and got.extended == (0.25, 0.5) and got.unbracketed is None


def test_the_first_extension_is_the_grids_next_point_at_replicates_zero_to_r() -> None:
    values = {(lr, j): 2.0 - lr / 100 for lr in GRID for j in range(2)}
    assert next_step(rule(replicates=2), values).requests == (Request(8.0, 0), Request(8.0, 1))
    values = {(lr, j): 2.0 + lr / 100 for lr in GRID for j in range(2)}
    assert next_step(rule(replicates=2), values).requests == (Request(0.5, 0), Request(0.5, 1))


def test_extensions_stop_at_the_budget_and_flag_the_arm_unbracketed() -> None:
    got = replay(rule(extensions=2), v_curve(opt=10))
    assert got.extended == (8.0, 16.0) and got.lr == 16.0 and got.unbracketed == "high"
    assert got.runs == 5 == got.budget


def test_without_extensions_an_edge_choice_is_flagged_unbracketed() -> None:
    got = replay(rule(extensions=0), v_curve(opt=-3))
    assert got.lr == 1.0 and got.extended == () and got.unbracketed == "low" and got.runs == 3


def test_an_interior_choice_on_the_grid_adds_nothing() -> None:
    got = replay(rule(), v_curve(opt=1))
    assert (got.lr, got.runs, got.extended, got.unbracketed) == (2.0, 3, (), None)


# --- divergence -----------------------------------------------------------------------------------------

def test_a_divergence_beyond_the_edge_stops_that_side_and_marks_the_arm_stability_limited() -> None:
    got = replay(rule(), v_curve(opt=6, diverge_above=5.0))  # 8 diverges; the optimum (64) is never reached
    assert got.lr == 4.0 and got.extended == (8.0,) and got.stability_limited == ("high",)
    assert got.unbracketed is None and got.runs == 4


def test_a_divergence_on_the_grid_marks_the_side_of_the_choice_it_neighbours() -> None:
    got = replay(rule(extensions=0), v_curve(opt=6, diverge_above=3.0))
    assert got.lr == 2.0 and got.stability_limited == ("high",) and got.unbracketed is None


# --- the second seed ------------------------------------------------------------------------------------

def table(rows: dict[float, list[float]]) -> Callable[[float, int], float]:
    return lambda lr, j: rows[lr][j]


def test_the_best_lr_and_a_neighbour_within_the_gap_each_get_a_second_seed() -> None:
    rows = {1.0: [2.20, 2.20], 2.0: [2.00, 2.00], 4.0: [2.01, 1.90]}
    got = replay(rule(extensions=0, second_seed_gap=0.03), table(rows))
    # 4.0 was 0.01 behind 2.0: both ran seed 1; with it 4.0's mean (1.955) is the lower
    assert got.second_seed == (2.0, 4.0) and got.lr == 4.0 and got.runs == 5


def test_a_neighbour_outside_the_gap_gets_no_second_seed() -> None:
    rows = {1.0: [2.20, 2.20], 2.0: [2.00, 2.00], 4.0: [2.05, 1.90]}
    got = replay(rule(extensions=0, second_seed_gap=0.03), table(rows))
    assert got.second_seed == () and got.lr == 2.0 and got.runs == 3


def test_a_second_seed_that_moves_the_best_to_an_edge_extends_again() -> None:
    rows = {1.0: [2.20, 2.20], 2.0: [2.00, 2.00], 4.0: [2.01, 1.90], 8.0: [2.30]}
    got = replay(rule(extensions=1, second_seed_gap=0.03), table(rows))
    assert got.second_seed == (2.0, 4.0) and got.extended == (8.0,) and got.lr == 4.0


def test_the_second_seed_is_one_more_stream_disjoint_from_the_confirmatory_ones(tmp_path: Path) -> None:
    reg = write_registry(tmp_path, "tb", SPEC)
    tune = load_spec("tb", reg).spec.tune
    assert list(tune.streams()["tune.init_seed_base"]) == [9001, 9002, 9003]
    (reg / "tb.yaml").write_text(SPEC.replace("init_seed_base: 1\n", "init_seed_base: 9003\n"))
    with pytest.raises(ABSpecError, match="tune.init_seed_base"):
        load_spec("tb", reg)  # only the second seed (9003) overlaps the confirmatory init seeds


# --- the choice is the mean over every replicate -----------------------------------------------------

def test_the_choice_is_the_mean_over_the_tune_replicates_not_the_first() -> None:
    rows = {1.0: [2.30, 2.30], 2.0: [1.90, 2.20], 4.0: [2.00, 2.01], 8.0: [2.30, 2.30]}
    assert choose(rows) == 4.0  # the first replicate alone would choose 2.0 (1.90)
    got = replay(Bracketing(grid=(1.0, 2.0, 4.0, 8.0), replicates=2, extensions=2), table(rows))
    assert got.lr == 4.0 and got.runs == 8


# --- one budget for every arm ---------------------------------------------------------------------------

def test_every_arm_has_the_same_budget_and_no_arm_exceeds_it() -> None:
    r = rule(replicates=2, extensions=3, second_seed_gap=0.05)
    assert r.budget == (3 + 3) * 3
    rng = np.random.default_rng(7)
    for opt in (-6, -1, 0.5, 1, 2.2, 3, 9):
        got = replay(r, lambda lr, j, opt=opt: v_curve(opt)(lr, j) + rng.normal(0, 0.02))
        assert got.budget == r.budget and got.runs <= r.budget


# --- the registration -----------------------------------------------------------------------------------

SPEC = registration("tb", ("rezero", "gr"), aa_arm=None, fixed="[preset=tiny]", tail="""\
tune:
  lrs: [0.001, 0.002, 0.004]
  replicates: 2
  init_seed_base: 9001
  data_seed_base: 9101
  extensions: 3
  second_seed_gap: 0.03
""")


def _refusal(tmp_path: Path, old: str, new: str) -> str:
    return refusal(tmp_path, SPEC, "tb", old, new)


def test_extensions_need_a_geometric_ascending_grid(tmp_path: Path) -> None:
    assert "field 'tune.lrs'" in _refusal(tmp_path, "[0.001, 0.002, 0.004]", "[0.001, 0.002, 0.005]")
    assert "field 'tune.lrs'" in _refusal(tmp_path, "[0.001, 0.002, 0.004]", "[0.004, 0.002, 0.001]")
    assert "field 'tune.lrs'" in _refusal(tmp_path, "[0.001, 0.002, 0.004]", "[0.001]")


def test_bad_extensions_or_gap_are_refused_naming_the_field(tmp_path: Path) -> None:
    assert "field 'tune.extensions'" in _refusal(tmp_path, "extensions: 3", "extensions: -1")
    assert "field 'tune.second_seed_gap'" in _refusal(tmp_path, "second_seed_gap: 0.03", "second_seed_gap: 0")
    assert "field 'tune.second_seed_gap'" in _refusal(tmp_path, "second_seed_gap: 0.03", "second_seed_gap: .inf")


def test_a_geometric_grid_gives_its_ratio_and_extension_points(tmp_path: Path) -> None:
    reg = write_registry(tmp_path, "tb", SPEC.replace("[0.001, 0.002, 0.004]", "[2.0e-3, 3.0e-3, 4.5e-3]"))
    r = load_spec("tb", reg).spec.tune.bracketing()
    assert r.ratio == 1.5 and r.lr_at(3) == 0.00675 and r.lr_at(-1) == pytest.approx(2e-3 / 1.5, rel=1e-12)
    assert r.budget == (3 + 3) * 3


# --- the rule family, by simulation (the audit's numbers) -------------------------------------------------

MC_GRID = (2.0e-3, 3.0e-3, 4.5e-3)  # residual_cpu2's grid, ratio 1.5


def _regret(r: Bracketing, n: int, seed: int) -> tuple[float, float, float]:
    """Mean tuning regret (true bpb at the choice minus at the optimum), P(regret > 0.015) and mean runs per
    arm, over ``n`` arms whose true curve is 2 + 0.02·(s − s_opt)² in grid steps, s_opt uniform over two steps
    beyond either edge (so most optima lie at or beyond an edge, as four of five arms in residual_cpu2), each
    tune run that curve plus N(0, 0.015²) noise."""
    rng = np.random.default_rng(seed)
    regrets, runs = [], []
    for _ in range(n):
        s_opt = rng.uniform(-2.0, 4.0)

        def true(lr: float, s_opt: float = s_opt) -> float:
            return 2.0 + 0.02 * (math.log(lr / MC_GRID[0]) / math.log(1.5) - s_opt) ** 2

        got = replay(r, lambda lr, j: true(lr) + rng.normal(0.0, 0.015))
        regrets.append(true(got.lr) - 2.0)
        runs.append(got.runs)
    arr = np.asarray(regrets)
    return float(arr.mean()), float((arr > 0.015).mean()), float(np.mean(runs))


def test_bracketing_cuts_the_expected_tuning_regret() -> None:
    """The audit's rule family: regret 0.018 -> 0.005 bpb, P(bias > 0.015) 0.47 -> 0.10, +0.8 runs per arm.
    Here (n = 1500 arms per rule, seed 34): the grid alone regret 0.0198, P(regret > 0.015) 0.42, 3 runs;
    bracketing (3 extensions) 0.0059, 0.11, 4.5 runs (+1.5); with a second seed within 0.03 as well 0.0040,
    0.045, 6.7 runs; the second seed without extension 0.0193, 0.39, 3.9 runs (useless alone, as the audit
    found).
    Monte-Carlo error: the regret's sd is ~0.02 for the grid, ~0.01 bracketed, so its mean's SE at n = 1500
    is ~0.0005 and ~0.0003; P's SE is sqrt(0.42·0.58/1500) = 0.013 and sqrt(0.11·0.89/1500) = 0.008. Every
    bound below is > 4 SE from the measured value."""
    grid = _regret(Bracketing(MC_GRID, 1), 1500, 34)
    bracketed = _regret(Bracketing(MC_GRID, 1, extensions=3), 1500, 34)
    seconds_only = _regret(Bracketing(MC_GRID, 1, second_seed_gap=0.03), 1500, 34)
    assert grid[0] > 0.015 and grid[1] > 0.35 and grid[2] == 3
    assert bracketed[0] < 0.008 and bracketed[1] < 0.16 and bracketed[2] < 5.5
    assert bracketed[0] < grid[0] / 2
    assert seconds_only[0] > 0.015  # a second seed cannot reach an optimum beyond the grid
