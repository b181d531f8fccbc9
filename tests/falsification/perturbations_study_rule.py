"""Perturbations of a registered study's primary rule, the arm × axis contrast (dormouse/ab/study/interaction.py;
format in perturbations_attnres.py, plus ``protects``).

Each puts back a plausible other rule: the Welch or the pooled df on data the points' early stopping
selected, z instead of t, no Bonferroni over the arms, the card's se from the maximum replicates instead of
those each decision used, the points not splitting α, `flat` without its TOST, the family from the arms
present, the hold-back not applied, and a point with one difference decided on.
"""

from __future__ import annotations

_IA = "dormouse/ab/study/interaction.py"
_T = "tests/ab/test_study_interaction.py::"
_TYPE_I = _T + "test_no_change_gives_grows_or_shrinks_at_most_alpha"

PERTURBATIONS: list[dict] = [
    {
        "name": "study_welch_df_under_stopping",
        "file": _IA,
        "function": "_contrast",
        "old": "    df = np.min(np.where(used, n - 1, np.inf), axis=-1)",
        "new": "    v = np.where(used, c * c * sd * sd / n, 0.0)\n"
               "    df = v.sum(axis=-1) ** 2 / np.sum(np.where(used, v * v / np.maximum(n - 1, 1), 0.0), axis=-1)",
        "gates": [_TYPE_I, _T + "test_two_points_are_welchs_statistic_on_the_fewest_replicates_df"],
        "why": "the Welch–Satterthwaite df on the differences each point's stopped decision used: the stopping "
               "selects means and sds, and the study's type-I error rises to about 0.07 at α 0.05",
        "protects": "A/B rule",
    },
    {
        "name": "study_pooled_variance_df",
        "file": _IA,
        "function": "_contrast",
        "old": "    df = np.min(np.where(used, n - 1, np.inf), axis=-1)",
        "new": "    df = np.sum(np.where(used, n - 1, 0), axis=-1)",
        "gates": [_TYPE_I, _T + "test_two_points_are_welchs_statistic_on_the_fewest_replicates_df"],
        "why": "the pooled-variance df Σ(n_p − 1): too many degrees of freedom for unequal spreads and for the "
               "spread a stopped point estimated from few replicates",
        "protects": "A/B rule",
    },
    {
        "name": "study_z_instead_of_t",
        "file": _IA,
        "function": "_critical",
        "old": "    return sps.t.isf(design.sup_level, df), sps.t.isf(design.test_alpha, df)",
        "new": "    return sps.norm.isf(design.sup_level) + 0 * df, sps.norm.isf(design.test_alpha) + 0 * df",
        "gates": [_TYPE_I, _T + "test_two_points_are_welchs_statistic_on_the_fewest_replicates_df"],
        "why": "normal critical values for a contrast whose se is estimated from 3–12 replicates per point",
        "protects": "A/B rule",
    },
    {
        "name": "study_no_bonferroni_over_arms",
        "file": _IA,
        "function": "InteractionDesign.sup_level",
        "old": "        return self.test_alpha / (2 * self.n_arms)",
        "new": "        return self.test_alpha / 2",
        "gates": [_TYPE_I, _T + "test_a_failed_arm_stays_in_the_family"],
        "why": "each arm's grows/shrinks tested at α, not α/n_arms: the family-wise error grows with the arms",
        "protects": "A/B rule",
    },
    {
        "name": "study_card_se_from_the_maximum",
        "file": _IA,
        "function": "simulate_study",
        "old": "    est, se, df = _contrast(design.weights(), mean, sds, n)",
        "new": "    est, se, df = _contrast(design.weights(), mean, sds, np.full_like(n, point_design.n_max))",
        "gates": [_T + "test_simulate_study_runs_the_rule_decide_all_applies", _TYPE_I],
        "why": "the card computes the contrast as if every point had run to the maximum, not with the n each "
               "decision used: its se is too small where a point stopped early, and it simulates another rule",
        "protects": "A/B rule",
    },
    {
        "name": "study_points_do_not_split_alpha",
        "file": _IA,
        "function": "InteractionDesign.point_alpha",
        "old": "        return self.alpha / len(self.points)",
        "new": "        return self.alpha",
        "gates": [_T + "test_the_point_verdicts_are_a_family_over_points_and_arms"],
        "why": "every point's comparison runs at the study's α: the per-point verdicts, a family over points × "
               "arms, then err P times as often",
        "protects": "A/B rule",
    },
    {
        "name": "study_flat_without_the_tost",
        "file": _IA,
        "function": "_rule",
        "old": "    flat = (-tau < eq_lo) & (eq_hi < tau)",
        "new": "    flat = np.abs(est) < tau",
        "gates": [_T + "test_flat_at_a_change_of_tau_is_at_most_alpha"],
        "why": "`flat` from the estimate inside ±τ without the equivalence test: a change of τ is called flat "
               "about half the time",
        "protects": "A/B rule",
    },
    {
        "name": "study_family_from_the_arms_present",
        "file": _IA,
        "function": "decide_all",
        "old": "    return {arm: decide_interaction(design, diffs.get(arm, empty), point_invalid=arm in invalid)",
        "new": "    design = InteractionDesign(design.alpha, design.smallest_change, design.points, len(diffs),\n"
               "                               design.alpha_holdback)\n"
               "    return {arm: decide_interaction(design, diffs.get(arm, empty), point_invalid=arm in invalid)",
        "gates": [_T + "test_a_failed_arm_stays_in_the_family"],
        "why": "the family taken from the arms with differences: an arm whose points failed drops out and the "
               "others get more α",
        "protects": "A/B rule",
    },
    {
        "name": "study_holdback_not_applied",
        "file": _IA,
        "function": "InteractionDesign.test_alpha",
        "old": "        return self.alpha * self.alpha_holdback",
        "new": "        return self.alpha",
        "gates": [_T + "test_the_card_flags_a_flat_error_above_alpha_and_a_holdback_mends_it"],
        "why": "the registered hold-back is ignored: the tests run at the full α where the card showed the "
               "points' stopping needs a margin",
        "protects": "A/B rule",
    },
    {
        "name": "study_one_difference_is_decided",
        "file": _IA,
        "function": "decide_interaction",
        "old": "    if point_invalid or short:",
        "new": "    if point_invalid:",
        "gates": [_T + "test_invalid_cases_are_refused_or_reported"],
        "why": "a weighed point with one paired difference (no spread) is decided on instead of reported invalid",
        "protects": "A/B rule",
    },
]
