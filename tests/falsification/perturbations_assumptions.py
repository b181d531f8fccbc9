"""Perturbations of what the A/B rule assumes, stated and checked (format in
perturbations_attnres.py, plus ``protects``): the design card's skew lines, the registered α hold-back, the
pooled skewness beside the verdicts, and the A/A calibration check (the A/A paired sd's interval against the
registered pilot sd, and its stated power). """

from __future__ import annotations

_SEQ = "dormouse/ab/rule/sequential.py"
_STATS = "dormouse/ab/rule/stats.py"
_T = "tests/ab/test_design_assumptions.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "skew_draws_ignore_the_sign",
        "file": _SEQ,
        "function": "standard_draws",
        "old": "    return z if skew > 0 else -z\n",
        "new": "    return z\n",
        "gates": [_T + "test_skewed_draws_have_mean_zero_sd_one_and_the_asked_signed_skewness"],
        "why": "the card's skew −0.5 and −1 lines simulate right-skewed differences: the left-skew lines are copies "
               "of the right-skew ones, and a negative skewness in the report points at the wrong line",
        "protects": "A/B rule",
    },
    {
        "name": "card_tie_line_only_at_plus_sesoi",
        "file": _SEQ,
        "function": "skew_lines",
        "old": "        side = max(ties, key=lambda k: ties[k])\n",
        "new": "        side = \"+SESOI\"\n",
        "gates": [_T + "test_the_card_states_its_skew_lines_in_text_and_json"],
        "why": "the skew lines' P(tie | |Δ| = SESOI) is read at +SESOI only: under a left skew the worse side is "
               "−SESOI (0.072 against 0.015 at skew −1), and the card understates the tie error",
        "protects": "A/B rule",
    },
    {
        "name": "holdback_not_applied_to_the_boundaries",
        "file": _SEQ,
        "function": "Design.boundary_alpha",
        "old": "        return self.alpha * self.alpha_holdback\n",
        "new": "        return self.alpha\n",
        "gates": [_T + "test_the_holdback_computes_the_boundaries_at_the_held_back_alpha",
                  _T + "test_the_holdback_keeps_skew_half_within_alpha_where_the_full_alpha_does_not"],
        "why": "a registered hold-back is recorded and stated but the boundaries are computed at the full α: the "
               "margin for skew it promises is not there",
        "protects": "A/B rule",
    },
    {
        "name": "holdback_outside_zero_one_accepted",
        "file": _SEQ,
        "function": "family_problems",
        "old": "    if not _finite(holdback) or not 0.0 < holdback <= 1.0:\n",
        "new": "    if not _finite(holdback):\n",
        "gates": [_T + "test_a_holdback_outside_zero_one_is_refused_naming_the_field"],
        "why": "a hold-back of 1.5 (boundaries at more than the claimed α) or 0 (no boundary can be crossed) passes "
               "the design's check and the registry",
        "protects": "A/B rule",
    },
    {
        "name": "pooled_skewness_unscaled_per_arm",
        "file": _STATS,
        "function": "pooled_skewness",
        "old": "            parts.append((x - x.mean()) / np.std(x, ddof=1))\n",
        "new": "            parts.append(x - x.mean())\n",
        "gates": [_T + "test_the_pooled_skewness_centres_and_scales_each_arm_by_its_own"],
        "why": "the arms' differences are pooled at their own scales: the widest arm's shape stands for all, and "
               "the reported skewness is not the shape the card's lines describe",
        "protects": "A/B rule",
    },
    {
        "name": "aa_interval_one_sided",
        "file": _STATS,
        "function": "aa_calibration",
        "old": "    side = \"larger\" if lo > pilot_sd else \"smaller\" if hi < pilot_sd else None\n",
        "new": "    side = \"larger\" if lo > pilot_sd else None\n",
        "gates": [_T + "test_the_aa_checks_false_alarms_are_split_between_both_sides_at_the_pilot_sd",
                  _T + "test_the_aa_interval_is_the_chi_square_interval_and_says_which_side"],
        "why": "the A/A check sees only noise larger than the pilot's: a design made pessimistic by too large a "
               "pilot sd always 'agrees' (the gate of the check's two-sidedness)",
        "protects": "A/B rule",
    },
    {
        "name": "aa_interval_tails_not_halved",
        "file": _STATS,
        "function": "chi2_tails",
        "old": "    tail = (1 - confidence) / 2\n",
        "new": "    tail = 1 - confidence\n",
        "gates": [_T + "test_the_aa_checks_false_alarms_are_split_between_both_sides_at_the_pilot_sd"],
        "why": "each tail of the interval takes the whole 1 − confidence: a 90 % interval labelled 95 %, false "
               "alarms twice the stated level",
        "protects": "A/B rule",
    },
    {
        "name": "aa_power_at_the_wrong_df",
        "file": _STATS,
        "function": "aa_calibration",
        "old": "    power = dict(_power_at(df, confidence))",
        "new": "    power = dict(_power_at(int(aa.size), confidence))",
        "gates": [_T + "test_the_aa_checks_stated_power_is_its_chi_square_power"],
        "why": "the stated power is computed at n instead of n − 1 degrees of freedom: it overstates what the "
               "check can see",
        "protects": "A/B rule",
    },
    {
        "name": "aa_check_always_agrees",
        "file": _STATS,
        "function": "aa_calibration",
        "old": "    return Calibration(side is None, ",
        "new": "    return Calibration(True, ",
        "gates": [_T + "test_the_aa_interval_is_the_chi_square_interval_and_says_which_side"],
        "why": "the A/A check says the design's assumption holds whatever the interval: a check that cannot fail",
        "protects": "A/B rule",
    },
]
