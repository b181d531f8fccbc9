"""Perturbations of reading a comparison (format in perturbations_attnres.py, plus
``protects``): the design card's one power line when the expected effect is the SESOI, the one owner of how a
confidence level is printed, the console's A/A row pointing at a check it prints, the forest plot's legend
clear of its title, ``ab status`` at 80 columns, and a comparison given by path named by its path again.
"""

from __future__ import annotations

_SEQ = "dormouse/ab/rule/sequential.py"
_STATUS = "dormouse/ab/comparison/status.py"
_S = "tests/ab/test_ab_sequential.py::"
_A = "tests/ab/test_design_assumptions.py::"
_P = "tests/ab/test_ab_plots.py::"
_ST = "tests/ab/test_status_table.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "card_two_powers_for_one_effect",
        "file": _SEQ,
        "function": "expects_the_sesoi",
        "old": "    return math.isclose(expected_effect, -design.sesoi, rel_tol=1e-12, abs_tol=0.0)\n",
        "new": "    return False\n",
        "gates": [_S + "test_the_card_prints_one_power_line_when_the_expected_effect_is_the_sesoi"],
        "why": "an expected effect equal to −SESOI is simulated twice: the card prints two powers of one effect "
               "that disagree in the third digit",
        "protects": "A/B rule",
    },
    {
        "name": "percent_prints_six_figures",
        "file": _SEQ,
        "function": "percent",
        "old": "    decimals = min(PERCENT_MAX_DECIMALS, max(0, 1 - math.floor(math.log10(miss))))\n",
        "new": "    decimals = 4\n",
        "gates": [_S + "test_a_confidence_level_prints_its_complement_to_two_significant_figures",
                  _S + "test_a_looks_sentence_prints_its_confidence_level_with_few_digits"],
        "why": "a look's confidence level is printed with digits that say nothing (\"99.7866 %\") and a round one "
               "with zeros (\"95.0000 %\")",
        "protects": "A/B rule",
    },
    {
        "name": "console_aa_check_under_another_name",
        "file": _STATUS,
        "function": "assumption_caption",
        "old": "            f\"A/A calibration check: {cal['sentence']}\" if cal else \"\",\n",
        "new": "            f\"A/A check: {cal['sentence']}\" if cal else \"\",\n",
        "gates": [_A + "test_the_console_prints_the_aa_check_its_aa_row_points_at"],
        "why": "the A/A row points at \"the A/A calibration check\" below the table, which the console prints "
               "under another name: a reader finds no such check",
        "protects": "A/B rule",
    },
    {
        "name": "forest_legend_over_the_title",
        "file": "dormouse/ab/reporting/plots.py",
        "function": "draw_forest",
        "old": "                 pad=FOREST_TITLE_PAD_PT)\n",
        "new": "                 pad=6)\n",
        "gates": [_P + "test_the_forest_legend_never_covers_the_title_whatever_the_arms"],
        "why": "the forest legend is drawn over the title",
        "protects": "A/B rule",
    },
    {
        "name": "status_cuts_a_long_pair_name",
        "file": _STATUS,
        "function": "status_table",
        "old": "        table.add_column(col, overflow=\"fold\", no_wrap=col != \"run\",\n",
        "new": "        table.add_column(col, overflow=\"ellipsis\", no_wrap=col != \"run\",\n",
        "gates": [_ST + "test_status_folds_a_long_tune_run_name_rather_than_squeezing_the_bpb"],
        "why": "`dormouse ab status` cuts a long run name to \"…\" at 80 columns",
        "protects": "A/B rule",
    },
    {
        "name": "status_bpb_back_in_the_last_column",
        "file": _STATUS,
        "function": "_status_cells",
        "old": "            r[\"note\"] or \" \".join(x for x in (rest, where) if x)]\n",
        "new": "            r[\"note\"] or \" \".join(x for x in (f\"bpb={bpb} \" * 3, rest, where) if x)]\n",
        "gates": [_ST + "test_status_at_80_columns_keeps_the_bpb_whole_and_a_finished_runs_eval_on_one_line"],
        "why": "`dormouse ab status` wraps a finished run's eval over several lines at 80 columns",
        "protects": "A/B rule",
    },
    {
        "name": "path_registration_named_by_its_name",
        "file": "dormouse/ab/comparison/registry.py",
        "function": "Registered.argument",
        "old": "        return shlex.quote(self.given if _looks_like_path(self.given) else self.spec.name)\n",
        "new": "        return shlex.quote(self.spec.name)\n",
        "gates": ["tests/ab/test_ab_names.py::test_a_registration_given_by_path_is_named_again_by_its_path",
                  "tests/flows/test_ab_given_by_path.py::"
                  "test_after_ctrl_c_the_hint_and_the_report_name_a_comparison_given_by_path_by_its_path"],
        "why": "after Ctrl-C of `dormouse ab path/to/my.yaml` the hint says `dormouse ab NAME`, which is not "
               "registered: the rerun it advises fails; the report's footer names it the same wrong way",
        "protects": "A/B rule",
    },
]
