"""Perturbations of the registered contrast (tests/falsification; format in perturbations_attnres.py). ``protects``
names what a defect here would break."""

from __future__ import annotations

_CONTRAST = "dormouse/ab/rule/contrast.py"
_LOOKS = "dormouse/ab/rule/looks.py"
_REGISTRY = "dormouse/ab/comparison/registry.py"
_T = "tests/ab/test_contrast.py::"
_PAIRED = _T + "test_a_contrast_keeps_its_arms_running_after_their_verdicts_and_decides_them_paired"
_RATES = _T + "test_the_registered_contrast_holds_its_error_rates_as_one_test_at_alpha"

PERTURBATIONS: list[dict] = [
    {
        "name": "contrast_arms_stop_with_their_own_verdicts",
        "file": _LOOKS,
        "function": "ConfirmatoryLooks.replay",
        "old": "            arms = (helpers + active if active else []) + for_contrast\n",
        "new": "            arms = helpers + active if active else []\n",
        "gates": [_PAIRED],
        "why": "the contrast's arms stop once both are decided against the baseline: the contrast is left at its "
               "first look with too few replicates, or decided on runs that were never made",
        "protects": "A/B rule",
    },
    {
        "name": "contrast_against_the_baseline",
        "file": _LOOKS,
        "function": "_contrast_look",
        "old": "    diffs = paired_differences(recs[state.arm], {r.replicate: r for r in recs[state.against]})\n",
        "new": "    diffs = paired_differences(recs[state.arm], {r.replicate: r for r in "
               "[records[plan.run_of(plan.spec.baseline, k).name] for k in range(1, n + 1) "
               "if plan.run_of(plan.spec.baseline, k).name in records]})\n",
        "gates": [_PAIRED],
        "why": "the contrast's Δ is the arm against the baseline, not against the arm it names: the registered "
               "question is never asked",
        "protects": "A/B rule",
    },
    {
        "name": "contrast_unpaired_replicates",
        "file": _LOOKS,
        "function": "_contrast_look",
        "old": "{r.replicate: r for r in recs[state.against]}",
        "new": "{r.replicate + 1: r for r in recs[state.against]}",
        "gates": [_PAIRED],
        "why": "each replicate of the arm is paired with the previous replicate of the other: the shared seeds "
               "no longer cancel, and one pair is lost",
        "protects": "A/B rule",
    },
    {
        "name": "contrast_at_twice_alpha",
        "file": _CONTRAST,
        "function": "contrast_design",
        "old": "    return Design(alpha=float(spec.alpha), ",
        "new": "    return Design(alpha=2 * float(spec.alpha), ",
        "gates": [_RATES],
        "why": "the contrast's boundaries at 2α: it claims better or worse about twice as often as registered "
               "when the two arms do not differ",
        "protects": "A/B rule",
    },
    {
        "name": "contrast_sesoi_of_the_arms",
        "file": _CONTRAST,
        "function": "contrast_design",
        "old": "sesoi=float(spec.contrast.sesoi)",
        "new": "sesoi=float(spec.sesoi)",
        "gates": [_RATES],
        "why": "the contrast's tie is tested against the arms' SESOI (0.02), not its own (0.015): a difference at its "
               "registered margin is called a tie far more often than α",
        "protects": "A/B rule",
    },
    {
        "name": "contrast_of_one_arm_accepted",
        "file": _REGISTRY,
        "function": "_contrast_problems",
        "old": "    if contrast.arm == contrast.against:\n",
        "new": "    if False:\n",
        "gates": [_T + "test_a_bad_contrast_is_refused_naming_the_field"],
        "why": "a contrast of an arm against itself is accepted: every Δ is 0 and it always ends a tie",
        "protects": "A/B rule",
    },
]
