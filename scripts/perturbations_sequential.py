"""Perturbations of protocol v2's decision rule (issue 22; dormouse/ab/sequential.py; scripts/falsify.py;
format in perturbations_attnres.py, plus ``protects``).

Each turns the registered rule into a plausible other one: the v1 margin back, α not spent across looks,
the family taken from the arms present, `worse` without significance, TOST without spending.
"""

from __future__ import annotations

_SEQ = "dormouse/ab/sequential.py"
_T = "tests/test_ab_sequential.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "v1_margin_from_the_spread",
        "file": _SEQ,
        "old": "    margin = sesoi\n",
        "new": "    margin = np.maximum(sesoi, 2 * se * np.sqrt(lb.n))\n",
        "gates": [_T + "test_tie_at_the_sesoi_is_at_most_alpha"],
        "why": "the old v1 rule back: the equivalence margin is max(SESOI, 2·sd of the data) instead of the "
               "registered SESOI, a noise scale that does not shrink with replicates",
        "protects": "A/B rule",
    },
    {
        "name": "alpha_not_spent_across_looks",
        "file": _SEQ,
        "old": "    sup_inc = np.diff(np.concatenate([[0.0], sup_cum]))\n",
        "new": "    sup_inc = np.full_like(sup_cum, sup_level)\n",
        "gates": [_T + "test_better_or_worse_at_no_effect_is_at_most_alpha",
                  _T + "test_boundary_table_spends_alpha_by_the_obf_function"],
        "why": "every look tests superiority at the nominal α/n_arms: looking again and again inflates the "
               "family-wise error",
        "protects": "A/B rule",
    },
    {
        "name": "family_from_the_arms_present",
        "file": _SEQ,
        "old": "    family = design.n_arms  # registered, never len(diffs): a failed arm keeps its share of α\n",
        "new": "    family = len(diffs)  # registered, never len(diffs): a failed arm keeps its share of α\n",
        "gates": [_T + "test_a_failed_arm_stays_in_the_family"],
        "why": "an arm whose runs failed drops out of the multiplicity family, which gives the others more α",
        "protects": "A/B rule",
    },
    {
        "name": "worse_without_significance",
        "file": _SEQ,
        "old": "    worse = lo > 0\n",
        "new": "    worse = mean > 0\n",
        "gates": [_T + "test_worse_needs_the_significance_better_needs",
                  _T + "test_better_or_worse_at_no_effect_is_at_most_alpha"],
        "why": "`worse` is declared from the sign of the mean, without the significance `better` needs",
        "protects": "A/B rule",
    },
    {
        "name": "tost_not_spent_across_looks",
        "file": _SEQ,
        "old": "    eq_inc = np.diff(np.concatenate([[0.0], eq_cum]))\n",
        "new": "    eq_inc = np.full_like(eq_cum, alpha)\n",
        "gates": [_T + "test_tie_at_the_sesoi_is_at_most_alpha"],
        "why": "each look runs the TOST at the nominal α: repeated equivalence tests inflate P(tie | |Δ| = SESOI)",
        "protects": "A/B rule",
    },
]
