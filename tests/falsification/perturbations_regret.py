"""Perturbations of the tuning regret (tests/falsification; format in perturbations_attnres.py). ``protects`` names
what a defect here would break."""

from __future__ import annotations

_REGRET = "dormouse/ab/tune/regret.py"
_T = "tests/ab/test_tune_regret.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "regret_from_one_seed",
        "file": _REGRET,
        "function": "regret_bound",
        "old": "    mc, nc = fmean(finite[chosen]), len(finite[chosen])\n",
        "new": "    mc, nc = finite[chosen][0], 1\n",
        "gates": [_T + "test_the_regret_bound_is_the_hand_computed_upper_bound_from_the_seeds_spread"],
        "why": "the chosen lr's side of the bound read from its first seed: the winner's curse the tune seeds are "
               "there to remove comes back (the hand-computed bound 0.0998 becomes 0.0825)",
        "protects": "A/B rule",
    },
    {
        "name": "regret_bound_not_corrected_over_the_other_lrs",
        "file": _REGRET,
        "function": "regret_bound",
        "old": "    t = float(stats.t.isf((1 - LEVEL) / len(others), df))\n",
        "new": "    t = float(stats.t.isf(1 - LEVEL, df))\n",
        "gates": [_T + "test_the_regret_bound_is_the_hand_computed_upper_bound_from_the_seeds_spread"],
        "why": "each comparison with another lr at 95 % on its own: the maximum over them is not a 95 % bound",
        "protects": "A/B rule",
    },
    {
        "name": "better_verdict_weighed_against_its_own_regret",
        "file": _REGRET,
        "function": "moving_regret",
        "old": "    pick = {\"better\": [baseline], \"worse\": [arm], \"tie\": [arm, baseline]}.get(verdict, [])\n",
        "new": "    pick = {\"better\": [arm], \"worse\": [baseline], \"tie\": [arm, baseline]}.get(verdict, [])\n",
        "gates": [_T + "test_a_verdict_is_fragile_when_its_margin_is_smaller_than_the_regret_that_could_move_it"],
        "why": "a `better` is weighed against the arm's own tuning regret, which can only widen its win: a verdict "
               "a better-tuned baseline would undo is not flagged",
        "protects": "A/B rule",
    },
]
