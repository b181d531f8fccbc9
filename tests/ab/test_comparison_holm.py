"""A comparison's registered ``multiplicity: holm`` (dormouse/ab/rule/sequential.py): at one look, the claims are
statsmodels' ``multipletests(method="holm")`` on the arms' two-sided p's and TOST p's (an independent oracle); over
looks, the family-wise rates of both kinds of claim by Monte Carlo, the separate ties' rate above α under the default
(the gate can go red); the vectorised simulation decides as ``decide`` does; each sentence names its step. Each
gate's perturbation is in tests/falsification/perturbations_holm.py.

Monte-Carlo bound (as tests/ab/test_ab_sequential.py): a rate whose true value is ≤ α is accepted up to
α + 3·√(α(1 − α)/n_sim) (a false red at ~1.3e-3 per assertion; the seeds are fixed).
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from dormouse.ab.comparison.registry import ABSpecError, load_spec
from dormouse.ab.rule import sequential as sq

ALPHA = 0.05
SESOI = 0.05


def _mc_bound(alpha: float, n_sim: int) -> float:
    return alpha + 3.0 * math.sqrt(alpha * (1 - alpha) / n_sim)


def _holm(n_arms: int, looks: tuple[int, ...]) -> sq.Design:
    return sq.Design(ALPHA, SESOI, looks, n_arms, multiplicity="holm")


def test_one_look_claims_are_holms_step_down_on_each_kind_of_p(monkeypatch):
    """One look spends all of α: superiority at Holm's levels on the two-sided p's, ties at Holm's levels on the
    TOST p's, each kind on its own (statsmodels computes the oracle; the module's p's are checked against it by
    tests/ab/test_ab_sequential.py)."""
    monkeypatch.setattr(gc, "collect", lambda *_: 0)  # multipletests collects garbage per call: 70 ms with torch
    m, n = 4, 6
    design = _holm(m, (n,))
    rng = np.random.default_rng(11)
    gained = 0
    for _ in range(300):
        diffs = {f"a{i}": list(rng.normal(rng.uniform(-0.1, 0.1), rng.uniform(0.005, 0.05), n)) for i in range(m)}
        out = sq.decide(design, 0, diffs)
        arms = list(diffs)
        sup = multipletests([out[a].p for a in arms], alpha=ALPHA, method="holm")[0]
        eq = multipletests([out[a].p_tost for a in arms], alpha=ALPHA, method="holm")[0]
        for arm, s, e in zip(arms, sup, eq):
            d = out[arm]
            assert (d.verdict in (sq.BETTER, sq.WORSE)) == bool(s), (arm, d.p, [out[a].p for a in arms])
            assert (d.verdict == sq.TIE or d.smaller_than_sesoi) == bool(e), (arm, [out[a].p_tost for a in arms])
        plain = sq.decide(sq.Design(ALPHA, SESOI, (n,), m), 0, diffs)
        gained += sum((plain[a].verdict in (sq.BETTER, sq.WORSE)) < bool(s) for a, s in zip(arms, sup))
    assert gained > 0  # Holm's later steps made a superiority claim Bonferroni's α/m did not


def test_each_claim_is_stated_at_the_step_it_was_made():
    """Three arms, one look: the clearest better at α/3 (no claim before it), the next (two-sided p 0.020, between
    α/3 and α/2) at α/2, and the tie at the first equivalence step; an arm without a claim at the last step."""
    design = _holm(3, (4,))
    out = sq.decide(design, 0, {"a": [-0.3, -0.31, -0.32, -0.305], "b": [-0.1516, -0.1172, -0.0828, -0.0484],
                                "c": [0.001, 0.002, -0.001, 0.0]})
    assert out["a"].verdict == out["b"].verdict == sq.BETTER and out["c"].verdict == sq.TIE
    assert out["a"].sup_claims == 0 and out["b"].sup_claims == 1 and out["c"].sup_claims == 2
    assert out["c"].eq_claims == 0
    assert "level α/2: 1 arm(s) already decided better or worse" in out["b"].sentence("b", "base")
    assert "level α/3: 0 arm(s) already decided within the SESOI" in out["c"].sentence("c", "base")
    assert out["b"].boundary.sup_p == pytest.approx(ALPHA / 2)  # one look: the level itself
    assert "Holm" not in sq.decide(sq.Design(ALPHA, SESOI, (4,), 3), 0, {"c": [0.001, 0.002, -0.001, 0.0]}
                                   )["c"].sentence("c", "base")


def test_claims_at_earlier_looks_raise_the_level_at_later_ones():
    """A look's step counts the claims of earlier looks: an arm decided better at look 1 lets the others meet α/2."""
    design = _holm(2, (4, 8))
    first = sq.decide(design, 0, {"a": [-0.3, -0.31, -0.32, -0.305], "b": [0.05, -0.2, 0.1, -0.1]})
    assert first["a"].verdict == sq.BETTER and first["b"].verdict == sq.UNDECIDED
    later = sq.decide(design, 1, {"b": [0.05, -0.2, 0.1, -0.1, 0.0, -0.05, 0.02, -0.01]}, decided=first)
    assert later["b"].sup_claims == 1
    assert later["b"].boundary.sup_p == sq.step_boundary(design, 1, 1, 0).sup_p


@pytest.mark.parametrize("looks,n_arms", [((4, 8, 12), 3), ((6, 12), 4)])
def test_holm_holds_the_family_of_each_kind_of_claim_at_alpha(looks, n_arms):
    """Every arm at Δ = 0: P(any better/worse) ≤ α; every arm at +SESOI and at −SESOI: P(any tie) ≤ α, the
    family-wise rate the default leaves at α per arm (above α here: the gate can go red)."""
    n_sim, sd = 20_000, SESOI  # the spread where the default's family rate of ties is largest (0.11–0.15)
    design = _holm(n_arms, looks)
    zero = sq.simulate(design, [0.0] * n_arms, sd, n_sim, seed=3)
    assert zero.p_any_better_or_worse <= _mc_bound(ALPHA, n_sim)
    for side, seed in ((SESOI, 4), (-SESOI, 5)):
        assert sq.simulate(design, [side] * n_arms, sd, n_sim, seed=seed).p_any_tie <= _mc_bound(ALPHA, n_sim)
    plain = sq.simulate(sq.Design(ALPHA, SESOI, looks, n_arms), [SESOI] * n_arms, sd, n_sim, seed=4)
    assert plain.p_any_tie > _mc_bound(ALPHA, n_sim)


def test_the_simulation_decides_as_decide_does_under_holm():
    """The vectorised rule the card simulates gives, comparison by comparison, the verdicts ``decide`` gives on the
    same draws, look by look with decided arms stopping."""
    design, n_sim = _holm(3, (3, 6, 9)), 300
    deltas, sd, seed = [-0.04, 0.0, 0.03], 0.03, 17
    sim = sq.simulate_decisions(design, deltas, sd, n_sim, seed)
    rng = np.random.Generator(np.random.PCG64(seed))
    x = np.asarray(deltas)[:, None, None] + sd * rng.standard_normal((3, n_sim, design.n_max))
    for j in range(n_sim):
        decided: dict[str, sq.ArmDecision] = {}
        for look, n in enumerate(design.looks):
            todo = {f"a{i}": list(x[i, j, :n]) for i in range(3) if decided.get(f"a{i}", None) is None
                    or decided[f"a{i}"].verdict == sq.UNDECIDED}
            decided = sq.decide(design, look, todo, decided)
        assert [sq.VERDICTS.index(decided[f"a{i}"].verdict) for i in range(3)] == list(sim.code[:, j])


def test_the_card_states_the_separate_ties_family_rate_and_names_holm_where_it_is_above_alpha():
    plain = sq.design_card(sq.Design(ALPHA, SESOI, (2, 4), 3), 0.03, -SESOI, n_sim=4000)
    holm = sq.design_card(_holm(3, (2, 4)), 0.03, -SESOI, n_sim=4000)
    assert plain.tie_family > _mc_bound(ALPHA, 4000) and "register multiplicity: holm" in plain.to_text()
    assert holm.tie_family <= _mc_bound(ALPHA, 4000) and "register multiplicity" not in holm.to_text()
    assert "Holm's step-down" in holm.to_text().splitlines()[0]
    assert holm.power_sesoi > plain.power_sesoi


def test_a_registration_names_a_bad_multiplicity_and_holm_above_its_alpha(tmp_path):
    text = load_spec("smoke_robust").text
    assert "multiplicity: holm\n" in text and load_spec("smoke_robust").spec.design().multiplicity == "holm"
    for old, new, field in (("multiplicity: holm\n", "multiplicity: hochberg\n", "multiplicity"),
                            ("alpha: 0.05\n", "alpha: 0.35\n", "alpha")):
        (tmp_path / "smoke_robust.yaml").write_text(text.replace(old, new))
        with pytest.raises(ABSpecError, match=field):
            load_spec("smoke_robust", tmp_path)
    (tmp_path / "smoke_robust.yaml").write_text(text.replace("multiplicity: holm\n", ""))
    assert load_spec("smoke_robust", tmp_path).spec.design().multiplicity == "bonferroni"
