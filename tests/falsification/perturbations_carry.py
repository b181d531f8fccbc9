"""Perturbations of what keeps a long comparison resumable across machines and publishes its cost
(`dormouse ab carry` and `dormouse ab publish`: dormouse/ab/; tests/falsification; format in
perturbations_attnres.py). ``protects`` names what a defect here would break."""

from __future__ import annotations

_CARRY = "dormouse/ab/lifecycle/carry.py"
_T = "tests/flows/test_carry_comparison.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "carry_takes_unfinished_pairs",
        "file": _CARRY,
        "function": "_comparison_files",
        "old": "        if run.run_dir.is_dir() and run_state(run)[0] == \"complete\":\n",
        "new": "        if run.run_dir.is_dir():\n",
        "gates": [_T + "test_a_carried_comparison_resumes_elsewhere_without_redoing_a_finished_run"],
        "why": "an interrupted run's log and metrics are committed without its checkpoint: the results folder "
               "holds a half-run a reader can take for a result, and what is carried is not what resuming needs",
        "protects": "A/B rule",
    },
    {
        "name": "restore_overwrites_another_run",
        "file": _CARRY,
        "function": "restore",
        "old": "    if differ:\n",
        "new": "    if False:\n",
        "gates": [_T + "test_restore_refuses_to_mix_with_another_run_of_the_comparison"],
        "why": "restoring into a directory holding another run of the comparison mixes the two runs' runs "
               "(or overwrites finished results)",
        "protects": "A/B rule",
    },
    {
        "name": "sittings_count_the_pause_between_sessions",
        "file": "dormouse/ab/lifecycle/publish.py",
        "function": "sittings",
        "old": "                <= SITTING_GAP_S:\n",
        "new": "                <= 1e9:\n",
        "gates": ["tests/flows/test_publish_comparison.py::"
                  "test_sittings_merge_overlapping_runs_and_split_at_a_pause_between_sessions"],
        "why": "a comparison run in two sessions a day apart is published as having taken the machine a day: "
               "its cost, which the next registration is sized from, is wrong by the pause",
        "protects": "A/B rule",
    },
    {
        "name": "run_cpus_counts_every_run_on_the_first_runs_cpu",
        "file": "dormouse/ab/lifecycle/publish.py",
        "function": "run_cpus",
        "old": "if (cpu := prov.get(\"cpu\")) else",
        "new": "if (cpu := provenances[0].get(\"cpu\")) else",
        "gates": ["tests/flows/test_publish_comparison.py::"
                  "test_run_cpus_counts_the_runs_on_each_cpu_and_those_that_recorded_none"],
        "why": "a comparison resumed on a machine with another CPU is published as if it ran on one: its wall "
               "time (3.7-fold apart between two such machines) and which runs re-run bit for bit are misread",
        "protects": "A/B rule",
    },
]
