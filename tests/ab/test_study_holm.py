"""The study's registered multiplicity ``holm`` (dormouse/ab/rule/family.py, dormouse/ab/study/interaction.py):
Holm's step-down against a hand-computed example and against statsmodels' ``multipletests(method="holm")`` as an
independent oracle, each arm's level in its sentence, the family-wise rate of the separate `flat` claims by Monte
Carlo, and the default (``bonferroni``) deciding the published depth study exactly as published. Each gate's
perturbation is in tests/falsification/perturbations_holm.py.

Monte-Carlo bound (as tests/ab/test_study_interaction.py): a rate whose true value is ≤ α is accepted up to
α + 3·√(α(1 − α)/n_sim) (a false red at ~1.3e-3 per assertion; the seeds are fixed).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from dormouse.ab.rule.family import holm_levels
from dormouse.ab.study import interaction as ia

ALPHA = 0.05
TAU = 0.02
REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "docs" / "results" / "depth_cpu"


def _mc_bound(alpha: float, n_sim: int) -> float:
    return alpha + 3.0 * math.sqrt(alpha * (1 - alpha) / n_sim)


# ---- Holm's step-down -------------------------------------------------------------------------------------

def test_holm_steps_down_through_the_hand_computed_tost_ps():
    """The published study's three TOST p's at α 0.05: sorted, they meet α/3 = 0.0167, α/2 = 0.025 and α/1 = 0.05,
    so all three are rejected (flat); Bonferroni's α/3 for every arm would drop the third (0.0466). Given in any
    order, each p keeps its own rank and level."""
    p = np.array([0.0466, 0.0035, 0.0119])  # GR, Full AttnRes, Block AttnRes
    got = holm_levels(p, ALPHA)
    assert got.level.tolist() == pytest.approx([0.05, 0.05 / 3, 0.025], rel=1e-15)
    assert got.rank.tolist() == [3, 1, 2] and got.step.tolist() == [3, 1, 2]
    assert (p < got.level).all()
    assert (p < ALPHA / 3).tolist() == [False, True, True]  # Bonferroni on flat drops GR


def test_holm_compares_every_arm_after_its_first_failure_with_the_level_it_stopped_at():
    """(0.001, 0.03, 0.04): the 2nd smallest fails its α/2 = 0.025, so the step-down stops and the 3rd (0.04, below
    its own α/1) is compared with 0.025 too, and kept; the 1st smallest failing stops it at once."""
    got = holm_levels(np.array([0.04, 0.001, 0.03]), ALPHA)
    assert got.level.tolist() == pytest.approx([0.025, 0.05 / 3, 0.025], rel=1e-15)
    assert got.rank.tolist() == [3, 1, 2] and got.step.tolist() == [2, 1, 2]
    p = np.array([0.02, 0.03, 0.021])
    stopped = holm_levels(p, ALPHA)
    assert stopped.step.tolist() == [1, 1, 1] and not (p < stopped.level).any()


def test_holm_rejects_exactly_what_statsmodels_multipletests_rejects(monkeypatch: pytest.MonkeyPatch):
    """Random p-vectors of 1–6 arms (p uniform on (0, 0.12): most near a level), 1000 families in one vectorised
    call per size: rejected iff multipletests(method="holm") rejects, and the adjusted level never above α."""
    import gc

    monkeypatch.setattr(gc, "collect", lambda *a: 0)  # multipletests collects garbage on every call: 50 ms each here
    rng = np.random.default_rng(20261205)
    for m in range(1, 7):
        p = rng.uniform(0.0, 0.12, size=(m, 1000))
        got = holm_levels(p, ALPHA)
        mine = p < got.level
        want = np.stack([multipletests(p[:, j], alpha=ALPHA, method="holm")[0] for j in range(p.shape[1])], axis=1)
        assert (mine == want).all(), f"{m} arms: {int((mine != want).sum())} families differ"
        assert (got.level <= ALPHA + 1e-15).all() and (got.level >= ALPHA / m - 1e-15).all()


def test_holm_keeps_an_arm_without_a_test_in_the_family():
    """A registered arm without a p (failed, or absent) is never rejected and keeps its share: two p's of a family
    of three start at α/3, as three would."""
    got = holm_levels(np.array([0.01, 0.02]), ALPHA, family=3)
    assert got.level.tolist() == pytest.approx([0.05 / 3, 0.025], rel=1e-15)
    nan = holm_levels(np.array([0.01, math.nan, 0.02]), ALPHA)
    assert nan.level[[0, 2]].tolist() == pytest.approx([0.05 / 3, 0.025], rel=1e-15) and nan.rank[1] == 3


# ---- the rule under holm ---------------------------------------------------------------------------------

def _holm(design: ia.InteractionDesign) -> ia.InteractionDesign:
    return dataclasses.replace(design, multiplicity="holm")


def test_under_holm_an_absent_arm_keeps_its_share_of_the_family():
    """decide_all with two of three registered arms: the smaller p is compared with α/3, not α/2."""
    design = _holm(ia.InteractionDesign(ALPHA, TAU, (2, 4), 3))
    rng = np.random.default_rng(3)
    diffs = {a: [list(0.002 * rng.standard_normal(8)), list(0.002 * rng.standard_normal(8))] for a in ("a", "b")}
    got = ia.decide_all(design, diffs)
    assert sorted(d.eq_rank for d in got.values()) == [1, 2]
    first = min(got.values(), key=lambda d: d.eq_rank)
    assert first.eq_level == pytest.approx(ALPHA / 3, rel=1e-15)


def test_under_holm_decide_all_and_the_simulated_rule_agree():
    """decide_all (each arm's L, se and df, then Holm over the family) and the rule the cards simulate (_rule on
    (arms, n_sim) arrays) give the same verdicts on the same differences."""
    design = _holm(ia.InteractionDesign(ALPHA, TAU, (2, 4, 8), 3))
    rng = np.random.default_rng(11)
    c = ia.contrast_weights(design.points)
    for i in range(150):
        diffs = {f"a{a}": [list(rng.normal(-0.004 * a * p, 0.01, size=int(rng.integers(3, 9)))) for p in range(3)]
                 for a in range(3)}
        got = ia.decide_all(design, diffs)
        stats = [[(np.mean(x), np.std(x, ddof=1), len(x)) for x in diffs[f"a{a}"]] for a in range(3)]
        m, s, n = (np.array([[row[k] for row in arm] for arm in stats]) for k in range(3))
        est, se, df = ia._contrast(c, m, s, n)
        code = ia._rule(design, est, se, df)[0]
        assert [got[f"a{a}"].verdict for a in range(3)] == [ia.VERDICTS[k] for k in code], i


def test_under_holm_a_tested_arm_is_decided_only_with_its_family():
    design = _holm(ia.InteractionDesign(ALPHA, TAU, (2, 4), 2))
    with pytest.raises(ValueError, match="decide_all"):
        ia.decide_interaction(design, [[0.0, 0.01], [0.0, 0.02]])
    cal = ia.decide_calibration(design, [[0.0, 0.01, 0.002], [0.0, 0.02, 0.001]])
    assert cal.multiplicity == "bonferroni" and cal.eq_level == ALPHA  # never in the family: the per-arm levels


def test_the_multiplicity_is_registered_as_one_of_two_words():
    assert ia.InteractionDesign(ALPHA, TAU, (2, 4), 2, multiplicity="holm").problems() == []
    bad = ia.InteractionDesign(ALPHA, TAU, (2, 4), 2, multiplicity="hochberg").problems()
    assert len(bad) == 1 and bad[0].startswith("multiplicity: 'hochberg' must be one of bonferroni, holm")


@pytest.mark.parametrize("word", ["holm", "hochberg"])
def test_a_study_registers_its_multiplicity_and_a_wrong_word_is_refused_by_name(tmp_path: Path, word: str):
    from dormouse.ab.comparison.registry import ABSpecError
    from dormouse.ab.study.registry import load_study
    from tests.helpers.registrations import registration, write_registry

    study = ("study:\n  axis: model.max_iter\n  points: [2, 3]\n  seed_stride: 10000\n  smallest_change: 0.02\n"
             f"  expected_change: 0.02\n  multiplicity: {word}\n")
    registry = write_registry(tmp_path, "s", registration("s", ("prenorm", "gr", "prenorm_aa"), tail=study))
    if word == "holm":
        assert load_study("s", registry).interaction_design().multiplicity == "holm"
        return
    with pytest.raises(ABSpecError) as exc:
        load_study("s", registry)
    assert any("field 'study.multiplicity'" in ln and "bonferroni, holm" in ln for ln in exc.value.lines)


# ---- the family-wise rates, by Monte Carlo ----------------------------------------------------------------

SESOI = 0.02
N_SIM = 8000  # studies per side; se of a rate near 0.05: 0.0024, so the bound is α + 0.0073
# (points, looks, n_arms, sd): the published study's design, and a 4-arm design with early looks
FAMILIES = [((2, 4, 8), (6, 12), 3, 0.025 / 0.03 * TAU), ((3, 6, 12), (3, 6, 9), 4, 0.75 * TAU)]


@pytest.mark.parametrize(("points", "looks", "n_arms", "sd"), FAMILIES)
def test_under_holm_the_family_of_flat_claims_is_at_most_alpha(points, looks, n_arms, sd):
    """Every arm's change at +τ and at −τ (each a true `not flat` at the margin, arms independent: the least
    favourable for a union): P(any arm flat) ≤ α under holm, the worse side. Under the default the same draws give
    the per-arm rule's family rate, above α: the separate flat claims are each at α (the reason for holm)."""
    design = ia.InteractionDesign(ALPHA, TAU, points, n_arms)
    pd = ia.point_design(design, SESOI, looks)
    *_, holm, side = ia._flat_rates(_holm(design), pd, 0.0, [sd] * len(points), N_SIM, seed=61)
    bound = _mc_bound(ALPHA, N_SIM)
    assert holm <= bound, f"holm: P(any arm flat | change {side}) deviation={holm:.4f} bound={bound:.4f}"
    arm, _, default, _ = ia._flat_rates(design, pd, 0.0, [sd] * len(points), N_SIM, seed=61)
    assert arm <= _mc_bound(ALPHA, N_SIM * n_arms) and default > bound, (arm, default)


def test_holm_claims_grows_or_shrinks_whenever_bonferroni_does_and_flat_only_where_it_does():
    """On the same draws: Holm's first level is Bonferroni's α/n_arms, so P(any grows/shrinks) is Bonferroni's
    exactly (≤ α, the card's type-I line) and every Bonferroni grows/shrinks is Holm's too; a Holm flat is at a
    level ≤ α, so it is a Bonferroni flat."""
    design = ia.InteractionDesign(ALPHA, TAU, (2, 4, 8), 3)
    pd = ia.point_design(design, SESOI, (4, 8))
    for deltas in ([0.0] * 3, [0.0, -0.01, -0.02]):
        bonf = ia.simulate_study(design, pd, deltas, [0.015] * 3, 3000, seed=71)[0]
        holm = ia.simulate_study(_holm(design), pd, deltas, [0.015] * 3, 3000, seed=71)[0]
        sig_b, sig_h = bonf <= 1, holm <= 1  # codes 0, 1: grows, shrinks
        assert (sig_b <= sig_h).all() and ((holm == 2) <= (bonf == 2)).all()
        if deltas[1] == 0.0:
            assert (sig_b.any(axis=0) == sig_h.any(axis=0)).all()


def test_the_holm_card_states_the_family_of_flat_claims_within_alpha():
    design = _holm(ia.InteractionDesign(ALPHA, 0.03, (2, 4, 8), 3))
    card = ia.study_card(design, ia.point_design(design, 0.03, (6, 12)), 0.025, 0.04, -0.05, n_sim=2000, seed=3)
    text = card.to_text()
    assert "Holm's step-down for grows/shrinks and for flat" in text
    assert "P(any arm flat | every arm's change ±τ), family" in text and card.flat_family <= _mc_bound(ALPHA, 2000)
    doc = json.loads(json.dumps(card.to_dict(), allow_nan=False))
    assert doc["design"]["multiplicity"] == "holm" and "flat_family_se" in doc["skew_lines"][0]


# ---- the published depth study ------------------------------------------------------------------------------

published = pytest.mark.skipif(not (PUBLISHED / "results.json").is_file(), reason="depth_cpu is not published")


def _analyze(multiplicity: str | None = None) -> tuple[dict, dict]:
    from dormouse.ab.study.registry import load_study
    from dormouse.ab.study.report import analyze_study

    study = load_study("depth_cpu")
    if multiplicity is not None:
        study.study.multiplicity = multiplicity
    return analyze_study(study, PUBLISHED), json.loads((PUBLISHED / "results.json").read_text(encoding="utf-8"))


@published
def test_the_default_decides_the_published_study_exactly_as_published():
    """The registration (no multiplicity: bonferroni) recomputed from the points' differences: every key of every
    published decision, its sentence included, is the same value to the last bit."""
    mine, pub = _analyze()
    for arm, want in [*pub["interaction"].items(), ("A/A", pub["calibration"])]:
        got = mine["calibration"] if arm == "A/A" else mine["interaction"][arm]
        assert {k: got[k] for k in want} == want, arm
        assert got["multiplicity"] == "bonferroni"


@published
def test_under_holm_the_published_study_keeps_all_three_flat_and_states_each_level():
    """The published differences under holm: TOST p's 0.0035, 0.0119, 0.0466 meet α/3, α/2, α/1, so all three
    stay flat, and each sentence names Holm, the arm's rank and the level it was compared with."""
    mine, _ = _analyze("holm")
    d = mine["interaction"]
    assert {a: x["verdict"] for a, x in d.items()} == {"gr": "flat", "attnres_full": "flat", "attnres_block": "flat"}
    assert {a: x["eq_rank"] for a, x in d.items()} == {"attnres_full": 1, "attnres_block": 2, "gr": 3}
    assert d["gr"]["eq_level"] == pytest.approx(0.05) and d["attnres_full"]["eq_level"] == pytest.approx(0.05 / 3)
    s = d["gr"]["sentence"]
    assert "TOST p 0.0466 < 0.05, family-wise α 0.05 over 3 arm(s), Holm's step-down: the 3rd smallest TOST p" in s
    assert "TOST p 0.0035 < 0.0167" in d["attnres_full"]["sentence"]
