"""Perturbations of protocol v2's decision rule (dormouse/ab/rule/sequential.py; tests/falsification;
format in perturbations_attnres.py, plus ``protects``).

Each turns the registered rule into a plausible other one: the v1 margin back, α not spent across looks,
the family taken from the arms present, `worse` without significance, TOST without spending; and the
numbers reported beside the verdict (dormouse/ab/rule/stats.py): probability of improvement, bad runs,
Hodges–Lehmann interval (the A/A calibration check's are in perturbations_assumptions.py).
"""

from __future__ import annotations

_SEQ = "dormouse/ab/rule/sequential.py"
_STATS = "dormouse/ab/rule/stats.py"
_T = "tests/ab/test_ab_sequential.py::"
_S = "tests/ab/test_ab_stats.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "design_accepts_a_zero_sesoi",
        "file": _SEQ,
        "function": "Design.field_problems",
        "old": "        if not _finite(self.sesoi) or self.sesoi <= 0:\n",
        "new": "        if not _finite(self.sesoi):\n",
        "gates": ["tests/ab/test_ab_verdict.py::test_the_registry_states_the_designs_own_checks",
                  _T + "test_design_problems_name_each_bad_field"],
        "why": "a SESOI of 0 passes the design's one check, so the registry accepts a file whose equivalence test "
               "has no margin (the design owns its checks, the registry states them)",
        "protects": "A/B rule",
    },
    {
        "name": "v1_margin_from_the_spread",
        "file": _SEQ,
        "function": "_look_rule",
        "old": "    margin = sesoi  # registered before any run",
        "new": "    margin = np.maximum(sesoi, 2 * se * np.sqrt(lb.n))  # registered before any run",
        "gates": [_T + "test_tie_at_the_sesoi_is_at_most_alpha"],
        "why": "protocol v1's rule: the equivalence margin is max(SESOI, 2·sd of the data) instead of the "
               "registered SESOI, a noise scale that does not shrink with replicates",
        "protects": "A/B rule",
    },
    {
        "name": "alpha_not_spent_across_looks",
        "file": _SEQ,
        "function": "_boundaries",
        "old": "    sup_inc = np.diff(np.concatenate([[0.0], sup_cum]))\n",
        "new": "    sup_inc = np.full_like(sup_cum, sup_level)\n",
        "gates": [_T + "test_better_or_worse_at_no_effect_is_at_most_alpha",
                  _T + "test_boundary_table_spends_alpha_by_the_obf_function"],
        "why": "every look tests superiority at the nominal α/n_arms: looking again and again inflates the "
               "family-wise error",
        "protects": "A/B rule",
    },
    {
        "name": "family_from_the_arms_present",
        "file": _SEQ,
        "function": "decide",
        "old": "    family = design.n_arms  # registered, never len(diffs): a failed arm keeps its share of α\n",
        "new": "    family = len(diffs)  # registered, never len(diffs): a failed arm keeps its share of α\n",
        "gates": [_T + "test_a_failed_arm_stays_in_the_family"],
        "why": "an arm whose runs failed drops out of the multiplicity family, which gives the others more α",
        "protects": "A/B rule",
    },
    {
        "name": "worse_without_significance",
        "file": _SEQ,
        "function": "_look_rule",
        "old": "    worse = lo > 0\n",
        "new": "    worse = mean > 0\n",
        "gates": [_T + "test_worse_needs_the_significance_better_needs",
                  _T + "test_better_or_worse_at_no_effect_is_at_most_alpha"],
        "why": "`worse` is declared from the sign of the mean, without the significance `better` needs",
        "protects": "A/B rule",
    },
    {
        "name": "tost_not_spent_across_looks",
        "file": _SEQ,
        "function": "_boundaries",
        "old": "    eq_inc = np.diff(np.concatenate([[0.0], eq_cum]))\n",
        "new": "    eq_inc = np.full_like(eq_cum, alpha)\n",
        "gates": [_T + "test_tie_at_the_sesoi_is_at_most_alpha"],
        "why": "each look runs the TOST at the nominal α: repeated equivalence tests inflate P(tie | |Δ| = SESOI)",
        "protects": "A/B rule",
    },
    {
        "name": "small_effect_flag_only_for_better",
        "file": _SEQ,
        "function": "_look_rule",
        "old": "    return code, lo, hi, eq_lo, eq_hi, (better | worse) & tie\n",
        "new": "    return code, lo, hi, eq_lo, eq_hi, better & tie\n",
        "gates": [_T + "test_a_significant_effect_inside_the_sesoi_is_better_or_worse_flagged_never_tie"],
        "why": "a significant but negligible `worse` is not flagged smaller than the SESOI: the sentence "
               "reads as a real harm",
        "protects": "A/B rule",
    },
    {
        "name": "improvement_counts_a_zero_difference",
        "file": _STATS,
        "function": "prob_improvement",
        "old": "    return _proportion(int(np.sum(x < 0)), int(x.size), confidence) if x.size else None\n",
        "new": "    return _proportion(int(np.sum(x <= 0)), int(x.size), confidence) if x.size else None\n",
        "gates": [_S + "test_probability_of_improvement_counts_replicates_below_zero_with_clopper_pearson"],
        "why": "a replicate where the arm equals the baseline counts as an improvement",
        "protects": "A/B rule",
    },
    {
        "name": "bad_runs_miss_diverged_runs",
        "file": "dormouse/ab/rule/bad_runs.py",
        "function": "is_bad",
        "old": "not math.isfinite(final_bpb) or final_bpb > ceiling",
        "new": "final_bpb > ceiling",
        "gates": [_S + "test_bad_run_rate_counts_runs_above_the_ceiling_and_diverged_runs"],
        "why": "a run whose bpb is NaN (diverged) is not counted as bad: NaN > ceiling is False",
        "protects": "A/B rule",
    },
    {
        "name": "hodges_lehmann_interval_one_sided_tail",
        "file": _STATS,
        "function": "hodges_lehmann",
        "old": "    k = int(np.sum(cdf <= (1 - confidence) / 2))  # P(T <= k-1) <= tail for k-1 = 0..k-1\n",
        "new": "    k = int(np.sum(cdf <= (1 - confidence)))  # P(T <= k-1) <= tail for k-1 = 0..k-1\n",
        "gates": [_S + "test_hodges_lehmann_is_the_median_of_walsh_averages_and_inverts_the_exact_wilcoxon_test"],
        "why": "the two-sided interval's ends use the whole 1 − confidence in each tail: a 90 % interval "
               "labelled 95 %",
        "protects": "A/B rule",
    },
    {
        "name": "sizing_card_takes_the_baseline_as_an_arm",
        "file": "dormouse/ab/lifecycle/size.py",
        "function": "pilot_sds",
        "old": "if a.get(\"role\") == \"arm\" and a.get(\"diff_sd\") is not None}",
        "new": "if a.get(\"diff_sd\") is not None}",
        "gates": [_T + "test_a_card_from_a_published_comparison_reads_its_compared_arms_spreads"],
        "why": "the next registration is sized with the A/A arm (and a baseline's empty spread) counted as compared "
               "arms: a family too large and a spread too small, so its stated power is not the design's",
        "protects": "A/B rule",
    },
]
