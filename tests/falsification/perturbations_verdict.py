"""Perturbations of the A/B rule (tests/falsification; format in perturbations_attnres.py,
plus ``protects``).

The verdict is what a researcher reads: each of these turns a registered rule into a plausible other one
(protocol 1's "tie unless proven" rule, a closed band, a failed arm leaving the family, the best
eval for the final one, the A/A arm on its baseline's data order).
"""

from __future__ import annotations

_REPORT = "dormouse/ab/reporting/report.py"
_RESULTS = "dormouse/ab/reporting/results.py"
_RECORDS = "dormouse/ab/runs/records.py"
_LOOKS = "dormouse/ab/rule/looks.py"
_PLAN = "dormouse/ab/comparison/plan.py"
_V = "tests/ab/test_ab_verdict.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "undecided_keeps_nothing",
        "file": _RESULTS,
        "function": "_kept",
        "old": "    if verdict in (TIE, UNDECIDED):\n",
        "new": "    if verdict in (TIE,):\n",
        "gates": [_V + "test_a_failed_arm_stays_in_the_multiplicity_family"],
        "why": "an undecided arm names no arm to keep: the registration says the simpler arm stays",
        "protects": "A/B rule",
    },
    {
        "name": "tie_keeps_the_more_complex_arm",
        "file": _RESULTS,
        "function": "simpler",
        "old": "    return min(kind_a, kind_b, key=lambda k: rank.get(k, len(rank)))\n",
        "new": "    return max(kind_a, kind_b, key=lambda k: rank.get(k, len(rank)))\n",
        "gates": [_V + "test_each_verdict_states_what_was_tested_and_keeps_by_the_registry_order"],
        "why": "a tie keeps the more complex mechanism: the registry's order read backwards",
        "protects": "A/B rule",
    },
    {
        "name": "report_recomputes_the_paired_differences",
        "file": _RESULTS,
        "function": "_arm_result",
        "old": "    diffs = list(state.diffs.get(arm, [])) if role != \"baseline\" else []\n",
        "new": "    diffs = paired_differences(recs, base, \"bpb\") if role != \"baseline\" else []\n",
        "gates": [_V + "test_the_report_states_the_paired_differences_the_looks_decided_on"],
        "why": "the report computes Δ a second time instead of stating the looks': two owners of one "
               "rule, free to drift apart, and a report that may state other differences than the ones decided on",
        "protects": "A/B rule",
    },
    {
        "name": "looks_decide_on_differences_they_do_not_record",
        "file": _LOOKS,
        "function": "_use",
        "old": "        out.diffs[arm] = paired_differences([runs[k] for k in used if k in runs], against)\n",
        "new": "        out.diffs[arm] = paired_differences([runs[k] for k in used if k in runs], runs)\n",
        "gates": [_V + "test_the_report_states_the_paired_differences_the_looks_decided_on",
                  _V + "test_each_verdict_states_what_was_tested_and_keeps_by_the_registry_order"],
        "why": "Δ paired against the arm itself (always 0): the looks decide on, and the report states, no difference",
        "protects": "A/B rule",
    },
    {
        "name": "tie_rule_order_frozen_at_import",
        "file": _REPORT,
        "function": "meaning",
        "old": "the simpler arm is kept (the registry's order: {registry_order()}).\",\n",
        "new": "the simpler arm is kept (the registry's order: prenorm, then rezero, then gr, then attnres).\",\n",
        "gates": ["tests/arms/test_toy_arm.py::test_the_toy_arm_trains_logs_probes_plots_and_reports"],
        "why": "the report states the arm registry's order as it was at import: an arm registered later (a plugin, "
               "the toy arm) is missing from the order the tie rule keeps by",
        "protects": "A/B rule",
    },
    {
        "name": "failed_arm_leaves_the_family",
        "file": _LOOKS,
        "function": "ConfirmatoryLooks._arms_look",
        "old": "        family = plan.design()  # the registered family (n_arms fixed at registration), whatever failed\n",
        "new": "        family = __import__('dataclasses').replace(plan.design(), n_arms=len(spec.tested) - len("
               "[a for a in spec.tested if a in out.invalid]))\n",
        "gates": [_V + "test_a_failed_arm_stays_in_the_multiplicity_family"],
        "why": "an arm whose runs failed drops out of the multiplicity family, which shrinks it and loosens "
               "every other arm's correction",
        "protects": "A/B rule",
    },
    {
        "name": "metric_read_from_the_best_eval",
        "file": _RECORDS,
        "function": "final_row",
        "old": "        return rows[-1]\n",
        "new": "        return min(rows, key=lambda r: r[\"bpb\"])\n",
        "gates": [_V + "test_the_metric_is_the_registered_final_eval_not_the_best"],
        "why": "the metric is the best eval row instead of the registered final one: early stopping chosen "
               "after the fact, which favours the noisier arm",
        "protects": "A/B rule",
    },
    {
        "name": "aa_arm_on_the_baselines_data_order",
        "file": _PLAN,
        "function": "replicates_of",
        "old": "spec.data_seed_base + k, None if aa is None else aa + k)",
        "new": "spec.data_seed_base + k, spec.data_seed_base + k)",
        "gates": ["tests/flows/test_ab.py::test_each_replicate_has_its_own_seed_streams_and_the_aa_arm_its_own_data"],
        "why": "the A/A arm trains on its baseline's data order: it reproduces the baseline and calibrates nothing",
        "protects": "A/B rule",
    },
    {
        "name": "published_registration_edited_after_the_run",
        "file": "conf/ab/residual_cpu.yaml",
        "function": "<file>",
        "old": "seeds: [1, 2, 3, 4, 5]\n",
        "new": "seeds: [1, 2, 3, 4, 6]\n",
        "gates": ["tests/flows/test_published_results.py::test_published_results_come_from_the_registered_file"],
        "why": "the registration in conf/ab no longer says what the published results ran: the README's "
               "verdicts would be credited to a file that did not produce them",
        "protects": "A/B rule",
    },
    {
        "name": "published_verdict_edited_by_hand",
        "file": "docs/results/residual_cpu/results.json",
        "function": "<file>",
        "old": "\"verdict\": \"better\"",
        "new": "\"verdict\": \"undecided\"",
        "gates": ["tests/flows/test_published_results.py::test_published_verdicts_follow_the_registered_rule"],
        "why": "a published verdict that the registered rule does not give for the published numbers (GR's "
               "better turned undecided): the README's table would no longer follow from the runs",
        "protects": "A/B rule",
    },
    {
        "name": "published_v2_registration_edited_after_the_run",
        "file": "conf/ab/residual_cpu2.yaml",
        "function": "<file>",
        "old": "looks: [4, 7, 10]\n",
        "new": "looks: [4, 8, 12]\n",
        "gates": ["tests/flows/test_published_results.py::test_published_v2_results_come_from_the_registered_file"],
        "why": "residual_cpu2's registration no longer says what ran (other looks, other boundaries): its "
               "verdicts would be credited to a design that did not produce them",
        "protects": "A/B rule",
    },
    {
        "name": "published_v2_verdict_edited_by_hand",
        "file": "docs/results/residual_cpu2/results.json",
        "function": "<file>",
        "old": "\"verdict\": \"better\",\n      \"decision\"",
        "new": "\"verdict\": \"tie\",\n      \"decision\"",
        "gates": ["tests/flows/test_published_results.py::"
                  "test_v2_published_verdicts_follow_the_registered_group_sequential_rule"],
        "why": "GR's published verdict turned from better to tie: the README's table would no longer follow "
               "from the runs under the registered looks and spending",
        "protects": "A/B rule",
    },
    {
        "name": "published_v2_look_rewritten",
        "file": "docs/results/residual_cpu2/results.json",
        "function": "<file>",
        "old": "\"attnres_full\": \"worse\"\n",
        "new": "\"attnres_full\": \"undecided\"\n",
        "gates": ["tests/flows/test_published_results.py::"
                  "test_v2_published_verdicts_follow_the_registered_group_sequential_rule"],
        "why": "the record of what the last look decided is not what its rule gives: a reader checking the "
               "looks by hand would find Full AttnRes never decided",
        "protects": "A/B rule",
    },
    {
        "name": "published_v2_pair_ran_at_another_lr",
        "file": "docs/results/residual_cpu2/carry/gr-s203/config.yaml",
        "function": "<file>",
        "old": "  lr: 0.0045\n",
        "new": "  lr: 0.003\n",
        "gates": ["tests/flows/test_published_results.py::"
                  "test_v2_each_arm_trained_at_the_learning_rate_its_tune_runs_chose"],
        "why": "a confirmatory GR run trained at another lr than its arm's tune choice: the comparison is not "
               "'every arm at its own tuned learning rate'",
        "protects": "A/B rule",
    },
    {
        "name": "published_v2_tune_choice_edited",
        "file": "docs/results/residual_cpu2/results.json",
        "function": "<file>",
        "old": "\"attnres_full\": 0.002,\n",
        "new": "\"attnres_full\": 0.003,\n",
        "gates": ["tests/flows/test_published_results.py::"
                  "test_v2_each_arm_trained_at_the_learning_rate_its_tune_runs_chose"],
        "why": "the published tune choice is not what the registered rule gives on the tune runs' own metrics",
        "protects": "A/B rule",
    },
]
