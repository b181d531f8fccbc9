"""Perturbations of the registered multiplicity ``holm``: Holm's step-down over a family's separate claims and the
study's default, which must decide as published (tests/falsification; format in perturbations_attnres.py).
``protects`` names what a defect here would break."""

from __future__ import annotations

_FAMILY = "dormouse/ab/rule/family.py"
_RULE = "dormouse/ab/study/interaction.py"
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
]
