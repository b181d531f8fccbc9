"""Perturbations of the bad-mode marker and of telling a failed run from a diverged one (tests/falsification;
format in perturbations_attnres.py). ``protects`` names what a defect here would break."""

from __future__ import annotations

_MODE = "dormouse/ab/rule/bad_mode.py"
_RESULTS = "dormouse/ab/reporting/results.py"
_TUNE = "dormouse/ab/tune/stage.py"
_JOB = "dormouse/ab/runs/job.py"
_U = "tests/ab/test_bad_mode.py::"
_D = "tests/flows/test_bad_mode_depth_study.py::"
_F = "tests/ab/test_failed_not_diverged.py::"
_TUNE_GATE = _F + "test_a_tune_run_refused_by_the_trainer_is_failed_with_its_reason_not_diverged"
_LOOKS_GATE = _F + "test_a_confirmatory_run_refused_by_the_trainer_makes_its_arm_invalid_with_its_reason"

PERTURBATIONS: list[dict] = [
    {
        "name": "bad_mode_marker_read_at_the_final_eval",
        "file": _MODE,
        "function": "marker_step",
        "old": "    return at_fraction * steps\n",
        "new": "    return steps\n",
        "gates": [_U + "test_the_marker_reads_the_registered_step_not_the_final_eval",
                  _D + "test_the_marker_finds_the_six_pre_norm_runs_of_the_bad_mode"],
        "why": "the marker at the wrong step: read at the end, where the bad runs have closed half their gap, the "
               "depth study's six become one and the early finding is lost",
        "protects": "A/B rule",
    },
    {
        "name": "bad_mode_marker_skips_an_eval_at_exactly_its_step",
        "file": _MODE,
        "function": "marker_row",
        "old": "        if int(row[\"step\"]) >= at_step:\n",
        "new": "        if int(row[\"step\"]) > at_step:\n",
        "gates": [_U + "test_the_marker_reads_the_first_eval_at_or_after_its_share_of_the_steps"],
        "why": "a marker at a share that lands on an eval reads the next one: one eval late",
        "protects": "A/B rule",
    },
    {
        "name": "bad_mode_reference_is_the_arms_mean",
        "file": _MODE,
        "function": "arm_bad_modes",
        "old": "    median = float(np.median(bpb))\n",
        "new": "    median = float(np.mean(bpb))\n",
        "gates": [_U + "test_a_run_above_its_arms_median_by_more_than_the_margin_is_flagged_with_its_seed",
                  _D + "test_the_marker_finds_the_six_pre_norm_runs_of_the_bad_mode"],
        "why": "the bad runs lift a mean toward themselves: with four of twelve bad the A/A set's hide under it",
        "protects": "A/B rule",
    },
    {
        "name": "bad_mode_shared_seed_needs_only_one_arm",
        "file": _MODE,
        "function": "shared_seeds",
        "old": "    return {str(seed): names for seed, names in sorted(by_seed.items()) if len(names) > 1}\n",
        "new": "    return {str(seed): names for seed, names in sorted(by_seed.items()) if names}\n",
        "gates": [_U + "test_init_seeds_flagged_in_several_arms_are_named",
                  _D + "test_the_report_names_the_shared_init_seeds_and_each_arms_rate"],
        "why": "every flagged seed named as shared: the report would blame the initialisation for one arm's run",
        "protects": "A/B rule",
    },
    {
        "name": "a_refused_start_recorded_as_a_divergence",
        "file": _JOB,
        "function": "train_run",
        "old": "        diverged = isinstance(exc, TrainError) and exc.diverged\n",
        "new": "        diverged = isinstance(exc, TrainError)\n",
        "gates": [_TUNE_GATE, _LOOKS_GATE],
        "why": "any TrainError (a refused resume, a run directory refused) counts as diverged: +inf bpb at its lr, "
               "and the tune rule moves the arm away from its best lr on a crash",
        "protects": "A/B rule",
    },
    {
        "name": "a_failed_tune_run_shown_as_not_run",
        "file": _TUNE,
        "function": "_cell",
        "old": "    return \"diverged\" if value == math.inf else \"failed\" if failed else value\n",
        "new": "    return \"diverged\" if value == math.inf else value\n",
        "gates": [_TUNE_GATE],
        "why": "a tune run that failed reads as not run in the table and results.json: the failure and its place "
               "in the grid are lost",
        "protects": "A/B rule",
    },
    {
        "name": "a_comparison_with_an_unsettled_tune_stage_called_complete",
        "file": _RESULTS,
        "function": "analyze",
        "old": "        and (state.tune is None or state.tune.settled),\n",
        "new": "        and True,\n",
        "gates": [_TUNE_GATE],
        "why": "a tune stage stopped by a failed run leaves no confirmatory run, so the report said complete",
        "protects": "A/B rule",
    },
    {
        "name": "a_failed_confirmatory_run_counted_as_a_bad_run",
        "file": _RESULTS,
        "function": "_arm_result",
        "old": "    beside[\"bad_runs\"] = _bad_runs([float(r.final[\"bpb\"]) for r in ran if r.final], "
               "spec.bad_run_ceiling, replaced)\n",
        "new": "    beside[\"bad_runs\"] = _bad_runs([float(r.final[\"bpb\"]) if r.final else math.inf for r in ran], "
               "spec.bad_run_ceiling, replaced)\n",
        "gates": [_LOOKS_GATE],
        "why": "a crashed run read as a non-finite final bpb: counted a bad run, as if it had diverged",
        "protects": "A/B rule",
    },
    {
        "name": "bad_mode_lr_still_chosen",
        "file": "dormouse/ab/tune/rule.py",
        "function": "next_step",
        "old": "    best = choose(kept or finals)\n",
        "new": "    best = choose(finals)\n",
        "gates": ["tests/ab/test_tune_bad_mode.py::test_a_dropped_lr_is_never_chosen_and_the_choice_says_so"],
        "why": "an lr one tune seed of which fell in a bad mode is still chosen by its mean: the confirmatory runs "
               "inherit a learning rate whose runs split into two modes",
        "protects": "A/B rule",
    },
    {
        "name": "tune_stage_reads_no_bad_mode",
        "file": "dormouse/ab/tune/stage.py",
        "function": "_settle_arm",
        "old": "        step = next_step(rule, values, bad_mode_lrs(finished, marker))\n",
        "new": "        step = next_step(rule, values)\n",
        "gates": ["tests/ab/test_tune_bad_mode.py::"
                  "test_the_tune_stage_drops_an_lr_whose_seed_falls_in_a_bad_mode_and_the_report_says_so"],
        "why": "the tune stage never hands the rule the lrs its registered marker flags: the rule can drop them, "
               "but a real comparison still chooses an lr with a seed in a bad mode",
        "protects": "A/B rule",
    },
    {
        "name": "bad_mode_lr_judged_against_one_seed",
        "file": "dormouse/ab/rule/bad_mode.py",
        "function": "bad_mode_lrs",
        "old": "        modes = arm_bad_modes(records, marker) if len(records) > 1 else None\n",
        "new": "        modes = arm_bad_modes(records[-1:], marker) if len(records) > 1 else None\n",
        "gates": ["tests/ab/test_tune_bad_mode.py::test_an_lr_with_a_seed_in_a_bad_mode_is_marked_from_its_own_seeds_median"],
        "why": "each lr's seed judged against itself: no seed ever stands out, and no lr is dropped",
        "protects": "A/B rule",
    },
]
