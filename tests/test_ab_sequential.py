"""Protocol v2's decision rule (dormouse/ab/sequential.py): hand-checkable cases against scipy/statsmodels
computed here from the equations (independent oracles), the contract of ``decide``, and the rule's error
rates by Monte Carlo (issue 22, item 5; each gate's perturbation is in scripts/perturbations_sequential.py).

Monte-Carlo bound: a rate estimated from n_sim independent comparisons has standard error
√(p(1 − p)/n_sim); a rate whose true value is ≤ α is accepted up to α + 3·√(α(1 − α)/n_sim) (one-sided,
a false red at ~1.3e-3 per assertion; the seeds are fixed, so a run is reproducible).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from dormouse.ab import sequential as sq

ALPHA = 0.05


def _mc_bound(alpha: float, n_sim: int) -> float:
    return alpha + 3.0 * math.sqrt(alpha * (1 - alpha) / n_sim)


def _oracle_spent(t: float, level: float) -> float:
    """Lan–DeMets O'Brien–Fleming-type spending written from its equation: 2 − 2Φ(Φ⁻¹(1 − a/2)/√t)."""
    return 2.0 - 2.0 * sps.norm.cdf(sps.norm.ppf(1.0 - level / 2.0) / math.sqrt(t))


# ---- the design's validation -------------------------------------------------------------------------

def test_design_problems_name_each_bad_field():
    assert sq.Design(0.05, 0.02, (3, 6, 9), 3).problems() == []
    bad = sq.Design(0.7, -1.0, (3, 3), 0).problems()
    assert [line.split(":")[0] for line in bad] == ["alpha", "sesoi", "looks", "n_arms"]
    assert sq.Design(0.05, 0.02, (1, 4), 1).problems()[0].startswith("looks:")
    with pytest.raises(ValueError, match="sesoi"):
        sq.decide(sq.Design(0.05, 0.0, (3,), 1), 0, {"a": [1.0, 2.0, 3.0]})


# ---- hand-checkable cases ------------------------------------------------------------------------------

def test_one_look_is_the_bonferroni_t_test_and_the_tost():
    """With a single look no α is split across looks: better/worse is scipy's one-sample t-test at α/m, and
    tie is statsmodels' TOST at α (both computed here, not by the module)."""
    from statsmodels.stats.weightstats import DescrStatsW

    m, sesoi = 3, 0.05
    design = sq.Design(ALPHA, sesoi, (6,), m)
    rng = np.random.default_rng(7)
    seen = set()
    for _ in range(300):
        x = rng.normal(rng.uniform(-0.08, 0.08), rng.uniform(0.005, 0.06), 6)
        d = sq.decide(design, 0, {"a": list(x)})["a"]
        res = sps.ttest_1samp(x, 0.0)
        ci = res.confidence_interval(confidence_level=1 - ALPHA / m)
        assert d.interval == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)
        p_tost = DescrStatsW(x).ttost_mean(-sesoi, sesoi)[0]
        if res.pvalue < ALPHA / m:
            want = sq.BETTER if x.mean() < 0 else sq.WORSE
        elif p_tost < ALPHA:
            want = sq.TIE
        else:
            want = sq.UNDECIDED
        assert d.verdict == want, (x, res.pvalue, p_tost)
        assert d.p == pytest.approx(res.pvalue, rel=1e-9)
        assert d.p_tost == pytest.approx(p_tost, rel=1e-9)
        seen.add(d.verdict)
    assert seen == set(sq.VERDICTS)


def test_boundary_table_spends_alpha_by_the_obf_function():
    """Each look's nominal p is the increment of α*(t), at α/(2m) per direction for superiority and α for
    each TOST test; the critical t is Student t at n − 1 df with that tail (scipy, computed here)."""
    m, looks = 5, (4, 8, 12)
    rows = sq.boundaries(sq.Design(ALPHA, 0.02, looks, m))
    prev_sup = prev_eq = 0.0
    for row, n in zip(rows, looks):
        t = n / looks[-1]
        sup, eq = _oracle_spent(t, ALPHA / (2 * m)), _oracle_spent(t, ALPHA)
        assert row.sup_p == pytest.approx(2 * (sup - prev_sup), rel=1e-9)
        assert row.eq_p == pytest.approx(eq - prev_eq, rel=1e-9)
        assert row.sup_t == pytest.approx(sps.t.ppf(1 - (sup - prev_sup), n - 1), rel=1e-9)
        assert row.eq_t == pytest.approx(sps.t.ppf(1 - (eq - prev_eq), n - 1), rel=1e-9)
        prev_sup, prev_eq = sup, eq
    assert rows[-1].sup_spent == pytest.approx(ALPHA / m, rel=1e-12)
    assert rows[-1].eq_spent == pytest.approx(ALPHA, rel=1e-12)
    assert sum(r.sup_p for r in rows) * m == pytest.approx(ALPHA, rel=1e-12)
    assert rows[0].sup_p < ALPHA / m / 100  # O'Brien–Fleming: almost nothing spent early


# ---- the contract of decide ----------------------------------------------------------------------------

def test_decide_refuses_a_length_that_is_not_the_looks():
    design = sq.Design(ALPHA, 0.02, (3, 6), 2)
    with pytest.raises(ValueError, match=r"diffs\['a'\].*needs 3"):
        sq.decide(design, 0, {"a": [0.1, 0.2]})
    with pytest.raises(ValueError, match="look"):
        sq.decide(design, 2, {"a": [0.1, 0.2, 0.3]})
    with pytest.raises(ValueError, match="n_arms"):
        sq.decide(design, 0, {"a": [0.1] * 3, "b": [0.1] * 3, "c": [0.1] * 3})


def test_decided_arms_keep_their_verdict_and_stop():
    design = sq.Design(ALPHA, 0.02, (3, 6), 2)
    first = sq.decide(design, 0, {"a": [-0.50, -0.51, -0.49], "b": [0.0, 0.01, -0.01]})
    assert first["a"].verdict == sq.BETTER and first["b"].verdict == sq.UNDECIDED
    second = sq.decide(design, 1, {"b": [0.0, 0.01, -0.01, 0.02, 0.0, -0.02]}, decided=first)
    assert second["a"] is first["a"]
    assert second["b"].look == 1 and second["b"].n == 6


def test_a_failed_arm_stays_in_the_family():
    """Deciding one arm while a registered arm has no runs uses the registered n_arms: the present arm gets
    α/n_arms, not the whole α (the boundary is the one for all arms present)."""
    design = sq.Design(ALPHA, 0.02, (5,), 3)
    x = [-0.031, -0.012, -0.025, -0.004, -0.022]
    alone = sq.decide(design, 0, {"a": x})["a"]
    with_all = sq.decide(design, 0, {"a": x, "b": x, "c": x})["a"]
    assert alone.interval == with_all.interval
    ci = sps.ttest_1samp(x, 0.0).confidence_interval(confidence_level=1 - ALPHA / 3)
    assert alone.interval == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert sps.ttest_1samp(x, 0.0).pvalue < ALPHA  # significant at the whole α ...
    assert alone.verdict == sq.UNDECIDED  # ... but not at α/3: the failed arms keep their share


def test_worse_needs_the_significance_better_needs():
    """The rule is symmetric: negating every difference swaps better and worse and nothing else."""
    design = sq.Design(ALPHA, 0.02, (4, 8), 2)
    rng = np.random.default_rng(3)
    for _ in range(200):
        x = rng.normal(rng.uniform(-0.05, 0.05), 0.03, 4)
        d = sq.decide(design, 0, {"a": list(x)})["a"]
        e = sq.decide(design, 0, {"a": list(-x)})["a"]
        swap = {sq.BETTER: sq.WORSE, sq.WORSE: sq.BETTER}
        assert e.verdict == swap.get(d.verdict, d.verdict)
        assert e.interval == pytest.approx((-d.interval[1], -d.interval[0]))
