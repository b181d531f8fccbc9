"""Perturbations of the registered budget and the FLOP count it matches (tests/falsification; format in
perturbations_attnres.py). ``protects`` names what a defect here would break."""

from __future__ import annotations

_BUDGET = "dormouse/ab/comparison/budget.py"
_FLOPS = "dormouse/model/flops.py"
_SPECS = "dormouse/arms/specs.py"
_EVALS = "dormouse/config/eval_schedule.py"
_MATCHED = "dormouse/ab/reporting/matched.py"
_T = "tests/ab/test_budget.py::"
_F = "tests/model/test_flops.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "flop_budget_gives_every_arm_the_baselines_steps",
        "file": _BUDGET,
        "function": "arm_budgets",
        "old": "        exact = float(budget.value or 0) / per_unit[arm]\n",
        "new": "        exact = float(budget.value or 0) / per_unit[baseline]\n",
        "gates": [_T + "test_a_flop_budget_gives_each_builtin_arm_the_hand_computed_steps",
                  _T + "test_a_flop_budget_comparison_runs_every_arm_to_the_same_flops_and_reports_both_views"],
        "why": "under a FLOP budget every arm trains the baseline's steps: GR spends 9 % more compute than pre-norm "
               "and the verdict is an equal-step verdict labelled equal-compute",
        "protects": "A/B rule",
    },
    {
        "name": "flop_budget_rounds_steps_down",
        "file": _BUDGET,
        "function": "_rounded",
        "old": "    return int(math.floor(exact + 0.5))\n",
        "new": "    return int(math.floor(exact))\n",
        "gates": [_T + "test_a_flop_budget_gives_each_builtin_arm_the_hand_computed_steps"],
        "why": "each arm's steps truncated rather than rounded: up to a whole step under the budget, always on the "
               "same side (GR's 158.95 becomes 158)",
        "protects": "A/B rule",
    },
    {
        "name": "gr_gates_left_out_of_the_flop_count",
        "file": _SPECS,
        "function": "GatedResidualSpec.flops_per_token",
        "old": "        return 2 * depth * 2.0 * d * d\n",
        "new": "        return 0.0\n",
        "gates": [_F + "test_the_forward_count_is_the_matmuls_torchs_counter_counts_plus_causal_attention",
                  _F + "test_each_builtin_arms_own_flops_are_the_hand_counted_values"],
        "why": "GR's d x d gate products uncounted: an equal-FLOP budget gives GR 9 % more compute than pre-norm",
        "protects": "A/B rule",
    },
    {
        "name": "attnres_readouts_left_out_of_the_flop_count",
        "file": _SPECS,
        "function": "AttnResSpec.flops_per_token",
        "old": "        pushes = [*range(2 * depth), *(2 * (k + 1) for k in readouts)]\n",
        "new": "        pushes = [*range(2 * depth)]\n",
        "gates": [_F + "test_each_builtin_arms_own_flops_are_the_hand_counted_values"],
        "why": "the readouts' depth reads uncounted: AttnRes's own FLOPs low by a third at 2 iterations",
        "protects": "A/B rule",
    },
    {
        "name": "causal_attention_counted_at_full_length",
        "file": _FLOPS,
        "function": "flop_count",
        "old": "        block += depth * (2 * (4 * d * d + 3 * d * h) + 2 * seq * d) + len(readouts) * 2 * VOCAB * d\n",
        "new": "        block += depth * (2 * (4 * d * d + 3 * d * h) + 4 * seq * d) + len(readouts) * 2 * VOCAB * d\n",
        "gates": [_F + "test_the_forward_count_is_the_matmuls_torchs_counter_counts_plus_causal_attention",
                  _F + "test_the_block_per_token_is_the_hand_counted_value_and_training_triples_it"],
        "why": "causal attention counted over all T keys instead of T/2 on average: the block's FLOPs high by 7 % "
               "at the smoke model, and the arms' share of the cost understated",
        "protects": "A/B rule",
    },
    {
        "name": "random_depth_counted_at_the_maximum",
        "file": _FLOPS,
        "function": "flop_count",
        "old": "    depths = range(1, int(m.max_iter) + 1) if m.random_depth else [int(m.max_iter)]\n",
        "new": "    depths = [int(m.max_iter)]\n",
        "gates": [_F + "test_a_random_depth_count_is_the_mean_over_the_depths_the_loop_draws"],
        "why": "a random-depth run counted as if every step ran the full depth: its FLOPs overstated by up to 2x",
        "protects": "A/B rule",
    },
    {
        "name": "fractional_eval_spacing_evaluates_at_its_floor",
        "file": _EVALS,
        "function": "_multiples_passed",
        "old": "    return math.floor(step / every + 1e-9)\n",
        "new": "    return math.floor(step / math.floor(every) + 1e-9)\n",
        "gates": [_T + "test_a_fractional_eval_spacing_evaluates_at_the_same_fractions_of_every_run"],
        "why": "a budget's fractional eval spacing truncated: the arms' evals drift apart (43.25 evaluates at 43, "
               "86, 129, 172 and 173) and the curves no longer compare at matched compute",
        "protects": "training loop",
    },
    {
        "name": "other_view_read_at_the_pricier_runs_total",
        "file": _MATCHED,
        "function": "matched_diffs",
        "old": "        at = min(view.x(rec.arm, rec.steps), view.x(base.arm, base.steps))\n",
        "new": "        at = max(view.x(rec.arm, rec.steps), view.x(base.arm, base.steps))\n",
        "gates": [_T + "test_the_other_view_reads_both_runs_at_the_cheaper_runs_total_between_eval_points",
                  _T + "test_a_flop_budget_comparison_runs_every_arm_to_the_same_flops_and_reports_both_views"],
        "why": "the matched view read at the pricier run's total, past the cheaper run's last eval: no Δ at all",
        "protects": "A/B rule",
    },
    {
        "name": "budget_left_off_the_registration",
        "file": "dormouse/ab/comparison/plan.py",
        "function": "_budgets",
        "old": "    apply_budget(arm_cfgs, budgets)\n",
        "new": "    pass\n",
        "gates": [_T + "test_a_flop_budget_gives_each_builtin_arm_the_hand_computed_steps"],
        "why": "the registered budget is computed and printed but never set into the runs: every arm trains "
               "train.steps",
        "protects": "A/B rule",
    },
]
