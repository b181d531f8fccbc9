"""Perturbations of the registered reference (tests/falsification; format in perturbations_attnres.py). ``protects``
names what a defect here would break."""

from __future__ import annotations

_LOOKS = "dormouse/ab/rule/looks.py"
_T = "tests/ab/test_reference.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "reference_mean_over_the_wrong_replicates",
        "file": _LOOKS,
        "function": "mean_reference",
        "old": "        a = aa_by.get(b.replicate)\n",
        "new": "        a = aa_by.get(b.replicate + 1)\n",
        "gates": [_T + "test_a_mean_reference_decides_against_the_mean_of_the_baseline_and_its_aa_repeat"],
        "why": "each replicate's reference averages the baseline with the next replicate's A/A run: the pairing "
               "by init seed is broken and the last replicate has no reference",
        "protects": "A/B rule",
    },
    {
        "name": "registered_reference_ignored",
        "file": _LOOKS,
        "function": "reference_runs",
        "old": "    if against_the_mean(spec):\n",
        "new": "    if False:\n",
        "gates": [_T + "test_a_mean_reference_decides_against_the_mean_of_the_baseline_and_its_aa_repeat"],
        "why": "a registration asking for the mean reference is decided against the baseline alone, while its "
               "report says the mean",
        "protects": "A/B rule",
    },
]
