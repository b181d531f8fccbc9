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

_REGISTRY = "dormouse/arms/registry.py"
_FP_COVERS = "tests/ab/test_fingerprint_covers.py::"
_AB = "tests/flows/test_ab.py::"

# One arm by two routes, a name taken, an option default, a switch no loaded code defines, the plugin's sha256 and
# the way back after a plugin edit.
PERTURBATIONS += [
    {
        "name": "same_arm_from_file_and_package_is_a_clash",
        "file": _REGISTRY,
        "function": "register_arm",
        "old": "        if not same_source(taken, cls):\n",
        "new": "        if True:\n",
        "gates": [_FLOW + "test_an_arm_from_its_file_and_from_its_installed_package_is_one_arm"],
        "why": "installing the package of an arm written in a file refuses every run, registration and --plugin "
               "made from the file, though it is the same source",
        "protects": "arms' set-up",
    },
    {
        "name": "two_sources_of_one_arm_name_taken_as_one_arm",
        "file": _REGISTRY,
        "function": "same_source",
        "old": " and _source_bytes(a) == _source_bytes(b)",
        "new": "",
        "gates": [_FLOW + "test_two_sources_under_one_arm_name_are_refused_naming_both_and_how_to_choose"],
        "why": "an edited package and the old file under one arm name load silently as one arm: the runs say "
               "one source and the model is built from the other",
        "protects": "arms' set-up",
    },
    {
        "name": "installed_module_of_the_files_bytes_is_a_name_taken",
        "file": _PLUGINS,
        "function": "_load_file",
        "old": " and not _same_bytes(present_file, path)",
        "new": "",
        "gates": [_T + "test_an_arm_installed_as_the_module_its_file_is_named_after_is_that_file"],
        "why": "a package that installs the researcher's arm file as a module of its name refuses that file "
               "everywhere it is named (--plugin, a registration, a run's record) as a module name taken",
        "protects": "arms' set-up",
    },
    {
        "name": "built_in_name_refused_only_once_the_built_ins_are_imported",
        "file": _REGISTRY,
        "function": "register_arm",
        "old": "    if name in BUILTIN_ARMS and not builtin:",
        "new": "    if name in BUILTIN_ARMS and not builtin and name in _REGISTRY:",
        "gates": [_FLOW + "test_a_plugin_arm_named_like_a_built_in_is_refused_in_one_line[gr]"],
        "why": "a plugin that loads before the built-ins takes a built-in's name: the built-in's import then "
               "crashes every command with a traceback that tells the user to rename the built-in",
        "protects": "arms' set-up",
    },
    {
        "name": "built_in_name_said_as_a_clash_between_plugins",
        "file": _PLUGINS,
        "function": "_name_taken",
        "old": "    if exc.name in BUILTIN_ARMS:\n",
        "new": "    if False:\n",
        "gates": [_FLOW + "test_a_plugin_arm_named_like_a_built_in_is_refused_in_one_line[prenorm]"],
        "why": "a plugin arm named like a built-in is not told the name is dormouse's own and that the plugin "
               "must rename its arm",
        "protects": "arms' set-up",
    },
    {
        "name": "option_default_not_checked_at_load",
        "file": "dormouse/cli/exits.py",
        "function": "load_plugins",
        "old": "    if bad:",
        "new": "    if False:",
        "gates": [_FLOW + "test_a_plugin_option_whose_default_fails_its_check_is_refused_at_load_naming_it"],
        "why": "a plugin whose option default fails its own check loads: a command that reads no config "
               "(`dormouse arms`) lists an arm no config can use",
        "protects": "arms' set-up",
    },
    {
        "name": "option_default_said_as_the_users_value",
        "file": "dormouse/config/schema.py",
        "function": "_arm_problems",
        "old": "option_default_problems(cls) or ",
        "new": "",
        "gates": [_T + "test_a_config_read_beside_a_plugin_whose_option_default_fails_names_the_default"],
        "why": "every config read beside the plugin is refused naming model.<arm>.<option>=<default>, a value "
               "the user never typed, even when the arm is not selected",
        "protects": "arms' set-up",
    },
    {
        "name": "unknown_switch_override_gives_no_plugin_hint",
        "file": "dormouse/config/overrides.py",
        "function": "check_overrides",
        "old": "            if key.startswith(\"model.\") and switch_arm(key):",
        "new": "            if False:",
        "gates": [_FLOW + "test_a_switch_for_an_arm_no_loaded_code_defines_says_it_may_be_a_plugin"],
        "why": "`model.use_<arm>=true` for a plugin not loaded is called an unknown key, with no word that the "
               "arm's plugin may be missing",
        "protects": "arms' set-up",
    },
    {
        "name": "file_plugin_sha256_not_what_sha256sum_prints",
        "file": _PLUGINS,
        "function": "combined_sha256",
        "old": "    if \".\" not in module and list(digests) == [f\"{module}.py\"]:\n",
        "new": "    if False:\n",
        "gates": [_T + "test_a_plugins_recorded_sha256_is_what_the_documented_standard_tools_print",
                  _T + "test_a_run_records_its_plugin_and_a_reader_loads_it_again"],
        "why": "the sha256 a run records for a file plugin is not the file's: no standard tool can check it",
        "protects": "arms' set-up",
    },
    {
        "name": "package_plugin_sha256_not_the_documented_recipe",
        "file": _PLUGINS,
        "function": "combined_sha256",
        "old": "f\"{digests[rel]}  ./{rel}\\n\"",
        "new": "f\"{digests[rel]} ./{rel}\\n\"",
        "gates": [_T + "test_a_plugins_recorded_sha256_is_what_the_documented_standard_tools_print"],
        "why": "a package plugin's recorded sha256 differs from what docs/arms.md's recipe prints: the user "
               "cannot find the source a refusal asks them to restore",
        "protects": "arms' set-up",
    },
    {
        "name": "packaged_plugin_source_is_its_module_only",
        "file": _PLUGINS,
        "function": "source_files",
        "old": "    if not depth:\n",
        "new": "    if module_file.name != \"__init__.py\":\n",
        "gates": [_FP_COVERS + "test_an_edit_anywhere_in_a_packaged_plugins_package_is_covered"],
        "why": "an entry point's module inside a package is hashed alone: an edit in another module of the "
               "package (a subpackage's helper the arm uses) joins a resumed comparison unseen",
        "protects": "A/B rule",
    },
    {
        "name": "plugin_edit_refusal_sends_the_user_to_git",
        "file": "dormouse/ab/comparison/binding.py",
        "function": "_ways_back",
        "old": "    if old is None or fingerprint.dormouse_changed(old, code):\n",
        "new": "    if True:\n",
        "gates": [_AB + "test_runs_computed_by_another_plugin_source_say_to_restore_it_by_its_sha256"],
        "why": "after a plugin edit the refusal says to check out the runs' commit, which cannot restore a "
               "plugin that lies outside dormouse's repository",
        "protects": "A/B rule",
    },
    {
        "name": "plugin_edit_refusal_quotes_the_edited_sha256",
        "file": "dormouse/ab/comparison/binding.py",
        "function": "_ways_back",
        "old": "combined_sha256(module, then[module])",
        "new": "combined_sha256(module, now.get(module, then[module]))",
        "gates": [_AB + "test_runs_computed_by_another_plugin_source_say_to_restore_it_by_its_sha256"],
        "why": "the refusal quotes the sha256 of the edited source, not the one the runs used: the user "
               "restores the wrong version",
        "protects": "A/B rule",
    },
]
