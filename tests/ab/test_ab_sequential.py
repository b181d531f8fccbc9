"""Protocol v2's decision rule (dormouse/ab/rule/sequential.py): hand-checkable cases against scipy/statsmodels
computed here from the equations (independent oracles), the contract of ``decide``, and the rule's error
rates by Monte Carlo (each gate's perturbation is in tests/falsification/perturbations_sequential.py).

Monte-Carlo bound: a rate estimated from n_sim independent comparisons has standard error
√(p(1 − p)/n_sim); a rate whose true value is ≤ α is accepted up to α + 3·√(α(1 − α)/n_sim) (one-sided,
a false red at ~1.3e-3 per assertion; the seeds are fixed, so a run is reproducible).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from dormouse.ab.rule import sequential as sq

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
    # an undecided arm with no new replicates (its runs failed) keeps its earlier decision, and its place
    third = sq.decide(design, 1, {}, decided={"b": first["b"]})
    assert third == {"b": first["b"]}


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


# ---- the procedure's error rates, by Monte Carlo -----------------------------------------------------

SCHEDULES = [(5,), (3, 6, 9), (4, 8, 12, 16, 20)]
ARM_COUNTS = [1, 3, 5]
N_SIM = 60_000  # comparisons per case (per arm where arms are pooled); se of a rate near 0.05: 0.0009


@pytest.mark.parametrize("looks", SCHEDULES)
@pytest.mark.parametrize("n_arms", ARM_COUNTS)
def test_better_or_worse_at_no_effect_is_at_most_alpha(looks, n_arms):
    """Family-wise: P(any arm better or worse | every Δ = 0) ≤ α. Least favourable case: a SESOI far below
    the spread, so no arm stops early as a tie (a tie stop only lowers the rate)."""
    design = sq.Design(ALPHA, 0.001, looks, n_arms)
    res = sq.simulate(design, [0.0] * n_arms, 1.0, N_SIM, seed=101 + 7 * n_arms + len(looks))
    bound = _mc_bound(ALPHA, N_SIM)
    rate = res.p_any_better_or_worse
    assert rate <= bound, f"P(better or worse | Δ=0) deviation={rate:.4f} bound={bound:.4f} looks={looks} m={n_arms}"


@pytest.mark.parametrize("looks", SCHEDULES)
@pytest.mark.parametrize("n_arms", ARM_COUNTS)
@pytest.mark.parametrize("sd_over_sesoi", [1.0, 1.3])
def test_tie_at_the_sesoi_is_at_most_alpha(looks, n_arms, sd_over_sesoi):
    """Per arm: P(tie | |Δ| = SESOI) ≤ α, pooled over the arms (simulated independent, so the pool holds
    n_sim·m comparisons). The spreads are where the shipped rule's tie error peaks (sd ≈ 1–1.3 SESOI: a
    smaller spread makes the effect significant first, a larger one makes equivalence unreachable)."""
    sesoi = 0.02
    n_sim = N_SIM // n_arms
    deltas = [sesoi if a % 2 == 0 else -sesoi for a in range(n_arms)]
    design = sq.Design(ALPHA, sesoi, looks, n_arms)
    res = sq.simulate(design, deltas, sd_over_sesoi * sesoi, n_sim, seed=202 + 7 * n_arms + len(looks))
    rate = float(np.mean(res.p_tie))
    bound = _mc_bound(ALPHA, n_sim * n_arms)
    assert rate <= bound, f"P(tie | |Δ|=SESOI) deviation={rate:.4f} bound={bound:.4f} looks={looks} m={n_arms}"


def test_power_rises_with_replicates_and_matches_the_noncentral_t():
    """At Δ = −SESOI, P(better) grows with the maximum replicates; with one look it is the noncentral-t
    power of the Bonferroni t-test (scipy's nct, computed here: an independent oracle of the simulation)."""
    sesoi, sd, m = 0.02, 0.03, 3
    powers = []
    for n in (4, 8, 16):
        res = sq.simulate(sq.Design(ALPHA, sesoi, (n,), m), [-sesoi] * m, sd, N_SIM // m, seed=303 + n)
        crit = sps.t.isf(ALPHA / (2 * m), n - 1)
        oracle = sps.nct.cdf(-crit, n - 1, -sesoi * math.sqrt(n) / sd)
        got = float(np.mean(res.p_better))
        tol = 4 * math.sqrt(oracle * (1 - oracle) / N_SIM)
        assert abs(got - oracle) <= tol, f"power deviation={abs(got - oracle):.4f} bound={tol:.4f} n={n}"
        powers.append(got)
    seq = sq.simulate(sq.Design(ALPHA, sesoi, (4, 8, 12, 16), m), [-sesoi] * m, sd, N_SIM // m, seed=404)
    assert powers[0] < powers[1] < powers[2], powers
    assert powers[1] < float(np.mean(seq.p_better)) < powers[2] + 0.02  # spending costs a little power
    assert float(np.mean(seq.expected_n)) < 16  # and decided arms stop


def test_simulate_runs_the_rule_decide_applies():
    """Replaying simulate's own draws through decide, look by look with decided arms stopping, gives the
    same counts: the simulation is the procedure, not a copy of it."""
    design = sq.Design(ALPHA, 0.02, (3, 6, 9), 2)
    deltas, sd, n_sim, seed = [-0.03, 0.01], 0.02, 300, 5
    res = sq.simulate(design, deltas, sd, n_sim, seed)
    rng = np.random.Generator(np.random.PCG64(seed))
    x = np.asarray(deltas)[:, None, None] + sd * rng.standard_normal((2, n_sim, design.n_max))
    counts = {v: [0, 0] for v in sq.VERDICTS}
    n_used = [0, 0]
    for i in range(n_sim):
        decided: dict[str, sq.ArmDecision] = {}
        for k, n in enumerate(design.looks):
            todo = {f"a{a}": list(x[a, i, :n]) for a in range(2) if f"a{a}" not in decided}
            decided = {a: d for a, d in sq.decide(design, k, todo, decided).items() if d.final}
        for a in range(2):
            d = decided[f"a{a}"]
            counts[d.verdict][a] += 1
            n_used[a] += d.n
    for name, p in (("better", res.p_better), ("worse", res.p_worse), ("tie", res.p_tie),
                    ("undecided", res.p_undecided)):
        assert [round(v * n_sim) for v in p] == counts[name], name
    assert [e * n_sim for e in res.expected_n] == pytest.approx(n_used)


def test_design_card_reports_the_simulated_rates():
    design = sq.Design(ALPHA, 0.03, (4, 8), 2)
    card = sq.design_card(design, 0.03, -0.06, n_sim=4000, seed=9)
    assert card.type_i <= _mc_bound(ALPHA, 4000)
    assert card.power_expected > card.power_sesoi > card.type_i / 2
    assert card.tie_at_sesoi <= _mc_bound(ALPHA, 4000 * 2)
    assert card.max_n == 8 and set(card.expected_n) == {"Δ=0", "Δ=+SESOI", "Δ=−SESOI", "Δ=-0.06"}
    import json

    assert json.loads(json.dumps(card.to_dict()))["design"]["looks"] == [4, 8]
    text = card.to_text()
    assert "type-I error" in text and "look 2: n   8" in text


def test_the_card_prints_one_power_line_when_the_expected_effect_is_the_sesoi():
    """Expected effect −SESOI: one scenario, one power (two simulations of the same effect would disagree in
    the third digit); another expected effect keeps both lines."""
    design = sq.Design(ALPHA, 0.03, (4, 8), 2)
    same = sq.design_card(design, 0.03, -0.03, n_sim=1000, seed=9)
    assert same.power_expected == same.power_sesoi
    assert set(same.expected_n) == {"Δ=0", "Δ=+SESOI", "Δ=−SESOI"}
    power = [ln for ln in same.to_text().splitlines() if "power" in ln]
    assert power == [f"  power at the SESOI, which is the expected effect, P(better | Δ=−0.03): {same.power_sesoi:.3f}"]
    other = sq.design_card(design, 0.03, -0.06, n_sim=1000, seed=9)
    assert [ln.split(":")[0] for ln in other.to_text().splitlines() if "power" in ln] == [
        "  power at the SESOI P(better | Δ=−0.03)", "  power at the expected effect (Δ=-0.06)"]


@pytest.mark.parametrize("level, printed", [
    (0.95, "95 %"), (0.997866, "99.79 %"), (0.99966, "99.966 %"), (0.975, "97.5 %"), (0.5, "50 %"),
    (0.999, "99.9 %"), (1.0, "100 %")])
def test_a_confidence_level_prints_its_complement_to_two_significant_figures(level: float, printed: str):
    assert sq.percent(level) == printed


def test_a_looks_sentence_prints_its_confidence_level_with_few_digits():
    """The per-look interval's level (1 − the look's p, e.g. 0.997866...) is printed by sequential.percent,
    never with all six significant digits ("99.7866 %")."""
    design = sq.Design(ALPHA, 0.03, (4, 8), 2)
    d = sq.decide(design, 0, {"a": [-0.02, -0.01, -0.03, -0.02]})["a"]
    text = d.sentence("arm", "base")
    assert f"this look's {sq.percent(1 - d.boundary.sup_p)} confidence interval" in text
    level = text.split("this look's ")[1].split(" %")[0]
    assert len(level.split(".")[-1]) <= 4 and len(level) < 8, level


def test_a_significant_effect_inside_the_sesoi_is_better_or_worse_flagged_never_tie():
    design = sq.Design(ALPHA, 0.03, (5,), 3)
    small = [-0.011, -0.012, -0.010, -0.013, -0.0115]  # significant, and shown within ±0.03
    for sign, verdict in ((1, sq.BETTER), (-1, sq.WORSE)):
        d = sq.decide(design, 0, {"a": [sign * v for v in small]})["a"]
        assert d.verdict == verdict and d.smaller_than_sesoi
        assert -0.03 < d.eq_interval[0] and d.eq_interval[1] < 0.03
        assert "smaller than the SESOI 0.03" in d.sentence("arm", "base")
    big = sq.decide(design, 0, {"a": [-0.12, -0.08, -0.2, -0.14, -0.13]})["a"]
    assert big.verdict == sq.BETTER and not big.smaller_than_sesoi
    assert "SESOI" not in big.sentence("arm", "base")


@pytest.mark.parametrize("xs", [[-0.12, -0.08, -0.2, -0.14, -0.13], [0.12, 0.08, 0.2, 0.14, 0.13],
                                [-0.05, 0.02, -0.1, -0.03, -0.07], [0.001, -0.002, 0.003, 0.0, -0.001]])
def test_each_sentence_states_the_numbers_its_verdict_compared(xs):
    d = sq.decide(sq.Design(ALPHA, 0.03, (5,), 3), 0, {"a": xs})["a"]
    text = d.sentence("arm", "base")
    interval = f"[{d.interval[0]:+.4f}, {d.interval[1]:+.4f}]"
    eq = f"[{d.eq_interval[0]:+.4f}, {d.eq_interval[1]:+.4f}]"
    if d.verdict == sq.BETTER:
        assert interval in text and "lies below 0" in text and d.interval[1] < 0
    elif d.verdict == sq.WORSE:
        assert interval in text and "lies above 0" in text and d.interval[0] > 0
    elif d.verdict == sq.TIE:
        assert eq in text and "lies inside (−0.03, +0.03)" in text
    else:
        assert interval in text and "contains 0" in text and "does not lie inside" in text
        assert d.interval[0] <= 0 <= d.interval[1]
    assert "last registered look" in text or d.verdict != sq.UNDECIDED


def test_a_card_from_a_published_comparison_reads_its_compared_arms_spreads():
    """`dormouse ab size` (dormouse/ab/lifecycle/size.py): the paired sds of the compared arms only, recomputed
    here from the published differences, plus an unknown arm at the largest of them."""
    import json
    from pathlib import Path

    from dormouse.ab.lifecycle import size

    repo = Path(__file__).resolve().parents[2]
    results = json.loads((repo / "docs" / "results" / "residual_cpu" / "results.json").read_text())
    sds = size.pilot_sds(results)
    assert set(sds) == {"gr", "attnres_full", "attnres_block"}  # the baseline and the A/A arm are not arms
    assert sds["gr"] == pytest.approx(float(np.std(results["arms"]["gr"]["diffs"], ddof=1)), rel=1e-12)
    card = size.card(sds, (4, 8, 12), 0.03, -0.05, extra_sd=["max"], n_sim=2000)
    assert card.design.n_arms == 4 and card.max_n == 12
    assert card.pilot_sd[0] == max(sds.values())  # an arm the comparison did not have: the largest sd
    assert card.type_i <= _mc_bound(ALPHA, 2000)
