"""Perturbations of the learning-rate curve in the report (dormouse/ab/tune/report.py, the
learning-rate plot and the forest plot's flag in dormouse/ab/reporting/plots.py; tests/ab/test_tune_report.py,
tests/ab/test_ab_plots.py; format in perturbations_attnres.py, plus ``protects``).

Each is a plausible one-line defect that would let a reader take a verdict for more than it is: a sign check
read at the wrong lr or in the wrong direction, an unbracketed arm not flagged, a plot that hides diverged
runs or draws the confirmatory mean where the arm did not run.
"""

from __future__ import annotations

_REPORT = "dormouse/ab/tune/report.py"
_PLOTS = "dormouse/ab/reporting/plots.py"
_T = "tests/ab/test_tune_report.py::"
_P = "tests/ab/test_ab_plots.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "lr_sign_check_at_the_arms_own_lr",
        "file": _REPORT,
        "function": "sign_checks",
        "old": "        arm_mean = mean_at(tune, arm, lr)\n",
        "new": "        arm_mean = mean_at(tune, arm, float(tune[\"chosen\"][arm]))\n",
        "gates": [_T + "test_the_sign_at_the_baselines_lr_holds_reverses_or_is_not_measured"],
        "why": "the sign check reads the arm at its own chosen lr, not the baseline's: it compares two arms at "
               "two lrs again, the very thing it is there to check, and a verdict that reverses looks like it holds",
        "protects": "A/B rule",
    },
    {
        "name": "lr_sign_check_ignores_the_verdicts_direction",
        "file": _REPORT,
        "function": "sign_checks",
        "old": "            outcome = HOLDS if (d < 0 if verdict == BETTER else d > 0) else REVERSES\n",
        "new": "            outcome = HOLDS if d < 0 else REVERSES\n",
        "gates": [_T + "test_the_sign_at_the_baselines_lr_holds_reverses_or_is_not_measured"],
        "why": "a `worse` verdict is said to hold where the arm is better at the baseline's lr",
        "protects": "A/B rule",
    },
    {
        "name": "lr_table_drops_the_unbracketed_flag",
        "file": _REPORT,
        "function": "_table",
        "old": "                     f\" | {f'**{side}** {UNBRACKETED_MARK}' if side else '—'} | \"\n",
        "new": "                     f\" | {'—'} | \"\n",
        "gates": [_T + "test_the_table_has_every_lr_any_arm_ran_and_each_arms_spend_and_flags"],
        "why": "the tune table no longer says an arm's chosen lr is still at an edge of what it ran: a verdict "
               "at the best lr tried reads as a verdict at the arm's optimum",
        "protects": "A/B rule",
    },
    {
        "name": "lr_verdict_table_drops_the_unbracketed_mark",
        "file": _REPORT,
        "function": "verdict_mark",
        "old": "    return f\" {UNBRACKETED_MARK}\" if unbracketed_side(results, arm) else \"\"\n",
        "new": "    return \"\"\n",
        "gates": [_T + "test_an_unbracketed_arm_is_marked_in_the_verdict_table_with_a_footnote"],
        "why": "the verdict table shows an unbracketed arm's verdict unmarked: a reader of the verdicts alone "
               "misses that it holds only at the best lr tried",
        "protects": "A/B rule",
    },
    {
        "name": "lr_plot_drops_diverged_runs",
        "file": _REPORT,
        "function": "lr_curves",
        "old": "            diverged += [lr for v in by_lr[key] if v == \"diverged\"]\n",
        "new": "            diverged += []\n",
        "gates": [_T + "test_the_lr_plot_draws_every_tune_run_the_choice_and_the_confirmatory_mean"],
        "why": "the learning-rate plot leaves out the diverged tune runs: an arm that is stability-limited "
               "looks as if its curve simply stopped",
        "protects": "A/B rule",
    },
    {
        "name": "lr_plot_confirmatory_mean_at_the_wrong_lr",
        "file": _PLOTS,
        "function": "_lr_panel",
        "old": "            bars = ax.errorbar([curve.chosen], [mean],",
        "new": "            bars = ax.errorbar([min(x for x, _ in curve.runs)], [mean],",
        "gates": [_T + "test_the_lr_plot_draws_every_tune_run_the_choice_and_the_confirmatory_mean"],
        "why": "the confirmatory mean is drawn at the arm's smallest tune lr, not at the lr it ran at",
        "protects": "A/B rule",
    },
    {
        "name": "lr_plot_confirmatory_spread_dropped",
        "file": _PLOTS,
        "function": "_lr_panel",
        "old": "yerr=[sd],",
        "new": "yerr=[0.0],",
        "gates": [_T + "test_the_lr_plot_draws_every_tune_run_the_choice_and_the_confirmatory_mean"],
        "why": "the confirmatory mean is drawn without its spread over the replicates",
        "protects": "A/B rule",
    },
    {
        "name": "forest_drops_the_unbracketed_label",
        "file": _PLOTS,
        "function": "_forest_label",
        "old": "    return name + (\" (A/A)\" if a.role == \"aa\" else \"\") + (f\" (unbracketed: {side})\" if side "
               "else \"\")\n",
        "new": "    return name + (\" (A/A)\" if a.role == \"aa\" else \"\")\n",
        "gates": [_P + "test_forest_plot_names_an_unbracketed_arm_and_draws_its_mean_hollow"],
        "why": "the forest plot names an unbracketed arm like any other",
        "protects": "A/B rule",
    },
    {
        "name": "forest_unbracketed_mean_filled",
        "file": _PLOTS,
        "function": "draw_forest",
        "old": "markerfacecolor=\"none\" if unbracketed_side(results, name) else \"black\",",
        "new": "markerfacecolor=\"black\",",
        "gates": [_P + "test_forest_plot_names_an_unbracketed_arm_and_draws_its_mean_hollow"],
        "why": "an unbracketed arm's mean is drawn like any other's on the forest plot",
        "protects": "A/B rule",
    },
]
