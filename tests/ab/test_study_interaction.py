"""A registered study's primary rule, the arm × axis interaction (dormouse/ab/study/interaction.py): hand-checkable
cases against scipy/statsmodels computed here (independent oracles), the contract (invalid cases, the design's
validation, JSON), and the whole study's error rates by Monte Carlo (each gate's perturbation is in
tests/falsification/perturbations_study_rule.py).

Monte-Carlo bound: a rate estimated from n_sim independent studies has standard error √(p(1 − p)/n_sim); a
rate whose true value is ≤ α is accepted up to α + 3·√(α(1 − α)/n_sim) (one-sided, a false red at ~1.3e-3 per
assertion; the seeds are fixed, so a run is reproducible).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from dormouse.ab.study import interaction as ia

ALPHA = 0.05
TAU = 0.02


def _mc_bound(alpha: float, n_sim: int) -> float:
    return alpha + 3.0 * math.sqrt(alpha * (1 - alpha) / n_sim)


# ---- the design's validation ---------------------------------------------------------------------------

def test_design_problems_name_each_bad_field():
    assert ia.InteractionDesign(ALPHA, TAU, (3, 6, 12), 4).problems() == []
    bad = ia.InteractionDesign(0.7, 0.0, (6, 3), 0).problems()
    assert [line.split(":")[0] for line in bad] == ["alpha", "smallest_change", "points", "n_arms"]
    assert ia.InteractionDesign(ALPHA, TAU, (4,), 1).problems()[0].startswith("points:")
    assert ia.InteractionDesign(ALPHA, TAU, (0, 4), 1).problems()[0].startswith("points:")
    assert ia.InteractionDesign(ALPHA, TAU, (2, math.nan), 1).problems()[0].startswith("points:")
    with pytest.raises(ValueError, match="smallest_change"):
        ia.decide_interaction(ia.InteractionDesign(ALPHA, -1.0, (2, 4), 1), [[0.0, 1.0], [0.0, 1.0]])


# ---- hand-checkable cases ------------------------------------------------------------------------------

def test_contrast_weights_are_the_polyfit_slope_times_the_log2_range():
    """Σ c_p·y_p equals numpy's least-squares slope of y on log2(value) times log2(last/first), for any y."""
    rng = np.random.default_rng(3)
    for points in [(2, 4), (3, 6, 12), (2, 3, 8, 16), (1.5, 2, 10)]:
        u = np.log2(points)
        c = ia.contrast_weights(points)
        for _ in range(20):
            y = rng.normal(size=len(points))
            assert float(c @ y) == pytest.approx(np.polyfit(u, y, 1)[0] * (u[-1] - u[0]), abs=1e-12)
    assert list(ia.contrast_weights((3, 6, 12))) == [-1.0, 0.0, 1.0]  # the middle point weighs exactly 0
    assert list(ia.contrast_weights((2, 4))) == [-1.0, 1.0]


def test_two_points_are_welchs_statistic_on_the_fewest_replicates_df():
    """With 2 points L = m_2 − m_1: its t is scipy's Welch statistic (ttest_ind, equal_var=False) and its TOST
    t's are statsmodels' (ttost_ind, usevar='unequal'), all computed here; the levels are those statistics on
    the conservative df min(n_1, n_2) − 1 (interval at 1 − α/n_arms, each TOST test at α)."""
    from statsmodels.stats.weightstats import ttost_ind

    m = 3
    design = ia.InteractionDesign(ALPHA, TAU, (2, 4), m)
    rng = np.random.default_rng(11)
    seen = set()
    for i in range(300):
        n1, n2 = (6, 6) if i % 2 else (int(rng.integers(3, 10)), int(rng.integers(3, 10)))
        x1 = rng.normal(0.0, rng.uniform(0.003, 0.02), n1)
        x2 = rng.normal(rng.uniform(-0.04, 0.04), rng.uniform(0.003, 0.02), n2)
        d = ia.decide_interaction(design, [list(x1), list(x2)])
        welch = sps.ttest_ind(x2, x1, equal_var=False)
        df = min(n1, n2) - 1
        est = x2.mean() - x1.mean()
        se = est / welch.statistic
        half = sps.t.isf(ALPHA / (2 * m), df) * se
        assert (d.estimate, d.se, d.df) == pytest.approx((est, se, df), rel=1e-9, abs=1e-15)
        assert d.interval == pytest.approx((est - half, est + half), rel=1e-9, abs=1e-12)
        p = 2 * sps.t.sf(abs(welch.statistic), df)
        assert d.p == pytest.approx(p, rel=1e-9, abs=1e-15)
        _, (t_lo, _, _), (t_hi, _, _) = ttost_ind(x2, x1, -TAU, TAU, usevar="unequal")
        p_tost = max(sps.t.sf(t_lo, df), sps.t.cdf(t_hi, df))
        assert d.p_tost == pytest.approx(p_tost, rel=1e-9, abs=1e-15)
        if p < ALPHA / m:
            want = ia.GROWS if est < 0 else ia.SHRINKS
        else:
            want = ia.FLAT if p_tost < ALPHA else ia.UNDECIDED
        assert d.verdict == want, (d.verdict, p, p_tost)
        seen.add(d.verdict)
    assert seen == {ia.GROWS, ia.SHRINKS, ia.FLAT, ia.UNDECIDED}


def test_the_df_is_welchs_lower_bound():
    """Welch–Satterthwaite's df (scipy's, on the same data) lies between min(n_p − 1) and Σ(n_p − 1): the rule's
    df is its lower end, never above it (the conservative choice; interaction._contrast says why)."""
    rng = np.random.default_rng(2)
    design = ia.InteractionDesign(ALPHA, TAU, (2, 4), 1)
    for _ in range(100):
        x1 = rng.normal(0, rng.uniform(0.001, 0.03), int(rng.integers(3, 12)))
        x2 = rng.normal(0, rng.uniform(0.001, 0.03), int(rng.integers(3, 12)))
        df = ia.decide_interaction(design, [x1, x2]).df
        assert df == min(x1.size, x2.size) - 1 <= sps.ttest_ind(x2, x1, equal_var=False).df + 1e-9


def test_three_points_weigh_the_middle_zero_and_report_the_curvature():
    """(3, 6, 12): L = m_12 − m_3 whatever the middle holds; the curvature m_6 − (m_3 + m_12)/2 is reported."""
    design = ia.InteractionDesign(ALPHA, TAU, (3, 6, 12), 1)
    a, b, c = [0.01, 0.02, 0.03], [5.0], [0.04, 0.05, 0.09]
    d = ia.decide_interaction(design, [a, b, c])  # one difference at the middle: not weighed, not invalid
    assert d.verdict != ia.INVALID
    assert d.estimate == pytest.approx(np.mean(c) - np.mean(a))
    assert [r.weight for r in d.points] == [-1.0, 0.0, 1.0]
    assert math.isnan(d.curvature)  # descriptive: needs a spread at every point
    d = ia.decide_interaction(design, [a, [0.0, 0.1], c])
    assert d.curvature == pytest.approx(0.05 - (np.mean(a) + np.mean(c)) / 2)


# ---- the contract --------------------------------------------------------------------------------------

def test_invalid_cases_are_refused_or_reported():
    design = ia.InteractionDesign(ALPHA, TAU, (2, 4), 2)
    short = ia.decide_interaction(design, [[0.01], [0.0, 0.02]])
    assert short.verdict == ia.INVALID and "fewer than 2" in short.reason and math.isnan(short.estimate)
    bad_point = ia.decide_interaction(design, [[0.0, 0.01], [0.0, 0.02]], point_invalid=True)
    assert bad_point.verdict == ia.INVALID and "invalid" in bad_point.reason
    with pytest.raises(ValueError, match="diffs_by_point"):
        ia.decide_interaction(design, [[0.0, 0.01]])
    with pytest.raises(ValueError, match="not finite"):
        ia.decide_interaction(design, [[0.0, math.nan], [0.0, 0.02]])
    out = ia.decide_all(design, {"a": [[0.0, 0.01], [0.0, 0.02]]}, invalid={"b"})
    assert out["b"].verdict == ia.INVALID and out["a"].verdict != ia.INVALID
    with pytest.raises(ValueError, match="n_arms"):
        ia.decide_all(design, {"a": [[0.0, 0.01]] * 2, "b": [[0.0, 0.01]] * 2, "c": [[0.0, 0.01]] * 2})


def test_a_failed_arm_stays_in_the_family():
    """The levels are the registered n_arms', never the arms present: one arm alone gets α/(2·n_arms)."""
    design = ia.InteractionDesign(ALPHA, TAU, (2, 4), 4)
    xs = [[0.0, 0.01, -0.01], [0.03, 0.05, 0.04]]
    alone = ia.decide_all(design, {"a": xs})["a"]
    assert alone.t_sup == pytest.approx(sps.t.isf(ALPHA / 8, alone.df))
    assert alone == ia.decide_all(design, {"a": xs, "b": xs}, invalid={"c"})["a"]


def test_decisions_round_trip_through_json_and_say_what_was_tested():
    design = ia.InteractionDesign(ALPHA, TAU, (3, 6, 12), 2)
    rng = np.random.default_rng(5)
    diffs = {"a": [list(rng.normal(mu, 0.01, 6)) for mu in (0.0, -0.02, -0.05)],
             "b": [[0.0, 0.001], [0.3], [0.0, 0.001]]}
    for arm, d in {**ia.decide_all(design, diffs), "c": ia.decide_interaction(design, [[0.1]] * 3)}.items():
        doc = json.loads(json.dumps(d.to_dict(), allow_nan=False))
        back = ia.InteractionDecision.from_dict(doc)
        assert json.dumps(back.to_dict()) == json.dumps(d.to_dict())
        text = d.sentence(arm, "prenorm", "model.max_iter")
        assert text.startswith(f"{arm} vs prenorm") and d.verdict in text
    a = ia.decide_all(design, diffs)["a"]
    assert a.verdict == ia.GROWS
    s = a.sentence("a", "prenorm", "model.max_iter")
    assert f"{a.estimate:+.4f}" in s and f"[{a.interval[0]:+.4f}, {a.interval[1]:+.4f}]" in s and "97.5 %" in s
    cal = ia.decide_calibration(design, diffs["a"])
    assert cal.calibration and "not in the family" in cal.sentence("aa", "prenorm", "model.max_iter")


# ---- the whole study's error rates, by Monte Carlo -------------------------------------------------------

SESOI = 0.02  # the points' SESOI, = τ here
N_SIM = 8000  # studies per case; se of a rate near 0.05: 0.0024, so the bound is α + 0.0073
# (points, looks, n_arms): a 3-point and a 2-point study, 1 and 4 arms, 2 and 3 looks
DESIGNS = [((3, 6, 12), (4, 8, 12), 1), ((2, 4), (3, 6, 9), 4), ((3, 6, 12), (3, 6, 9), 4)]


def _designs(points, looks, n_arms, holdback=1.0):
    design = ia.InteractionDesign(ALPHA, TAU, points, n_arms, alpha_holdback=holdback)
    return design, ia.point_design(design, SESOI, looks)


@pytest.mark.parametrize(("points", "looks", "n_arms"), DESIGNS)
@pytest.mark.parametrize(("effect", "sd"), [(0.0, 0.5 * SESOI), (-0.5 * SESOI, 0.75 * SESOI)])
def test_no_change_gives_grows_or_shrinks_at_most_alpha(points, looks, n_arms, effect, sd):
    """Scenarios 1 and 2: Δ the same at every point (0, or an effect the points decide early about half the
    time, so their stopping differs by chance): P(any arm grows or shrinks) ≤ α, family-wise. The spreads are
    where the Welch df's rate peaked on a grid (sd 0.5–0.75·SESOI: ties or wins come early at some points)."""
    design, pd = _designs(points, looks, n_arms)
    code = ia.simulate_study(design, pd, [effect] * len(points), [sd] * len(points), N_SIM, seed=31 + n_arms)[0]
    rate = float(((code == 0) | (code == 1)).any(axis=0).mean())
    bound = _mc_bound(ALPHA, N_SIM)
    assert rate <= bound, f"P(grows or shrinks | no change) deviation={rate:.4f} bound={bound:.4f} {points} {looks}"


@pytest.mark.parametrize(("points", "looks", "n_arms"), [((3, 6, 12), (3, 6, 9), 1), ((3, 6, 12), (3, 6, 9), 4)])
def test_flat_at_a_change_of_tau_is_at_most_alpha(points, looks, n_arms):
    """Scenario 3: a change of +τ and of −τ (Δ linear in log2 value through 0 at the middle): P(flat) per arm,
    pooled over the arms (simulated independent: n_sim·n_arms studies), the worse side, ≤ α. sd 0.75·τ is where
    the rate peaked on a grid of sd 0.25–1·τ and middle effects 0 to −1.5·SESOI."""
    design, pd = _designs(points, looks, n_arms)
    rate, side = ia._flat_worse_side(design, pd, 0.0, [0.75 * TAU] * len(points), N_SIM, seed=41)
    bound = _mc_bound(ALPHA, N_SIM * n_arms)
    assert rate <= bound, f"P(flat | change {side}) deviation={rate:.4f} bound={bound:.4f} {points} {looks}"


def test_the_card_flags_a_flat_error_above_alpha_and_a_holdback_mends_it():
    """Where the points' tie stops pull the means toward 0 (2 points, looks (4, 8, 12), 4 arms, sd 0.75·τ),
    P(flat | ±τ) exceeds α with the full α (measured 0.056): the card says so, and a hold-back of 0.9 brings it
    within the bound."""
    design, pd = _designs((2, 4), (4, 8, 12), 4)
    full = ia.study_card(design, pd, 0.75 * TAU, 0.0, -2 * TAU, n_sim=N_SIM, seed=5)
    assert full.flat_at_change > _mc_bound(ALPHA, N_SIM * 4)
    assert "ABOVE α 0.05: register alpha_holdback" in full.to_text()
    held, pd = _designs((2, 4), (4, 8, 12), 4, holdback=0.9)
    rate, side = ia._flat_worse_side(held, pd, 0.0, [0.75 * TAU] * 2, N_SIM, seed=5 + 300)
    assert rate <= _mc_bound(ALPHA, N_SIM * 4), f"P(flat | change {side}) with hold-back 0.9: {rate:.4f}"


def test_the_point_verdicts_are_a_family_over_points_and_arms():
    """Each point runs at α/P: P(any arm better or worse at any point | Δ = 0) ≤ α. Least favourable: a SESOI
    far below the spread, so no arm stops early as a tie."""
    design = ia.InteractionDesign(ALPHA, TAU, (3, 6, 12), 4)
    pd = ia.point_design(design, 0.001, (3, 6, 9))
    point_code = ia.simulate_study(design, pd, [0.0] * 3, [1.0] * 3, N_SIM, seed=51)[1]
    rate = float(np.isin(point_code, (0, 1)).any(axis=(0, 2)).mean())  # sequential's BETTER, WORSE codes
    bound = _mc_bound(ALPHA, N_SIM)
    assert rate <= bound, f"P(any point verdict better or worse | Δ=0) deviation={rate:.4f} bound={bound:.4f}"


def test_simulate_study_runs_the_rule_decide_all_applies():
    """Replaying simulate_study's draws point by point through sequential.decide (decided arms stopping) and
    the differences each final decision used through decide_all gives the same verdicts: the card simulates the
    procedure, not a copy of it."""
    from dormouse.ab.rule import sequential as sq

    design, pd = _designs((2, 4, 8), (3, 6), 2)
    deltas, sds, n_sim, seed = [-0.01, -0.02, -0.03], [0.01, 0.015, 0.02], 120, 9
    code = ia.simulate_study(design, pd, deltas, sds, n_sim, seed)[0]
    draws = [delta + s * np.random.Generator(np.random.PCG64(seed + p)).standard_normal((2, n_sim, pd.n_max))
             for p, (delta, s) in enumerate(zip(deltas, sds))]
    for i in range(n_sim):
        used: dict[str, list[list[float]]] = {"a0": [], "a1": []}
        for x in draws:
            decided: dict[str, sq.ArmDecision] = {}
            for k, n in enumerate(pd.looks):
                todo = {f"a{a}": list(x[a, i, :n]) for a in range(2) if f"a{a}" not in decided}
                decided = {a: d for a, d in sq.decide(pd, k, todo, decided).items() if d.final}
            for arm, d in decided.items():
                used[arm].append(list(x[int(arm[1]), i, : d.n]))
        got = ia.decide_all(design, used)
        assert [got[f"a{a}"].verdict for a in range(2)] == [ia.VERDICTS[c] for c in code[:, i]], i


# ---- the study card's contract ---------------------------------------------------------------------------

def test_the_study_card_states_its_scenarios_and_refuses_bad_inputs():
    design, pd = _designs((3, 6, 12), (4, 8), 2)
    card = ia.study_card(design, pd, [0.02, 0.02, 0.03], -0.02, -0.04, n_sim=500, seed=3)
    text = card.to_text()
    for words in ("type-I P(grows or shrinks | Δ=0 everywhere)", "P(flat | change ±τ)", "power", "skew -1.0",
                  "skew +1.0", "expected replicates", "α 0.01667 = α/3"):
        assert words in text, words
    doc = json.loads(json.dumps(card.to_dict(), allow_nan=False))
    assert doc["weights"] == [-1.0, 0.0, 1.0] and doc["design"]["points"] == [3, 6, 12]
    assert set(doc["expected_n"]) == {"Δ=0", "Δ=-0.02", "change -0.04"}
    with pytest.raises(ValueError) as bad:
        ia.study_card(design, ia.sq.Design(ALPHA, SESOI, (4, 8), 3), [0.02, -1.0, 0.02], math.inf, 0.0, n_sim=0)
    named = [line.split(":")[0].strip() for line in str(bad.value).split(": ", 1)[1].split("; ")]
    assert named == ["point_design", "point_design", "pilot_sd", "expected_effect", "expected_change", "n_sim"]
