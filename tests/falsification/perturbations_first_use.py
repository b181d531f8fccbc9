"""Perturbations of what a user meets on a first use (tests/falsification; format in perturbations_attnres.py, plus
``protects``): the smoke comparison's baseline, a comparison's logs in a pipe, the model's size from eval and
sample, what the driver says between looks and when a SIGTERM stops it between runs, and what a SIGKILLed
``--jobs`` driver leaves to the resource tracker.
"""

from __future__ import annotations

_AB = "tests/flows/test_ab.py::"
_SAMPLE = "tests/flows/test_sample.py::test_eval_and_sample_print_the_models_parameter_counts_as_train_does"
_RUNNER = "dormouse/ab/comparison/runner.py"

PERTURBATIONS: list[dict] = [
    {
        "name": "smoke_baseline_trains_rezero",
        "file": "conf/ab/smoke.yaml",
        "function": "<file>",
        "old": "  prenorm: [model.use_prenorm=true]\n",
        "new": "  prenorm: []\n",
        "gates": [_AB + "test_the_smoke_comparison_measures_every_arm_against_the_plain_prenorm_residual"],
        "why": "smoke's baseline arm, named prenorm, trains ReZero (no switch on): the first comparison a newcomer "
               "runs measures every arm against another baseline than the one the README names",
        "protects": "arms' set-up",
    },
    {
        "name": "logs_in_a_pipe_prints_every_eval_row_of_a_comparison",
        "file": "dormouse/cli/logs.py",
        "function": "logs_command",
        "old": "        _print_tsv(paths, runs, per_run)\n",
        "new": "        print(\"\\n\".join(tsv_lines(runs)), flush=True)\n",
        "gates": ["tests/flows/test_logs_comparison.py::"
                  "test_a_comparison_in_a_pipe_is_one_tab_separated_row_per_arm_and_each_runs_rows_only_with_runs"],
        "why": "`dormouse logs runs/ab/NAME | ...` gets every run's eval rows where a terminal gets the row per arm: "
               "the verdicts and Δs a script reads are not there",
        "protects": "record",
    },
    {
        "name": "eval_prints_no_parameter_count",
        "file": "dormouse/cli/app.py",
        "function": "eval_",
        "old": "(step {step}) {format_params(counts)}\"",
        "new": "(step {step})\"",
        "gates": [_SAMPLE + "[command0]"],
        "why": "`dormouse eval` does not say how big the model it loaded is: a user cannot check it is the one built",
        "protects": "record",
    },
    {
        "name": "sample_prints_no_parameter_count",
        "file": "dormouse/cli/app.py",
        "function": "sample",
        "old": "(step {step}) {format_params(counts)};",
        "new": "(step {step});",
        "gates": [_SAMPLE + "[command1]"],
        "why": "`dormouse sample` does not say how big the model it loaded is: a user cannot check it is the one "
               "built",
        "protects": "record",
    },
    {
        "name": "driver_keeps_the_previous_looks_decision_to_itself",
        "file": _RUNNER,
        "function": "_run_batch",
        "old": "    decided = last_look_line(plan, state)\n",
        "new": "    decided = None\n",
        "gates": [_AB + "test_the_driver_says_what_the_previous_look_decided_before_the_next_look_starts"],
        "why": "the log goes from look 1's runs to 'look 2 of 2' without saying which arms stopped and why the "
               "others run on",
        "protects": "A/B rule",
    },
    {
        "name": "sigterm_between_runs_kills_the_driver",
        "file": _RUNNER,
        "function": "run_comparison",
        "old": "    with stop_on_term(lambda: say_interrupted(plan.reg.argument, console)), "
               "comparison_lock(plan.comp_dir) as lock:\n",
        "new": "    with comparison_lock(plan.comp_dir) as lock:\n",
        "gates": [_AB + "test_a_sigterm_between_two_runs_says_interrupted_and_releases_the_lock"],
        "why": "a SIGTERM between two runs meets no handler: the driver dies with no interrupted line and leaves "
               "its lock stale",
        "protects": "training loop",
    },
    {
        "name": "worker_queues_keep_their_named_semaphores",
        "file": "dormouse/ab/launchers/local.py",
        "function": "settle",
        "old": "        _unlink_semaphores(pool)\n",
        "new": "        continue\n",
        "gates": ["tests/flows/test_ab_launch.py::"
                  "test_a_killed_driver_leaves_no_process_nor_semaphore_and_a_rerun_loses_and_repeats_nothing"],
        "why": "the pools' queues keep their semaphores' names linked: a SIGKILLed `dormouse ab --jobs 2` leaves "
               "them to its resource tracker, which warns of leaked semaphore objects",
        "protects": "training loop",
    },
]
