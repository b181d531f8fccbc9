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
    {
        "name": "delta_at_resamples_the_arms_apart",
        "file": _FIT,
        "function": "bootstrap_delta_at",
        "old": "            draws.append(delta([r[i] for r, i in zip(a_reps, idx)], [r[i] for r, i in zip(b_reps, idx)]))\n",
        "new": "            draws.append(delta([r[i] for r, i in zip(a_reps, idx)], "
               "[r[rng.integers(0, r.size, size=r.size)] for r in b_reps]))\n",
        "gates": [_T + "test_delta_at_an_extrapolated_compute_is_the_shift_between_two_parallel_laws"],
        "why": "the arm's and the baseline's replicates are resampled apart: the seeds they share no longer cancel, "
               "and Δ's interval at the extrapolated compute carries both arms' seed noise",
        "protects": "A/B rule",
    },
    {
        "name": "ladder_report_drops_the_extrapolation_label",
        "file": "dormouse/ab/study/report.py",
        "function": "scaling_lines",
        "old": "training FLOPs: an extrapolation** of two laws",
        "new": "training FLOPs** of two laws",
        "gates": ["tests/ab/test_width_ladder.py::"
                  "test_a_finished_ladder_reports_each_arms_fitted_law_and_labels_delta_at_1e18_an_extrapolation"],
        "why": "Δ at 1e18 FLOPs, three decades past the ladder, reads as a measurement: nothing says it is the two "
               "fitted laws carried far outside their data",
        "protects": "A/B rule",
    },
]
