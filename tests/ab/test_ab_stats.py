"""The A/B statistics on inputs whose answers are known by hand."""

from __future__ import annotations

import pytest

from dormouse.ab.rule import stats


def test_one_value_has_no_spread() -> None:
    assert stats.sd([0.5]) is None
    assert stats.prob_improvement([0.5]) is not None and stats.hodges_lehmann([0.5]) is not None


# Each verdict's boundary, one comparison at a time: the rule's inequalities are >= delta (size), < alpha
# (Holm), < 0 / > 0 strictly (side), and the open interval (-delta, +delta) (tie).


# ---- protocol v2: reported beside the verdict ------------------------------------------------------------

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
    """Oracle: the estimate by brute force over runs, the interval by scipy's exact signed-rank test: a
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
