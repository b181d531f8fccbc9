"""Perturbations of what an arm's author relies on: the shipped example plugin (docs/examples/scalar_gate.py,
the arm docs/arms.md walks through) and ``dormouse arms``, the listing of the arms a command knows
(tests/falsification; format in perturbations_attnres.py).

The example is the template an author copies, so its own tests are the ones docs/arms.md tells them to write:
each must go red when the mechanism it protects breaks. The listing is what a user reads to learn an arm's
switch and options, and where it came from.
"""

from __future__ import annotations

_EXAMPLE = "docs/examples/scalar_gate.py"
_LIST = "dormouse/cli/arms.py"
_T = "tests/arms/test_example_plugin.py::"
_C = "tests/flows/test_arms_command.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "sgate_gate_ignores_g",
        "file": _EXAMPLE,
        "function": "ScalarGate.absorb",
        "old": "torch.sigmoid(self.g[slot])",
        "new": "torch.sigmoid(self.g[slot].detach() * 0)",
        "gates": [_T + "test_each_slots_gate_moves_the_logits"],
        "why": "the example's gate no longer reads g_s (a fixed 0.5): the arm runs and counts, but its parameters "
               "are dead",
        "protects": "mechanism",
    },
    {
        "name": "sgate_ran_not_counted",
        "file": _EXAMPLE,
        "function": "ScalarGate.absorb",
        "old": "        self.counters.count_ran(self.name)\n",
        "new": "        if slot % 2 == 0:\n            self.counters.count_ran(self.name)\n",
        "gates": [_T + "test_its_counter_counts_ran_equal_to_asked_over_a_forward"],
        "why": "the example counts ran for its attention slots only: ran < asked, the count a dead MLP slot would "
               "leave, and a counter the author's copy would inherit",
        "protects": "counters",
    },
    {
        "name": "sgate_init_unchecked",
        "file": _EXAMPLE,
        "function": "ScalarGate.config_problems",
        "old": "if math.isfinite(init) and abs(init) <= INIT_LIMIT:",
        "new": "if True:",
        "gates": [_T + "test_its_option_is_refused_out_of_range_naming_the_field"],
        "why": "model.sgate.init is accepted at any value: a gate started saturated (or at nan) trains nothing, "
               "and no line names the field",
        "protects": "arms' set-up",
    },
    {
        "name": "arms_list_sorted_by_name",
        "file": _LIST,
        "function": "arm_infos",
        "old": "for name, cls in arm_classes().items():",
        "new": "for name, cls in sorted(arm_classes().items()):",
        "gates": [_C + "test_arms_lists_every_registered_arm_in_registry_order_with_its_switch_options_and_source"],
        "why": "dormouse arms lists the arms alphabetically, not in registry order (the eval line's counter order "
               "and the tie rule's)",
        "protects": "arms' set-up",
    },
    {
        "name": "arms_list_default_unmarked",
        "file": _LIST,
        "function": "arm_infos",
        "old": "out.append(ArmInfo(name, bool(cls.default), f\"model.{switch}\" if switch else None,",
        "new": "out.append(ArmInfo(name, False, f\"model.use_{name}\",",
        "gates": [_C + "test_the_default_arm_is_the_one_marked_without_a_switch"],
        "why": "dormouse arms gives the default arm a switch it does not have (model.use_rezero is refused as an "
               "unknown key) and marks no arm the default",
        "protects": "arms' set-up",
    },
    {
        "name": "arms_list_plugin_shown_as_module",
        "file": _LIST,
        "function": "source_of",
        "old": "    plugin = plugin_of_arm(name)\n",
        "new": "    plugin = None\n",
        "gates": [_C + "test_a_plugin_files_arm_is_listed_last_with_its_file_origin_and_option_defaults"],
        "why": "dormouse arms no longer says which plugin file an arm came from, nor how it was loaded: a plugin "
               "arm is listed as a bare module",
        "protects": "arms' set-up",
    },
    {
        "name": "a_test_writes_the_arm_order_out",
        "file": "tests/ab/test_ab_verdict.py",
        "function": "test_each_verdict_states_what_was_tested_and_keeps_by_the_registry_order",
        "old": "{', then '.join(ARMS)})\"",
        "new": "prenorm, then rezero, then gr, then attnres)\"",
        "gates": ["tests/arms/test_extra_arm.py::test_the_tests_that_read_the_arm_set_pass_with_an_extra_arm_registered"],
        "why": "a test expects the built-in arms written out instead of the registry's order: green today, red the "
               "day an arm (built-in or plugin) is added",
        "protects": "arms' set-up",
    },
]
