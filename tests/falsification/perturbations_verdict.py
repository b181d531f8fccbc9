"""Perturbations of the A/B rule (issue 10, gate 7 and the undecided verdict; tests/falsification; format in
perturbations_attnres.py, plus ``protects``).

The verdict is what a researcher reads: each of these turns a registered rule into a plausible other one
(raw p for Holm, the old "tie unless proven" rule, a closed band, a sentence built from the mean).
"""

from __future__ import annotations

_STATS = "dormouse/ab/stats.py"
_REPORT = "dormouse/ab/report.py"
_REGISTRY = "dormouse/ab/registry.py"
_V = "tests/test_ab_verdict.py::"
_S = "tests/test_ab_stats.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "verdict_uses_raw_p_not_holm",
        "file": _REPORT,
        "function": "analyze",
        "old": "            p_adj = r[\"p_holm\"] if r[\"role\"] == \"arm\" else None\n",
        "new": "            p_adj = r[\"p\"] if r[\"role\"] == \"arm\" else None\n",
        "gates": [_V + "test_verdict_follows_holm_not_the_raw_p"],
        "why": "the report decides on the raw p: Holm is printed but takes no part in the verdict",
        "protects": "A/B rule",
    },
    {
        "name": "undecided_reported_as_tie",
        "file": _STATS,
        "function": "decide",
        "old": "    elif inside:\n",
        "new": "    elif True:\n",
        "gates": [_S + "test_verdict_rules"],
        "why": "the old rule: whatever is not better/worse is a tie, 'the mechanism is rejected', although "
               "the interval reaches past ±δ",
        "protects": "A/B rule",
    },
    {
        "name": "effect_size_threshold_strict",
        "file": _STATS,
        "function": "decide",
        "old": "    big = abs(diff_mean) >= delta\n",
        "new": "    big = abs(diff_mean) > delta\n",
        "gates": [_S + "test_verdict_boundaries"],
        "why": "|mean Δ| must exceed δ rather than reach it (the registration says ≥)",
        "protects": "A/B rule",
    },
    {
        "name": "tie_band_closed",
        "file": _STATS,
        "function": "decide",
        "old": "    inside = -delta < lo and hi < delta\n",
        "new": "    inside = -delta <= lo and hi <= delta\n",
        "gates": [_S + "test_verdict_boundaries"],
        "why": "an interval touching ±δ counts as shown smaller than δ",
        "protects": "A/B rule",
    },
    {
        "name": "sentence_side_from_the_mean",
        "file": _REPORT,
        "function": "rule_sentence",
        "old": "    side = \"lies below 0\" if d.below_zero else \"lies above 0\" if d.above_zero else ",
        "new": "    side = \"lies below 0\" if d.diff_mean < 0 else \"lies above 0\" if d.diff_mean > 0 else ",
        "gates": [_V + "test_no_verdict_sentence_contradicts_its_numbers"],
        "why": "the report's sentence says where the interval lies from the mean's sign: it contradicts the "
               "interval printed next to it",
        "protects": "A/B rule",
    },
    {
        "name": "undecided_keeps_nothing",
        "file": _REPORT,
        "function": "analyze",
        "old": "        elif r[\"verdict\"] in (stats.TIE, stats.UNDECIDED):\n",
        "new": "        elif r[\"verdict\"] in (stats.TIE,):\n",
        "gates": [_V + "test_each_verdict_states_its_rule_and_the_command_of_the_extension"],
        "why": "an undecided arm names no arm to keep: the registration says the simpler arm stays",
        "protects": "A/B rule",
    },
    {
        "name": "extension_may_change_the_fixed_overrides",
        "file": _REGISTRY,
        "function": "EXTENSION_MAY_DIFFER",
        "old": "EXTENSION_MAY_DIFFER = (\"name\", \"description\", \"seeds\", ",
        "new": "EXTENSION_MAY_DIFFER = (\"name\", \"description\", \"seeds\", \"fixed\", ",
        "gates": [_V + "test_the_registered_extension_only_adds_seeds"],
        "why": "the registered extension may change what was held fixed: 'more seeds' becomes another comparison",
        "protects": "A/B rule",
    },
    {
        "name": "published_registration_edited_after_the_run",
        "file": "conf/ab/residual_cpu.yaml",
        "function": "<file>",
        "old": "seeds: [1, 2, 3, 4, 5]\n",
        "new": "seeds: [1, 2, 3, 4, 6]\n",
        "gates": ["tests/test_published_results.py::test_published_results_come_from_the_registered_file"],
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
        "gates": ["tests/test_published_results.py::test_published_verdicts_follow_the_registered_rule"],
        "why": "a published verdict that the registered rule does not give for the published numbers (GR's "
               "better turned undecided): the README's table would no longer follow from the runs",
        "protects": "A/B rule",
    },
]
