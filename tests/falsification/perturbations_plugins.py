"""Perturbations of the plugin arms (dormouse/arms/plugins.py and where a run records and reloads its plugin;
format in perturbations_attnres.py): a researcher's arm that loads half, silently becomes another arm, or
travels to a worker without its code."""

from __future__ import annotations

_PLUGINS = "dormouse/arms/plugins.py"
_T = "tests/arms/test_plugins.py::"
_FLOW = "tests/flows/test_plugin_flows.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "plugin_option_only_before_the_command",
        "file": "dormouse/cli/exits.py",
        "function": "plugins_first",
        "old": "    return moved + rest\n",
        "new": "    return args\n",
        "gates": [_T + "test_plugin_options_anywhere_on_the_line_move_in_front_of_the_command"],
        "why": "`dormouse train ... --plugin my_arms.py` (the option after the command) is not taken: the plugin "
               "is never loaded and its switch is refused as an unknown key",
        "protects": "arms' set-up",
    },
    {
        "name": "failed_plugin_leaves_its_arms_registered",
        "file": _PLUGINS,
        "function": "_import",
        "old": "        for name in set(defined_arm_classes()) - before:\n            unregister_arm(name)\n",
        "new": "",
        "gates": [_T + "test_a_plugin_that_fails_after_defining_an_arm_leaves_no_arm_behind"],
        "why": "a plugin that raises after defining its arm keeps that arm registered: a broken module's arm can "
               "be trained",
        "protects": "arms' set-up",
    },
    {
        "name": "plugin_without_an_arm_accepted",
        "file": _PLUGINS,
        "function": "_finish",
        "old": "    if not arms:\n",
        "new": "    if False:\n",
        "gates": [_T + "test_a_bad_plugin_is_refused_in_one_line_naming_it[x = 1\\n-defines no arm]"],
        "why": "a plugin that defines no arm (a typo in `name`, the wrong base class) loads silently and the "
               "user's switch is then refused as unknown, far from the cause",
        "protects": "arms' set-up",
    },
    {
        "name": "unknown_switch_read_as_the_default_arm",
        "file": "dormouse/arms/registry.py",
        "function": "model_arm",
        "old": "    if unknown:\n",
        "new": "    if False:\n",
        "gates": [_T + "test_a_switch_for_an_arm_no_code_defines_is_refused_not_read_as_the_default"],
        "why": "a saved config that selects a plugin arm whose plugin is not loaded builds the default arm "
               "instead (eval then fails in load_state_dict, or scores another model)",
        "protects": "arms' set-up",
    },
    {
        "name": "changed_plugin_source_not_noticed",
        "file": _PLUGINS,
        "function": "load_recorded",
        "old": "        if plugin.sha256 != sha:\n",
        "new": "        if False:\n",
        "gates": [_T + "test_a_recorded_plugin_whose_source_changed_is_named"],
        "why": "a run read back with a plugin whose source changed since it trained says nothing",
        "protects": "arms' set-up",
    },
    {
        "name": "run_records_no_plugin",
        "file": "dormouse/train/start.py",
        "function": "provenance",
        "old": "run_plugins.PROVENANCE_KEY: records_for(arm_name(cfg)),",
        "new": "run_plugins.PROVENANCE_KEY: [],",
        "gates": [_FLOW + "test_a_plugin_file_arm_trains_validates_checks_samples_evaluates_and_resumes"],
        "why": "a plugin arm's run does not record its plugin: eval, sample, logs and resume cannot load it",
        "protects": "arms' set-up",
    },
    {
        "name": "eval_does_not_load_the_runs_plugin",
        "file": "dormouse/train/trained.py",
        "function": "load_model",
        "old": "        for note in load_run_plugins(owner.dir):\n",
        "new": "        for note in []:\n",
        "gates": [_FLOW + "test_a_plugin_file_arm_trains_validates_checks_samples_evaluates_and_resumes"],
        "why": "`dormouse eval`/`sample` of a plugin arm's run need --plugin although the run recorded it",
        "protects": "arms' set-up",
    },
    {
        "name": "pair_task_pickled_without_its_plugins",
        "file": "dormouse/ab/runs/job.py",
        "function": "_task_with_plugins",
        "old": "    activate(specs, origin=\"the comparison's driver\")\n",
        "new": "",
        "gates": ["tests/ab/test_run_task_plugins.py::test_a_run_task_unpickles_in_a_fresh_process_with_its_plugin"
                  "_arm"],
        "why": "a --jobs worker or cluster job unpickles the run's config before anything loads the plugin "
               "whose options class it holds: every run of a plugin arm dies in the worker",
        "protects": "arms' set-up",
    },
]
