"""Perturbations of a registered study's wiring (dormouse/ab/study/registry.py, dormouse/ab/study/report.py; format in
perturbations_attnres.py, plus ``protects``).

Each puts back a plausible slip: the points sharing the template's seeds (the rule treats them as
independent), every point at the study's α instead of α/P, the axis never set (every point the same model),
the interaction fed every difference an arm ran instead of those its point decision used, and a stride that
overlaps streams accepted.
"""

from __future__ import annotations

_ST = "dormouse/ab/study/registry.py"
_SR = "dormouse/ab/study/report.py"
_T = "tests/flows/test_study.py::"
_POINTS = _T + "test_each_point_is_the_template_at_alpha_over_p_with_the_axis_and_its_own_seed_streams"

PERTURBATIONS: list[dict] = [
    {
        "name": "study_points_share_seeds",
        "file": _ST,
        "function": "_shifted",
        "old": "    shift = index * stride\n",
        "new": "    shift = 0 * index * stride\n",
        "gates": [_POINTS, _T + "test_a_study_runs_every_point_then_decides_each_arms_change"],
        "why": "every point on the template's seed streams: the points' differences share initial weights and "
               "data orders, and the contrast's se (a sum over independent points) is wrong",
        "protects": "data/eval",
    },
    {
        "name": "study_points_at_the_family_alpha",
        "file": _ST,
        "function": "_shifted",
        "old": "    spec.alpha = float(template.alpha) / n_points\n",
        "new": "    spec.alpha = float(template.alpha)\n",
        "gates": [_POINTS],
        "why": "each point's comparison at the study's α: the point verdicts, a family over points × arms, "
               "exceed α (P times as many chances)",
        "protects": "A/B rule",
    },
    {
        "name": "study_axis_not_set",
        "file": _ST,
        "function": "_shifted",
        "old": "    spec.fixed = [*template.fixed, f\"{axis}={value}\"]\n",
        "new": "    spec.fixed = [*template.fixed]\n",
        "gates": [_POINTS, _T + "test_a_study_runs_every_point_then_decides_each_arms_change"],
        "why": "the axis never reaches a run: every point trains the same model and the study measures noise",
        "protects": "A/B rule",
    },
    {
        "name": "study_reads_every_difference",
        "file": _SR,
        "function": "decision_diffs",
        "old": "    return diffs[: int(n)] if n is not None else diffs\n",
        "new": "    return diffs\n",
        "gates": [_T + "test_the_interaction_reads_what_each_point_decision_used"],
        "why": "the interaction fed differences beyond what the point decision used: the study card simulates "
               "the decisions' n, so its error rates no longer describe the rule run",
        "protects": "A/B rule",
    },
    {
        "name": "study_overlapping_streams_accepted",
        "file": _ST,
        "function": "_seed_overlaps",
        "old": "                    if other_point != p.name and max(seeds.start, other.start) < min(seeds.stop, other.stop):\n",
        "new": "                    if other_point != p.name and field_name == other_field and "
               "max(seeds.start, other.start) < min(seeds.stop, other.stop):\n",
        "gates": [_T + "test_a_bad_study_field_is_refused_naming_it"],
        "why": "only the same stream compared across points: a point's data orders may repeat another point's "
               "A/A data orders, and the points are no longer independent",
        "protects": "data/eval",
    },
    {
        "name": "study_status_calls_a_started_point_undecided",
        "file": _SR,
        "function": "point_state",
        "old": "    return \"started, no results written yet\" if p[\"started\"] else \"not started\"\n",
        "new": "    return \"no look decided yet\"\n",
        "gates": [_T + "test_status_tells_a_started_point_without_results_from_a_point_not_started"],
        "why": "a point restored from a carry, whose looks were taken, is said to have decided none, and a point "
               "never started reads the same: `ab status` misleads whoever resumes the study",
        "protects": "A/B rule",
    },
]
