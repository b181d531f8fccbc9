"""Perturbations of the width ladder's rules (tests/falsification; format in perturbations_attnres.py). ``protects``
names what a defect here would break."""

from __future__ import annotations

_REG = "dormouse/ab/study/registry.py"
_PLANS = "dormouse/ab/study/plans.py"
_T = "tests/ab/test_width_ladder.py::"
_GROWS = _T + "test_each_point_grows_heads_and_mlp_with_the_width_and_trains_bytes_per_parameter"

PERTURBATIONS: list[dict] = [
    {
        "name": "ladder_heads_fixed_instead_of_grown",
        "file": _REG,
        "function": "width_overrides",
        "old": "    out = [f\"model.n_heads={int(value) // int(width.head_dim)}\"]\n",
        "new": "    out = [f\"model.n_heads={int(width.head_dim) // 4}\"]\n",
        "gates": [_GROWS],
        "why": "every point gets the same head count: the head dimension grows with the width, and µP's attention "
               "scale and the ladder's registered shape are not what ran",
        "protects": "A/B rule",
    },
    {
        "name": "ladder_budget_counts_an_untied_head",
        "file": _REG,
        "function": "data_budget",
        "old": "    n = shared_params(int(cfg.model.d_model), cfg.model.mlp_hidden, bool(cfg.model.tie_head))\n",
        "new": "    n = shared_params(int(cfg.model.d_model), cfg.model.mlp_hidden, False)\n",
        "gates": [_GROWS],
        "why": "the budget's parameter count adds a head the tied model does not have: every point trains more "
               "bytes per parameter than registered, more so at small widths",
        "protects": "A/B rule",
    },
    {
        "name": "ladder_repeats_the_training_split_silently",
        "file": _PLANS,
        "function": "_repeats",
        "old": "            for p in ladder_points(study, plans) if p.epochs > float(rule.epochs) + 1e-9]\n",
        "new": "            for p in ladder_points(study, plans) if False]\n",
        "gates": [_T + "test_a_point_that_would_repeat_its_training_bytes_is_refused_before_any_run"],
        "why": "a point asks for more bytes than the corpus holds and trains on repeated data, unannounced: its "
               "loss is not the loss of the registered data budget",
        "protects": "data/eval",
    },
    {
        "name": "ladder_width_rule_on_another_axis_accepted",
        "file": _REG,
        "function": "_ladder_problems",
        "old": "        if block.axis != WIDTH_AXIS:\n",
        "new": "        if False:\n",
        "gates": [_T + "test_a_bad_ladder_field_is_refused_naming_it"],
        "why": "a width rule on another axis is accepted: it sets heads from the loop depth's values",
        "protects": "A/B rule",
    },
    {
        "name": "trend_per_decade_reported_over_the_range",
        "file": "dormouse/ab/study/interaction.py",
        "function": "InteractionDesign.span",
        "old": "        return float(u[-1] - u[0]) if self.positions is None else 1.0\n",
        "new": "        return float(u[-1] - u[0])\n",
        "gates": [_T + "test_the_trend_in_log10_flops_is_the_change_per_decade_of_each_points_budget"],
        "why": "the change registered per decade of compute is computed over the ladder's whole range: a smallest "
               "change and a verdict in the wrong unit, by the number of decades the ladder spans",
        "protects": "A/B rule",
    },
    {
        "name": "trend_positions_in_natural_log",
        "file": _REG,
        "function": "RegisteredStudy.interaction_design",
        "old": "        positions = tuple(math.log10(c) for c in self.point_flops())",
        "new": "        positions = tuple(math.log(c) for c in self.point_flops())",
        "gates": [_T + "test_the_trend_in_log10_flops_is_the_change_per_decade_of_each_points_budget"],
        "why": "the points' x is ln FLOPs, not log10: the change 'per decade' is per e-fold, 2.3 times too small",
        "protects": "A/B rule",
    },
    {
        "name": "trend_in_flops_without_flops_accepted",
        "file": _REG,
        "function": "_ladder_problems",
        "old": "    elif block.trend == TREND_FLOPS and not flops_budgets:\n",
        "new": "    elif False:\n",
        "gates": [_T + "test_a_trend_in_flops_without_flops_budgets_is_refused"],
        "why": "a trend in FLOPs is registered where the points have no FLOPs budget: it fails at the first "
               "analysis, after every run, instead of before any",
        "protects": "A/B rule",
    },
]
