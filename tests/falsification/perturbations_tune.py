"""Perturbations of the tune stage's gates (dormouse/ab/tune/stage.py; tests/ab/test_ab_tune.py;
format in perturbations_attnres.py, plus ``protects``).

Each is a plausible one-line defect in the rule, the seed streams, the A/A arm's lr, the confirmatory runs'
lr, the resume or the report, which its gate turns red.
"""

from __future__ import annotations

_TUNE = "dormouse/ab/tune/stage.py"
_PAIRJOB = "dormouse/ab/runs/job.py"
_TRAIN = "dormouse/train/loop.py"
_PLAN = "dormouse/ab/comparison/plan.py"
_REG = "dormouse/ab/comparison/registry.py"
_G = "tests/ab/test_ab_tune.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "tune_rule_picks_the_highest_bpb",
        "file": "dormouse/ab/tune/rule.py",
        "function": "choose",
        "old": "    return min(sorted(finals), key=lambda lr: fmean(finals[lr]))\n",
        "new": "    return max(sorted(finals), key=lambda lr: fmean(finals[lr]))\n",
        "gates": [_G + "test_the_rule_takes_the_lowest_mean_final_bpb"],
        "why": "the rule chooses each arm's worst lr: every arm runs mistuned",
        "protects": "A/B rule",
    },
    {
        "name": "tune_rule_ties_to_the_larger_lr",
        "file": "dormouse/ab/tune/rule.py",
        "function": "choose",
        "old": "    return min(sorted(finals), key=lambda lr: fmean(finals[lr]))\n",
        "new": "    return min(sorted(finals, reverse=True), key=lambda lr: fmean(finals[lr]))\n",
        "gates": [_G + "test_the_rule_breaks_a_tie_toward_the_smaller_lr"],
        "why": "a tie goes to the larger lr, not the registered smaller one: the rule is not the one registered",
        "protects": "A/B rule",
    },
    {
        "name": "tune_rule_drops_diverged_runs",
        "file": "dormouse/ab/tune/rule.py",
        "function": "choose",
        "old": "    return min(sorted(finals), key=lambda lr: fmean(finals[lr]))\n",
        "new": "    return min(sorted(finals), key=lambda lr: fmean([v for v in finals[lr] if v != math.inf]"
               " or [math.inf]))\n",
        "gates": [_G + "test_a_diverged_run_counts_as_infinite_bpb"],
        "why": "a diverged run is left out of its lr's mean instead of counting as +inf: an lr that diverges on "
               "some seeds can be chosen",
        "protects": "A/B rule",
    },
    {
        "name": "tune_aa_arm_tuned_on_its_own",
        "file": _PLAN,
        "function": "ComparisonPlan.tuned_arms",
        "old": "        return [a for a in self.arms if a != self.reg.spec.aa_arm]\n",
        "new": "        return list(self.arms)\n",
        "gates": [_G + "test_the_plan_holds_each_tuned_arm_at_each_lr_and_no_aa_tune_run"],
        "why": "the A/A arm gets tune runs of its own: it is no longer the baseline again",
        "protects": "A/B rule",
    },
    {
        "name": "tune_aa_arm_takes_its_own_choice",
        "file": _PLAN,
        "function": "ComparisonPlan.lr_source",
        "old": "        return str(self.reg.spec.baseline) if arm == self.reg.spec.aa_arm else arm\n",
        "new": "        return arm\n",
        "gates": [_G + "test_the_choice_is_recorded_with_the_aa_arm_at_its_baselines_lr"],
        "why": "the A/A arm's lr is looked up under its own name instead of its baseline's",
        "protects": "A/B rule",
    },
    {
        "name": "tune_seed_overlap_check_inverted",
        "file": _REG,
        "function": "_tune_problems",
        "old": "        if ours and max(ours.start, theirs.start) < min(ours.stop, theirs.stop):\n",
        "new": "        if ours and max(ours.start, theirs.start) > min(ours.stop, theirs.stop):\n",
        "gates": [_G + "test_tune_init_seeds_overlapping_the_confirmatory_stream_are_refused",
                  _G + "test_disjoint_tune_seeds_are_accepted"],
        "why": "overlapping tune and confirmatory seed streams are let through (and disjoint ones refused): a tune "
               "run could repeat a confirmatory replicate",
        "protects": "A/B rule",
    },
    {
        "name": "tune_seed_check_only_the_init_stream",
        "file": _REG,
        "function": "_tune_problems",
        "old": "        if base is None or n == 0:\n",
        "new": "        if base is None or n == 0 or field_name != \"init_seed_base\":\n",
        "gates": [_G + "test_tune_data_seeds_overlapping_the_aa_stream_are_refused",
                  _G + "test_tune_data_seeds_overlapping_the_data_stream_are_refused"],
        "why": "tune data-order seeds may overlap the confirmatory (or A/A) data-order streams",
        "protects": "A/B rule",
    },
    {
        "name": "tune_confirmatory_pairs_ignore_the_chosen_lr",
        "file": _PLAN,
        "function": "ComparisonPlan.choose_lrs",
        "old": "            run.cfg.train.lr = float(chosen[run.arm])\n",
        "new": "            run.cfg.train.lr = float(run.cfg.train.lr)\n",
        "gates": [_G + "test_confirmatory_runs_run_at_their_arms_chosen_lr"],
        "why": "the tune stage chooses but the confirmatory runs run at the composed default lr",
        "protects": "A/B rule",
    },
    {
        "name": "tune_divergence_not_read_back_from_disk",
        "file": _TUNE,
        "function": "diverged",
        "old": "        return bool(ended[-1][\"diverged\"])\n",
        "new": "        return False\n",
        "gates": [_G + "test_a_resume_recomputes_the_same_choice_without_rerunning_tune_runs"],
        "why": "a resume does not see that a tune run diverged: it re-runs the diverged tune runs",
        "protects": "A/B rule",
    },
    {
        "name": "tune_divergence_not_recorded",
        "file": _PAIRJOB,
        "function": "train_run",
        "old": "        diverged = isinstance(exc, TrainError) and exc.diverged\n",
        "new": "        diverged = False\n",
        "gates": [_G + "test_each_attempt_records_whether_its_run_diverged",
                  _G + "test_a_resume_recomputes_the_same_choice_without_rerunning_tune_runs"],
        "why": "the attempt record says no run diverged: a resume re-runs the diverged tune runs "
               "(divergence is a recorded fact, not a grep of the error text)",
        "protects": "A/B rule",
    },
    {
        "name": "loop_does_not_mark_a_divergence",
        "file": _TRAIN,
        "function": "_Run.nonfinite_error",
        "old": "f\"{last[-1] if last else 'none'}; {fix}\", diverged=True)",
        "new": "f\"{last[-1] if last else 'none'}; {fix}\")",
        "gates": ["tests/train/test_resume.py::test_nonfinite_loss_stops_naming_the_step_and_checkpoint"],
        "why": "the loop stops on a non-finite value without saying so by name: the tune stage then cannot count "
               "the run as diverged (+inf) and re-runs it",
        "protects": "A/B rule",
    },
    {
        "name": "tune_forgets_runs_diverged_before_the_record",
        "file": _TUNE,
        "function": "_diverged_before_the_record",
        "old": "    return err.is_file() and _LEGACY_DIVERGED in err.read_text(errors=\"replace\")\n",
        "new": "    return False\n",
        "gates": [_G + "test_a_run_from_before_the_record_is_read_as_diverged_from_its_error_file"],
        "why": "a tune run written before attempts recorded divergence is no longer read as diverged: resuming an "
               "older comparison re-runs its diverged tune runs",
        "protects": "A/B rule",
    },
    {
        "name": "tune_record_not_checked_on_resume",
        "file": _TUNE,
        "function": "record",
        "old": "        if old.get(\"chosen\") != new[\"chosen\"]:\n",
        "new": "        if new.get(\"chosen\") != new[\"chosen\"]:\n",
        "gates": [_G + "test_a_recorded_choice_the_runs_no_longer_give_is_refused"],
        "why": "a resume whose runs now choose another lr than tune.json recorded silently switches lr mid-run",
        "protects": "A/B rule",
    },
    {
        "name": "tune_report_does_not_mark_the_choice",
        "file": "dormouse/ab/tune/report.py",  # the report's tune section
        "function": "_cell",
        "old": "    return f\"**{text}** ←\" if chosen is not None and lr_key(chosen) == lr_key(lr) else text\n",
        "new": "    return text\n",
        "gates": [_G + "test_the_report_shows_the_tuning_table_and_the_rule"],
        "why": "the report's tuning table does not say which lr each arm ran at",
        "protects": "A/B rule",
    },
]
