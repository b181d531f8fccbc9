"""Perturbations of the registered bad-run policy (dormouse/ab/rule/bad_runs.py; tests/falsification;
format in perturbations_attnres.py, plus ``protects``).

The policy replaces runs, so each way it could select on the data, or hide an arm that fails to learn, is
a perturbation its tests must catch: replacements past the registered maximum, a bad baseline run left in,
a replaced replicate used again at a later look, bad runs not reported, and the registration's checks.
"""

from __future__ import annotations

_RULE = "dormouse/ab/rule/bad_runs.py"
_LOOKS = "dormouse/ab/rule/looks.py"
_RESULTS = "dormouse/ab/reporting/results.py"
_REPORT = "dormouse/ab/reporting/report.py"
_REGISTRY = "dormouse/ab/comparison/registry.py"
_T = "tests/ab/test_bad_run_policy.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "bad_run_replacement_ignores_the_per_arm_maximum",
        "file": _RULE,
        "function": "assign",
        "old": "        while len(made) < replacements and bad(replicate):\n",
        "new": "        while bad(replicate):\n",
        "gates": [_T + "test_past_the_per_arm_maximum_a_bad_run_is_used_as_it_is"],
        "why": "every bad run is replaced, however many: the registered maximum no longer bounds how many runs "
               "an arm may discard, and an arm that often fails to learn is scored on its lucky spares",
        "protects": "A/B rule",
    },
    {
        "name": "bad_baseline_run_not_replaced",
        "file": _LOOKS,
        "function": "_spares.bad",
        "old": "            return any(bad_runs.is_bad(float(r.final[\"bpb\"]), ceiling) for r in runs if r and r.final)\n",
        "new": "            return any(bad_runs.is_bad(float(r.final[\"bpb\"]), ceiling) for r in runs[:1] if r and r.final)\n",
        "gates": [_T + "test_a_bad_baseline_run_is_replaced_for_every_arm_and_its_spare_runs_once"],
        "why": "only the arm's own run is checked against the ceiling: a baseline run that did not learn stays in "
               "every arm's paired differences, each one shifted by the same outlier",
        "protects": "A/B rule",
    },
    {
        "name": "replaced_replicate_used_again_at_a_later_look",
        "file": _RULE,
        "function": "assign",
        "old": "    for slot in range(1, n + 1):\n"
               "        replicate = slot\n",
        "new": "    for slot in range(n, 0, -1):\n"
               "        replicate = slot\n",
        "gates": [_T + "test_a_replaced_replicate_stays_replaced_at_every_later_look"],
        "why": "the replacements are spent from the newest replicate back: at a later look the maximum moves to "
               "the new bad runs and a replicate replaced at an earlier look is used again, its bad run with it",
        "protects": "A/B rule",
    },
    {
        "name": "bad_runs_counted_over_the_runs_used_only",
        "file": _RESULTS,
        "function": "_arm_result",
        "old": "    beside[\"bad_runs\"] = _bad_runs([float(r.final[\"bpb\"]) for r in ran if r.final], "
               "spec.bad_run_ceiling, replaced)\n",
        "new": "    beside[\"bad_runs\"] = _bad_runs([float(r.final[\"bpb\"]) for r in recs if r.final], "
               "spec.bad_run_ceiling, replaced)\n",
        "gates": [_T + "test_the_verdict_decides_on_the_spare_and_the_finding_names_the_replacement"],
        "why": "the bad-run rate counts only the runs the analysis kept: the runs the policy replaced vanish, and "
               "an unstable arm reports no bad run at all",
        "protects": "A/B rule",
    },
    {
        "name": "bad_run_replacements_not_in_the_report",
        "file": _REPORT,
        "function": "bad_run_lines",
        "old": "    if not most:\n        return []\n",
        "new": "    if True:\n        return []\n",
        "gates": [_T + "test_the_verdict_decides_on_the_spare_and_the_finding_names_the_replacement"],
        "why": "the report says nothing of the runs the policy replaced: the finding is in results.json only",
        "protects": "A/B rule",
    },
    {
        "name": "bad_run_spares_overlap_the_aa_stream",
        "file": _REGISTRY,
        "function": "_v2_problems",
        "old": "            n = looks[-1] + max(0, spec.bad_run_replacements)  # the spares' streams too\n",
        "new": "            n = looks[-1]\n",
        "gates": [_T + "test_the_spares_continue_the_seed_streams_and_stay_clear_of_the_aa_stream"],
        "why": "the A/A stream is checked against the arms' data seeds up to the maximum only: a spare replicate "
               "may share its data order with an A/A replicate",
        "protects": "A/B rule",
    },
    {
        "name": "bad_run_replacements_without_a_ceiling",
        "file": _REGISTRY,
        "function": "_v2_problems",
        "old": "    elif spec.bad_run_replacements and spec.bad_run_ceiling is None:\n",
        "new": "    elif False:\n",
        "gates": [_T + "test_replacements_without_a_ceiling_or_negative_are_refused_naming_the_field"],
        "why": "a policy without a ceiling is accepted: it can never replace a run, yet the registration reads as "
               "if it protected the comparison",
        "protects": "A/B rule",
    },
]
