"""Perturbations of the registered multiplicity ``holm``: Holm's step-down over a family's separate claims and the
study's default, which must decide as published (tests/falsification; format in perturbations_attnres.py).
``protects`` names what a defect here would break."""

from __future__ import annotations

_FAMILY = "dormouse/ab/rule/family.py"
_RULE = "dormouse/ab/study/interaction.py"
_SEQ = "dormouse/ab/rule/sequential.py"
_C = "tests/ab/test_comparison_holm.py::"
_T = "tests/ab/test_study_holm.py::"
_FLAT = [_T + "test_under_holm_the_family_of_flat_claims_is_at_most_alpha[points0-looks0-3-0.016666666666666666]",
         _T + "test_under_holm_the_family_of_flat_claims_is_at_most_alpha[points1-looks1-4-0.015]"]

PERTURBATIONS: list[dict] = [
    {
        "name": "holm_order_reversed",
        "file": _FAMILY,
        "function": "holm_levels",
        "old": "    thresholds = (alpha / (m - np.arange(m))).reshape((m,) + (1,) * (p.ndim - 1))  # α/m, α/(m − 1), …, α",
        "new": "    thresholds = (alpha / (np.arange(m) + 1.0)).reshape((m,) + (1,) * (p.ndim - 1))",
        "gates": [_T + "test_holm_steps_down_through_the_hand_computed_tost_ps",
                  _T + "test_holm_rejects_exactly_what_statsmodels_multipletests_rejects", *_FLAT],
        "why": "Holm's levels matched to the p's in the wrong order: the smallest p meets α, not α/n, so one arm of "
               "the family is claimed at the per-arm level and P(any arm falsely flat) is no longer α",
        "protects": "A/B rule",
    },
    {
        "name": "holm_steps_on_past_its_first_failure",
        "file": _FAMILY,
        "function": "holm_levels",
        "old": "    step_sorted = np.minimum(k, first)  # from the stop on, every arm is compared with the stopping level",
        "new": "    step_sorted = k",
        "gates": [_T + "test_holm_compares_every_arm_after_its_first_failure_with_the_level_it_stopped_at",
                  _T + "test_holm_rejects_exactly_what_statsmodels_multipletests_rejects"],
        "why": "the step-down does not stop: an arm after a p that failed its level is compared with its own, "
               "larger level (0.04 < α claimed after 0.03 failed α/2), which Holm's closed test does not allow",
        "protects": "A/B rule",
    },
    {
        "name": "holm_flat_at_alpha_per_arm",
        "file": _RULE,
        "function": "_family_critical",
        "old": "    return sps.t.isf(sup.level / 2, df), sps.t.isf(eq.level, df)",
        "new": "    return sps.t.isf(sup.level / 2, df), sps.t.isf(design.test_alpha, df)",
        "gates": _FLAT,
        "why": "under holm each flat claim is tested at α per arm again: P(any arm falsely flat | every arm at ±τ) "
               "is 0.13-0.18 at three or four arms, while the card and the docs say family-wise α",
        "protects": "A/B rule",
    },
    {
        "name": "holm_family_shrinks_to_the_arms_given",
        "file": _RULE,
        "function": "_holm",
        "old": "            holm_levels(p_tost, design.test_alpha, design.n_arms))",
        "new": "            holm_levels(p_tost, design.test_alpha))",
        "gates": [_T + "test_under_holm_an_absent_arm_keeps_its_share_of_the_family"],
        "why": "an arm whose points failed leaves the family: the others' Holm levels rise to α/(n − 1), the "
               "family the registration fixed is not the one tested",
        "protects": "A/B rule",
    },
    {
        "name": "holm_words_in_the_default_sentence",
        "file": _RULE,
        "function": "interaction_sentence",
        "old": "    if d.multiplicity == HOLM:",
        "new": "    if d.multiplicity != \"\":",
        "gates": [_T + "test_the_default_decides_the_published_study_exactly_as_published"],
        "why": "a registration without the option is described as Holm's: the published depth study's sentences "
               "name ranks and levels it was not decided at, while its file is unchanged",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_holm_order_reversed",
        "file": _SEQ,
        "function": "step_boundary",
        "old": "    sup = _boundaries(a / (m - min(sup_claims, m - 1)), looks, 1)[look]  # family 1: sup at level/2 per "
               "direction",
        "new": "    sup = _boundaries(a / (1 + min(sup_claims, m - 1)), looks, 1)[look]",
        "gates": [_C + "test_one_look_claims_are_holms_step_down_on_each_kind_of_p",
                  _C + "test_holm_holds_the_family_of_each_kind_of_claim_at_alpha[looks0-3]",
                  _C + "test_holm_holds_the_family_of_each_kind_of_claim_at_alpha[looks1-4]"],
        "why": "a comparison's superiority levels in the wrong order: the first claim is made at α, not α/n_arms, "
               "so P(any arm falsely better or worse) is no longer α",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_holm_ties_at_alpha_per_arm",
        "file": _SEQ,
        "function": "step_boundary",
        "old": "    eq = _boundaries(a / (m - min(eq_claims, m - 1)), looks, 1)[look]",
        "new": "    eq = _boundaries(a, looks, 1)[look]",
        "gates": [_C + "test_holm_holds_the_family_of_each_kind_of_claim_at_alpha[looks0-3]",
                  _C + "test_holm_holds_the_family_of_each_kind_of_claim_at_alpha[looks1-4]",
                  _C + "test_one_look_claims_are_holms_step_down_on_each_kind_of_p"],
        "why": "under holm each tie's TOST stays at α per arm: the family of separate ties is not family-wise "
               "(0.11–0.15 at the gates' designs)",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_holm_never_recycles",
        "file": _SEQ,
        "function": "_decide_holm",
        "old": "        new = (before[0] + made[0], before[1] + made[1])",
        "new": "        new = claims",
        "gates": [_C + "test_one_look_claims_are_holms_step_down_on_each_kind_of_p",
                  _C + "test_each_claim_is_stated_at_the_step_it_was_made"],
        "why": "a claim does not raise its kind's level for the arms left: holm decides as Bonferroni does, the "
               "power it registers for never arrives",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_holm_claims_of_earlier_looks_forgotten",
        "file": _SEQ,
        "function": "decide",
        "old": "        out.update(_decide_holm(design, look, pending, _claims(kept)))",
        "new": "        out.update(_decide_holm(design, look, pending, (0, 0)))",
        "gates": [_C + "test_claims_at_earlier_looks_raise_the_level_at_later_ones",
                  _C + "test_the_simulation_decides_as_decide_does_under_holm"],
        "why": "the step-down restarts at every look: an arm decided at an earlier look no longer raises the level "
               "the arms left meet",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_holm_simulation_never_recycles",
        "file": _SEQ,
        "function": "_holm_look",
        "old": "        if all(np.array_equal(a, b) for a, b in zip(new, claims)):",
        "new": "        if True:",
        "gates": [_C + "test_the_simulation_decides_as_decide_does_under_holm"],
        "why": "the card's simulation of holm stays at the first step: the rates it states are not the rule's",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_holm_states_the_last_step",
        "file": _SEQ,
        "function": "_decide_holm",
        "old": "        at = tuple(claims[k] if first[arm][k] is None else first[arm][k] for k in (0, 1))",
        "new": "        at = claims",
        "gates": [_C + "test_each_claim_is_stated_at_the_step_it_was_made"],
        "why": "each arm's sentence states the last step's level, counting its own claim: the level its p was "
               "compared with is not the one printed",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_card_hides_the_ties_family_rate",
        "file": _SEQ,
        "function": "DesignCard.tie_family_text",
        "old": "        if self.design.multiplicity == HOLM or rate <= alpha + 3 * se:",
        "new": "        if True:",
        "gates": [_C + "test_the_card_states_the_separate_ties_family_rate_and_names_holm_where_it_is_above_alpha"],
        "why": "a Bonferroni card whose separate ties are family-wise above α says nothing of it, nor of holm",
        "protects": "A/B rule",
    },
]
