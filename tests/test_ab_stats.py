"""The A/B statistics on inputs whose answers are known by hand."""

from __future__ import annotations

import math

import pytest

from dormouse.ab import stats


def test_t_interval_matches_the_hand_computed_value() -> None:
    # x = 1..5: mean 3, sd = sqrt(2.5), se = sqrt(2.5)/sqrt(5) = sqrt(0.5); t_{0.975, 4} = 2.776445 (tables).
    lo, hi = stats.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.7764451051977987 * math.sqrt(0.5)
    assert lo == pytest.approx(3 - half, abs=1e-9) and hi == pytest.approx(3 + half, abs=1e-9)
    assert (lo, hi) == pytest.approx((1.0367568, 4.9632432), abs=1e-6)


def test_t_interval_three_seeds() -> None:
    # Paired differences of 3 seeds: mean -0.02, sd 0.01; t_{0.975, 2} = 4.302653.
    lo, hi = stats.t_interval([-0.03, -0.02, -0.01])
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert (lo, hi) == pytest.approx((-0.02 - half, -0.02 + half), abs=1e-12)


def test_one_value_has_no_interval_no_p_no_sd() -> None:
    assert stats.t_interval([0.5]) is None
    assert stats.bootstrap_interval([0.5]) is None
    assert stats.t_test_p([0.5]) is None
    assert stats.sd([0.5]) is None
    assert stats.verdict(-0.5, None, 0.01) == stats.UNDECIDED  # one seed settles nothing


def test_t_test_p_matches_the_t_distribution() -> None:
    # x = 1..5 against 0: t = 3 / sqrt(0.5) = 4.2426; two-sided p = 2 * sf(t, 4) = 0.013236.
    assert stats.t_test_p([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(0.0132356, abs=1e-6)
    assert stats.t_test_p([0.0, 0.0, 0.0]) == 1.0  # no spread, no effect
    assert stats.t_test_p([0.1, 0.1]) == 0.0  # no spread, every seed moved the same way


def test_holm_on_the_textbook_example() -> None:
    # m = 4, sorted p: 0.005, 0.01, 0.03, 0.04
    # -> 4*0.005 = 0.02, 3*0.01 = 0.03, 2*0.03 = 0.06, max(0.06, 1*0.04) = 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1 (2*0.5, then max(1, 0.9))
    assert stats.holm([None, 0.02, 0.04]) == [None, pytest.approx(0.04), pytest.approx(0.04)]
    assert stats.holm([]) == []


def test_bootstrap_is_reproducible_and_brackets_the_mean() -> None:
    xs = [-0.031, -0.012, -0.024, -0.018]
    a = stats.bootstrap_interval(xs)
    assert a == stats.bootstrap_interval(xs)  # fixed seed
    lo, hi = a
    assert min(xs) <= lo < sum(xs) / len(xs) < hi <= max(xs)
    ys = [0.1 * i + 0.013 * i * i for i in range(10)]  # a sample whose resampled means rarely tie
    assert stats.bootstrap_interval(ys, resamples=500, seed=1) != stats.bootstrap_interval(ys, resamples=500)


def test_noise_floor_takes_the_larger_of_minimum_and_twice_the_aa_sd() -> None:
    big = stats.noise_floor(0.01, [0.02, -0.02, 0.0])  # sd = 0.02 -> 2 sd = 0.04
    assert big.delta == pytest.approx(0.04) and big.source == "2·sd(A/A)"
    small = stats.noise_floor(0.01, [0.001, -0.001, 0.0])
    assert small.delta == 0.01 and small.source == "registered minimum"
    assert stats.noise_floor(0.01, None).delta == 0.01
    assert stats.noise_floor(0.01, [0.3]).aa_sd is None  # one A/A seed: no spread


@pytest.mark.parametrize(("mean", "interval", "delta", "p", "expected"), [
    (-0.05, (-0.08, -0.02), 0.01, None, stats.BETTER),
    (0.05, (0.02, 0.08), 0.01, None, stats.WORSE),
    (-0.05, (-0.11, 0.01), 0.01, None, stats.UNDECIDED),  # contains 0 and reaches beyond -delta
    (-0.005, (-0.008, -0.002), 0.01, None, stats.TIE),  # significant but shown smaller than delta
    (-0.008, (-0.015, -0.001), 0.01, None, stats.UNDECIDED),  # below 0, small mean, not shown small
    (0.001, (-0.004, 0.006), 0.01, None, stats.TIE),  # inside (-delta, +delta)
    (-0.05, (-0.08, -0.02), 0.01, 0.2, stats.UNDECIDED),  # not significant after Holm: not a tie either
    (-0.05, (-0.08, -0.02), 0.01, 0.01, stats.BETTER),
])
def test_verdict_rules(mean: float, interval: tuple[float, float], delta: float, p: float | None,
                       expected: str) -> None:
    got = stats.verdict(mean, interval, delta, p)
    assert got == expected, f"verdict {got!r} for mean {mean}, interval {interval}, delta {delta}, p {p}; " \
                            f"expected {expected!r} (deviation={got} bound={expected})"


# Each verdict's boundary, one comparison at a time: the rule's inequalities are >= delta (size), < alpha
# (Holm), < 0 / > 0 strictly (side), and the open interval (-delta, +delta) (tie).
@pytest.mark.parametrize(("mean", "interval", "p", "expected"), [
    (-0.01, (-0.02, -0.001), None, stats.BETTER),  # |mean| == delta: big enough
    (-0.0099, (-0.02, -0.001), None, stats.UNDECIDED),  # just under delta, interval reaches past -delta
    (-0.05, (-0.08, -0.02), 0.05, stats.UNDECIDED),  # Holm p == alpha: not significant
    (-0.05, (-0.08, -0.02), 0.0499, stats.BETTER),
    (-0.05, (-0.10, 0.0), None, stats.UNDECIDED),  # hi == 0: not below 0
    (0.05, (0.0, 0.10), None, stats.UNDECIDED),  # lo == 0: not above 0
    (0.0, (-0.01, 0.005), None, stats.UNDECIDED),  # lo == -delta: not inside the open band
    (0.0, (-0.0099, 0.005), None, stats.TIE),
    (0.0, (-0.005, 0.01), None, stats.UNDECIDED),  # hi == +delta
    (0.0, (-0.005, 0.0099), None, stats.TIE),
])
def test_verdict_boundaries(mean: float, interval: tuple[float, float], p: float | None, expected: str) -> None:
    got = stats.verdict(mean, interval, 0.01, p, 0.05)
    assert got == expected, f"verdict {got!r} at mean {mean}, interval {interval}, p {p} (delta 0.01); " \
                            f"expected {expected!r} (deviation={got} bound={expected})"


# ---- protocol v2: reported beside the verdict (issue 22, item 6) ----------------------------------------

def test_probability_of_improvement_counts_replicates_below_zero_with_clopper_pearson() -> None:
    import numpy as np
    from scipy import stats as sps

    got = stats.prob_improvement([-0.02, -0.01, 0.0, 0.03, -0.005])
    assert (got.k, got.n, got.estimate) == (3, 5, 0.6)  # an exact 0 is no improvement
    # Clopper–Pearson from the beta quantiles (the equation, not binomtest): Beta(k, n−k+1), Beta(k+1, n−k).
    lo, hi = sps.beta.ppf(0.025, 3, 3), sps.beta.ppf(0.975, 4, 2)
    assert got.interval == pytest.approx((lo, hi), rel=1e-9)
    assert stats.prob_improvement([]) is None
    with pytest.raises(ValueError, match="diffs"):
        stats.prob_improvement([0.1, float(np.nan)])


def test_bad_run_rate_counts_runs_above_the_ceiling_and_diverged_runs() -> None:
    got = stats.bad_run_rate([2.55, 2.61, float("nan"), 2.60, float("inf")], ceiling=2.6)
    assert (got.k, got.n) == (3, 5)  # 2.61, nan, inf; 2.60 is at the ceiling, not above it
    assert stats.bad_run_rate([], 2.6) is None


def test_hodges_lehmann_is_the_median_of_walsh_averages_and_inverts_the_exact_wilcoxon_test() -> None:
    """Oracle: the estimate by brute force over pairs, the interval by scipy's exact signed-rank test: a
    shift just inside either end is not rejected at 1 − confidence, one just outside is."""
    import itertools

    import numpy as np
    from scipy import stats as sps

    x = np.array([-0.05, -0.031, 0.012, -0.044, -0.02, -0.061, 0.004, -0.027])
    walsh = sorted((a + b) / 2 for a, b in itertools.combinations_with_replacement(x, 2))
    got = stats.hodges_lehmann(x)
    assert got.estimate == pytest.approx(float(np.median(walsh)), abs=1e-15)
    lo, hi = got.interval
    k = walsh.index(lo)
    assert walsh[len(walsh) - 1 - k] == hi  # symmetric in rank
    tail = 1 - got.confidence
    assert got.confidence >= 0.95
    inside = [(walsh[k] + walsh[k + 1]) / 2, (walsh[-k - 1] + walsh[-k - 2]) / 2]
    outside = [(walsh[k] + walsh[k - 1]) / 2, (walsh[-k - 1] + walsh[-k]) / 2]
    for mu in inside:
        assert sps.wilcoxon(x - mu, method="exact").pvalue > tail * (1 - 1e-9)
        assert sps.wilcoxon(x - mu, method="exact").pvalue >= 0.05
    for mu in outside:
        assert sps.wilcoxon(x - mu, method="exact").pvalue < 0.05
    # n = 5: the smallest two-sided level the signed-rank test reaches is 2/32 > 0.05: no 95 % interval.
    assert stats.hodges_lehmann(x[:5]).interval is None
    assert list(stats._signed_rank_counts(3)) == [1, 1, 1, 2, 1, 1, 1]  # T over the 8 sign patterns of {1,2,3}


def test_aa_calibration_can_fail_and_names_the_arm() -> None:
    aa = [0.01, -0.02, 0.03, 0.0, -0.01]
    same = [0.012, -0.02, 0.025, 0.001, -0.011]
    wide = [0.1, -0.2, 0.3, 0.0, -0.1]  # ten times the A/A spread
    ok = stats.aa_calibration(aa, {"b": same})
    assert ok.agrees and ok.disagree == ()
    bad = stats.aa_calibration(aa, {"a": wide, "b": same})
    assert not bad.agrees and bad.disagree == ("a",)
    assert "does not agree" in bad.sentence() and "a" in bad.sentence()
    assert stats.aa_calibration([0.1], {"a": wide}) is None  # one A/A replicate: no spread to compare


def test_aa_calibration_false_alarms_at_most_its_level_and_detects_a_tripled_spread() -> None:
    """By simulation (rule 8): with every spread equal, the check fails in ≤ level of comparisons (+3 se);
    with one arm's sd tripled it fails in most comparisons at 10 replicates."""
    import numpy as np

    rng = np.random.default_rng(11)
    n_sim, level = 2000, stats.CALIBRATION_LEVEL
    false = sum(not stats.aa_calibration(rng.normal(0, 1, 6), {a: rng.normal(0, 1, 6) for a in "abcd"}).agrees
                for _ in range(n_sim)) / n_sim
    bound = level + 3 * math.sqrt(level * (1 - level) / n_sim)
    assert false <= bound, f"calibration false alarms deviation={false:.4f} bound={bound:.4f}"
    hits = sum(not stats.aa_calibration(rng.normal(0, 1, 10), {"a": rng.normal(0, 3, 10)}).agrees
               for _ in range(500)) / 500
    assert hits > 0.5, f"calibration power deviation={hits:.3f} bound=0.5"
