"""Perturbations of the bracketing tune rule (dormouse/ab/tune/rule.py, the tune
stage's plan and registration; tests/ab/test_tune_bracketing.py; format in perturbations_attnres.py, plus
``protects``).

Each is a plausible defect in the extension, its budget, the divergence stop, the second seed, the mean over
the tune replicates (the gate item 6 found missing), the flags or the seed streams, which a fast unit test
turns red.
"""

from __future__ import annotations

_RULE = "dormouse/ab/tune/rule.py"
_REG = "dormouse/ab/comparison/registry.py"
_PLAN = "dormouse/ab/comparison/plan.py"
_G = "tests/ab/test_tune_bracketing.py::"
_F = "tests/flows/test_tune_bracketing_flow.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "tune_bracket_no_extension_at_the_top_edge",
        "file": _RULE,
        "function": "_extension",
        "old": "    if best == tried[-1]:\n",
        "new": "    if best > tried[-1]:\n",
        "gates": [_G + "test_a_best_lr_at_the_top_edge_extends_the_grid_upward_until_bracketed"],
        "why": "a best lr at the top edge of what the arm ran is taken as it is: the arm's optimum beyond the grid "
               "is never reached and Δ carries its tuning regret",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_no_extension_at_the_bottom_edge",
        "file": _RULE,
        "function": "_extension",
        "old": "    if best == tried[0]:\n",
        "new": "    if best < tried[0]:\n",
        "gates": [_G + "test_a_best_lr_at_the_bottom_edge_extends_the_grid_downward"],
        "why": "a best lr at the bottom edge is never extended below",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_extension_ignores_the_budget",
        "file": _RULE,
        "function": "_extension",
        "old": "    if added >= rule.extensions:\n",
        "new": "    if added > rule.extensions:\n",
        "gates": [_G + "test_extensions_stop_at_the_budget_and_flag_the_arm_unbracketed"],
        "why": "an arm adds one grid point more than registered: its budget is not every arm's",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_divergence_does_not_stop_a_side",
        "file": _RULE,
        "function": "next_step",
        "old": "    tried = sorted(finals)\n    kept = {lr: vs for lr, vs in finals.items() if lr not in dropped}\n",
        "new": "    tried = sorted(lr for lr in finals if math.isfinite(fmean(finals[lr])))\n"
               "    kept = {lr: vs for lr, vs in finals.items() if lr not in dropped}\n",
        "gates": [_G + "test_a_divergence_beyond_the_edge_stops_that_side_and_marks_the_arm_stability_limited"],
        "why": "the edge is taken among the lrs that did not diverge: an arm keeps extending into lrs that diverge",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_stability_limited_never_set",
        "file": _RULE,
        "function": "_choice",
        "old": "                    if any(v == math.inf for v in finals[lr]))\n",
        "new": "                    if any(v != v for v in finals[lr]))\n",
        "gates": [_G + "test_a_divergence_beyond_the_edge_stops_that_side_and_marks_the_arm_stability_limited"],
        "why": "an arm whose choice sits next to a diverged lr is not flagged stability-limited",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_second_seed_ignored",
        "file": _RULE,
        "function": "_second_seeds",
        "old": "    if gap is None or not math.isfinite(means[best]):\n",
        "new": "    if gap is None or math.isfinite(means[best]):\n",
        "gates": [_G + "test_the_best_lr_and_a_neighbour_within_the_gap_each_get_a_second_seed"],
        "why": "the registered second seed never runs: one tune seed orders lrs closer than its noise",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_second_seed_outside_the_gap",
        "file": _RULE,
        "function": "_second_seeds",
        "old": "if means[lr] - means[best] <= gap]",
        "new": "if means[lr] - means[best] <= 2 * gap]",
        "gates": [_G + "test_a_neighbour_outside_the_gap_gets_no_second_seed"],
        "why": "neighbours beyond the registered gap get a second seed: the rule spends runs it did not register",
        "protects": "A/B rule",
    },
    {
        "name": "tune_rule_chooses_by_the_first_replicate",
        "file": _RULE,
        "function": "choose",
        "old": "    return min(sorted(finals), key=lambda lr: fmean(finals[lr]))\n",
        "new": "    return min(sorted(finals), key=lambda lr: finals[lr][0])\n",
        "gates": [_G + "test_the_choice_is_the_mean_over_the_tune_replicates_not_the_first"],
        "why": "the choice reads the first tune replicate only, not the mean over all",
        "protects": "A/B rule",
    },
    {
        "name": "tune_rule_runs_only_the_first_replicate",
        "file": _RULE,
        "function": "next_step",
        "old": "for lr in rule.grid for j in range(rule.replicates) if (lr, j) not in values]",
        "new": "for lr in rule.grid for j in range(1) if (lr, j) not in values]",
        "gates": [_G + "test_the_choice_is_the_mean_over_the_tune_replicates_not_the_first"],
        "why": "the grid runs one tune replicate whatever is registered, so the mean is the first",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_unbracketed_never_set",
        "file": _RULE,
        "function": "_choice",
        "old": "    unbracketed = HIGH if best == tried[-1] else LOW if best == tried[0] else None\n",
        "new": "    unbracketed = None\n",
        "gates": [_G + "test_extensions_stop_at_the_budget_and_flag_the_arm_unbracketed"],
        "why": "an arm still at an edge after its budget is not flagged: the report reads it as tuned",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_budget_forgets_the_second_seed",
        "file": _RULE,
        "function": "Bracketing.budget",
        "old": "        return (len(self.grid) + self.extensions) * self.seeds\n",
        "new": "        return (len(self.grid) + self.extensions) * self.replicates\n",
        "gates": [_G + "test_every_arm_has_the_same_budget_and_no_arm_exceeds_it"],
        "why": "the stated budget leaves out the second seed: an arm may use more runs than the budget says",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_streams_miss_the_second_seed",
        "file": _REG,
        "function": "TuneSpec.streams",
        "old": "        n = self.replicates + (1 if self.second_seed_gap is not None else 0)\n",
        "new": "        n = self.replicates\n",
        "gates": [_G + "test_the_second_seed_is_one_more_stream_disjoint_from_the_confirmatory_ones"],
        "why": "the second tune seed is left out of the overlap check: it may repeat a confirmatory replicate",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_extends_a_descending_grid",
        "file": _RULE,
        "function": "grid_ratio",
        "old": "    if steps[0] <= 1 or any(abs(s - steps[0]) > RATIO_RTOL * steps[0] for s in steps):\n",
        "new": "    if any(abs(s - steps[0]) > RATIO_RTOL * steps[0] for s in steps):\n",
        "gates": [_G + "test_extensions_need_a_geometric_ascending_grid"],
        "why": "a descending grid is accepted for extension: its 'next point beyond the top' lies below it",
        "protects": "A/B rule",
    },
    {
        "name": "tune_bracket_plan_misses_extension_pairs",
        "file": _PLAN,
        "function": "ComparisonPlan.all_runs",
        "old": "        return [*self.potential_tune_runs(), *self.runs]\n",
        "new": "        return [*self.tune_runs, *self.runs]\n",
        "gates": [_F + "test_every_tune_run_that_may_exist_is_in_the_plan"],
        "why": "the runner's kept-run check and the code check walk only the grid's tune runs: an extension run "
               "computed by other code goes unnoticed",
        "protects": "A/B rule",
    },
]
