"""Perturbations of the compute ladder's power-law fit (tests/falsification; format in perturbations_attnres.py).
``protects`` names what a defect here would break."""

from __future__ import annotations

_FIT = "dormouse/ab/study/scaling_fit.py"
_T = "tests/ab/test_scaling_fit.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "power_law_bootstrap_pools_the_points",
        "file": _FIT,
        "function": "bootstrap_power_law",
        "old": "        means[:, j] = r[rng.integers(0, r.size, size=(n_boot, r.size))].mean(axis=1)\n",
        "new": "        means[:, j] = np.concatenate(reps)[rng.integers(0, sum(x.size for x in reps), "
               "size=(n_boot, r.size))].mean(axis=1)\n",
        "gates": [_T + "test_replicates_are_resampled_within_each_point"],
        "why": "the bootstrap draws each point's replicates from every point's losses: the resampled means lose the "
               "curve, and the intervals of E, A and α are meaningless",
        "protects": "A/B rule",
    },
    {
        "name": "power_law_interval_at_a_fixed_level",
        "file": _FIT,
        "function": "bootstrap_power_law",
        "old": "    q = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]\n",
        "new": "    q = [0.25, 0.75]\n",
        "gates": [_T + "test_bootstrap_95pct_intervals_cover_true_alpha_and_loss_at_1e18_in_at_least_80pct_of_ladders"],
        "why": "the intervals are the middle half of the refits whatever level is asked: a '95 %' interval of the "
               "extrapolation covers the truth far less often",
        "protects": "A/B rule",
    },
    {
        "name": "power_law_fit_from_two_points",
        "file": _FIT,
        "function": "_enough",
        "old": "    if n < 3:\n",
        "new": "    if n < 2:\n",
        "gates": [_T + "test_fewer_than_three_distinct_flops_raise_value_error_naming_the_argument"],
        "why": "three parameters are fitted to two points: any E fits, and the curve and its extrapolation are "
               "whatever the solver's start was",
        "protects": "A/B rule",
    },
]
