"""The compute ladder's scaling law L(C) = E + A·C^(−α) (dormouse/ab/study/scaling_fit.py): exact recovery from
noise-free data, the stratified bootstrap's coverage by Monte Carlo, its contract (too few points, failed refits
counted and refused past 10 %, determinism) and the extrapolation's wider interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dormouse.ab.study import scaling_fit as sf

# The ladder of the noisy tests: E = 1.5 and the loss falls from 2.6 at 1e12 FLOPs to 2.0 at 1e15 (A·C^(−α) from
# 1.1 to 0.5), so α = log10(2.2)/3 ≈ 0.114, A = 1.1·1e12^α ≈ 25.8, and the law gives L(1e18) = 1.5 + 0.5/2.2.
E_TRUE = 1.5
ALPHA_TRUE = math.log10(1.1 / 0.5) / 3
A_TRUE = 1.1 * 1e12**ALPHA_TRUE
LADDER = tuple(float(c) for c in np.logspace(12, 15, 5))
NOISE_SD = 0.01  # bpb, one seed's final loss about the law
N_REPS = 8


def _noisy_points(rng: np.random.Generator) -> dict[float, list[float]]:
    law = sf.PowerLaw(E_TRUE, A_TRUE, ALPHA_TRUE)
    return {c: list(law.predict(c) + rng.normal(0.0, NOISE_SD, N_REPS)) for c in LADDER}


@pytest.mark.parametrize("n_points", [4, 5, 6])
@pytest.mark.parametrize("law", [(E_TRUE, A_TRUE, ALPHA_TRUE), (0.8, 3e3, 0.3), (2.0, 5.0, 0.05)],
                         ids=["ladder", "steep", "shallow"])
def test_exact_data_recover_E_A_alpha(law: tuple[float, float, float], n_points: int):
    """Noise-free data from the law at 4–6 C over 1e12..1e15: the least squares residual is 0 at the truth, so the
    fit stops only at the solver's tolerance (1e-10, far below 1e-6) and rounding: E, A, α to relative 1e-6; a start
    or a parametrisation that misleads the solver misses this by far."""
    e, a, alpha = law
    c = np.logspace(12, 15, n_points)
    fit = sf.fit_power_law(list(c), list(e + a * c**-alpha))
    assert fit.E == pytest.approx(e, rel=1e-6)
    assert fit.A == pytest.approx(a, rel=1e-6)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert fit.predict(1e18) == pytest.approx(e + a * 1e18**-alpha, rel=1e-6)


def test_exact_data_with_E_zero_recover_E_on_its_bound_to_1e4():
    """A pure power law (E = 0, on its bound): the trust-region solver approaches a bound from inside, so E stops
    near 1e-5 bpb rather than at 0 (A, α to relative ~1e-5); 1e-4 bpb is still far below any seed's noise (~1e-2)."""
    c = np.logspace(12, 15, 5)
    fit = sf.fit_power_law(list(c), list(10.0 * c**-0.05))
    assert 0.0 <= fit.E < 1e-4
    assert fit.A == pytest.approx(10.0, rel=1e-4)
    assert fit.alpha == pytest.approx(0.05, rel=1e-4)


def test_bootstrap_95pct_intervals_cover_true_alpha_and_loss_at_1e18_in_at_least_80pct_of_ladders():
    """40 simulated ladders (5 C, 8 seeds each, sd 0.01), n_boot 200: the 95 % percentile intervals of α and of
    L(1e18) cover the truth in >= 80 % of them. Why 0.8, not 0.95: a percentile bootstrap of a 3-parameter nonlinear
    fit on 5 means undercovers (8 seeds understate a point's spread by √(7/8), and the E–α trade-off skews α); a
    300-ladder Monte Carlo of this setup (n_boot 300) gave 0.91 for both, and 40 ladders estimate a rate to ±0.05
    (one SE), so 0.8 holds with 2 SE of margin; a wrong level (50 %), or intervals that ignore the seed noise, fall
    far below it. The seeds are fixed: the outcome is reproducible, not a coin toss per run."""
    rng = np.random.default_rng(20240)
    l18 = E_TRUE + A_TRUE * 1e18**-ALPHA_TRUE
    n_ladders, alpha_in, l18_in = 40, 0, 0
    for i in range(n_ladders):
        fit = sf.bootstrap_power_law(_noisy_points(rng), n_boot=200, seed=i, at=(1e18,))
        alpha_in += fit.alpha[0] <= ALPHA_TRUE <= fit.alpha[1]
        l18_in += fit.predicted_interval[0][0] <= l18 <= fit.predicted_interval[0][1]
    assert alpha_in / n_ladders >= 0.8
    assert l18_in / n_ladders >= 0.8


def test_extrapolation_interval_at_1e18_is_wider_than_at_largest_measured_C():
    """At the largest measured C the law is pinned by that point's mean; three decades past it only the fitted
    curvature carries the loss, so its interval must be wider (here it is several times wider)."""
    fit = sf.bootstrap_power_law(_noisy_points(np.random.default_rng(5)), n_boot=400, seed=1, at=(LADDER[-1], 1e18))
    (lo15, hi15), (lo18, hi18) = fit.predicted_interval
    assert lo15 <= fit.predicted[0] <= hi15 and lo18 <= fit.predicted[1] <= hi18
    assert hi18 - lo18 > 2 * (hi15 - lo15) > 0


def test_fewer_than_three_distinct_flops_raise_value_error_naming_the_argument():
    with pytest.raises(ValueError, match="flops"):
        sf.fit_power_law([1e12, 1e13], [2.5, 2.2])
    with pytest.raises(ValueError, match="flops"):  # three values, two distinct C
        sf.fit_power_law([1e12, 1e13, 1e13], [2.5, 2.2, 2.21])
    with pytest.raises(ValueError, match="points"):
        sf.bootstrap_power_law({1e12: [2.5, 2.51], 1e13: [2.2, 2.21]}, seed=0)
    sf.fit_power_law([1e12, 1e13, 1e14], [2.5, 2.2, 2.05])  # three are enough


def test_replicates_are_resampled_within_each_point():
    """Seeds that agree exactly at every point leave nothing to resample within a point: every refit is the plain
    fit and each interval collapses onto it. Resampling across points (pooled) would mix the points' losses."""
    c = np.logspace(12, 15, 4)
    law = sf.PowerLaw(E_TRUE, A_TRUE, ALPHA_TRUE)
    fit = sf.bootstrap_power_law({float(k): [law.predict(k)] * 3 for k in c}, n_boot=50, seed=0, at=(1e18,))
    assert fit.n_failed == 0
    assert fit.alpha == pytest.approx((fit.estimate.alpha,) * 2, rel=1e-9)
    assert fit.predicted_interval[0] == pytest.approx((fit.predicted[0],) * 2, rel=1e-9)


def test_loss_that_does_not_fall_with_C_raises_fit_failed():
    with pytest.raises(sf.FitFailed, match="does not fall"):
        sf.fit_power_law([1e12, 1e13, 1e14], [2.0, 2.1, 2.2])


def test_failed_bootstrap_fits_are_counted_and_more_than_10pct_refused(monkeypatch: pytest.MonkeyPatch):
    """Refits made to fail on schedule: 1 in 20 (5 %) are dropped and counted; 1 in 5 (20 %) refuse the intervals."""
    fit_once = sf._fit
    points = _noisy_points(np.random.default_rng(9))

    def failing_every(k: int):
        calls = iter(range(10**6))

        def fit(x: np.ndarray, y: np.ndarray) -> sf.PowerLaw:
            if next(calls) % k == k - 1:  # the first call is the plain fit: it never fails here
                raise sf.FitFailed("scheduled")
            return fit_once(x, y)
        return fit

    monkeypatch.setattr(sf, "_fit", failing_every(20))
    assert sf.bootstrap_power_law(points, n_boot=200, seed=0).n_failed == 10
    monkeypatch.setattr(sf, "_fit", failing_every(5))
    with pytest.raises(sf.FitFailed, match="40 of 200 bootstrap fits failed"):
        sf.bootstrap_power_law(points, n_boot=200, seed=0)


def test_same_seed_gives_identical_results_in_any_mapping_order():
    points = _noisy_points(np.random.default_rng(11))
    first = sf.bootstrap_power_law(points, n_boot=100, seed=3, at=(1e18,))
    assert sf.bootstrap_power_law(dict(reversed(list(points.items()))), n_boot=100, seed=3, at=(1e18,)) == first
    assert sf.bootstrap_power_law(points, n_boot=100, seed=4, at=(1e18,)) != first  # the seed is used


def _ladder_data(shift: float, noise: float, seed: int) -> dict[float, list[float]]:
    rng = np.random.default_rng(seed)
    law = sf.PowerLaw(E=1.5, A=2.0e3, alpha=0.25)
    return {c: list(law.predict(c) + shift + noise * rng.standard_normal(6)) for c in (1e12, 1e13, 1e14, 1e15)}


def test_delta_at_an_extrapolated_compute_is_the_shift_between_two_parallel_laws():
    """An arm lying 0.02 below the baseline at every point (the same noise draws: paired) fits the same law with E
    lower by 0.02: Δ at 1e18 is -0.02 and its paired interval collapses onto it (the resampled pairs move together;
    1e-6 is the solver's tolerance carried to the prediction)."""
    from dormouse.ab.study.scaling_fit import bootstrap_delta_at

    base = _ladder_data(0.0, 0.01, seed=4)
    arm = {c: [v - 0.02 for v in vs] for c, vs in base.items()}
    out = bootstrap_delta_at(arm, base, at=[1e18], n_boot=200, seed=1)
    assert out.delta[0] == pytest.approx(-0.02, abs=1e-6)
    assert out.interval[0][0] == pytest.approx(-0.02, abs=1e-5) and out.interval[0][1] == pytest.approx(-0.02, abs=1e-5)


def test_delta_at_resamples_the_pairs_together():
    """Unpaired resampling of two arms with independent seed noise widens the interval; the paired one keeps the
    shared part out: with an arm whose noise is the baseline's plus a small own part, the paired interval is narrower
    than the baseline's own extrapolation interval."""
    from dormouse.ab.study.scaling_fit import bootstrap_delta_at

    base = _ladder_data(0.0, 0.02, seed=7)
    rng = np.random.default_rng(8)
    arm = {c: [v - 0.01 + 0.002 * rng.standard_normal() for v in vs] for c, vs in base.items()}
    paired = bootstrap_delta_at(arm, base, at=[1e18], n_boot=300, seed=2)
    alone = sf.bootstrap_power_law(base, n_boot=300, seed=2, at=[1e18])
    width = paired.interval[0][1] - paired.interval[0][0]
    assert width < 0.5 * (alone.predicted_interval[0][1] - alone.predicted_interval[0][0])
