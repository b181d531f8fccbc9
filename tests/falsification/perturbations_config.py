"""Perturbations of what a config reaches before a run starts: a user's preset files, the completion of
config keys, the preflight warnings and a sweep's run folders (tests/falsification; format in
perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_C = "tests/config/test_completion.py::"
_COMPLETION = "dormouse/cli/completion.py"
_PREFLIGHT = "dormouse/train/preflight.py"
_CONFIG = "dormouse/config/schema.py"
_SWEEP = "dormouse/cli/sweep.py"
_LOOP = "dormouse/train/loop.py"
_P = "tests/config/test_preflight.py::"
_KERNEL_ONCE = _P + "test_the_kernel_is_decided_once_and_the_run_reads_with_it"

PERTURBATIONS: list[dict] = [
    {
        "name": "unquoted_non_ascii_value_not_told_to_quote",
        "file": "dormouse/config/overrides.py",
        "function": "_unparsed",
        "old": "    fix = quoted(parser, text)\n",
        "new": "    fix = None\n",
        "gates": ["tests/config/test_overrides.py::test_a_value_the_grammar_takes_only_quoted_says_how_to_quote_it"],
        "why": "run.name=ромео_éè is refused as 'not key=value', and nothing says that quoting the value is "
               "the fix",
        "protects": "training loop",
    },
    {
        "name": "override_completion_misses_the_preset_group",
        "file": _COMPLETION,
        "function": "complete_override",
        "old": "        return [f\"{k}=\" for k in [*GROUPS, *leaves] if k.startswith(incomplete)]\n",
        "new": "        return [f\"{k}=\" for k in leaves if k.startswith(incomplete)]\n",
        "gates": [_C + "test_override_completion_offers_every_schema_key_as_key_equals"],
        "why": "`dormouse train pre<TAB>` offers nothing: the presets, the first thing a user sets, are not "
               "completed",
        "protects": "training loop",
    },
    {
        "name": "warmup_over_the_whole_run_not_warned",
        "file": _PREFLIGHT,
        "function": "config_warnings",
        "old": "    if int(t.warmup) >= int(t.steps):\n",
        "new": "    if int(t.warmup) > int(t.steps):\n",
        "gates": ["tests/config/test_preflight.py::test_warmup_that_takes_every_step_is_a_warning_in_validate_and_train_"
                  "not_a_refusal"],
        "why": "warmup == steps is not warned: the whole run is warmup, the cosine never decays, and nothing says so",
        "protects": "training loop",
    },
    {
        "name": "preset_file_under_its_own_key",
        "file": _CONFIG,
        "function": "_user_preset_files",
        "old": "        ConfigStore.instance().store(group=\"preset\", name=name, node=node, package=\"_global_\")\n",
        "new": "        ConfigStore.instance().store(group=\"preset\", name=name, node=node)\n",
        "gates": ["tests/config/test_user_preset.py::test_a_preset_file_composes_like_a_shipped_preset_and_the_command_"
                  "line_wins"],
        "why": "a preset file lands under `preset:` instead of the root: its values never reach the config",
        "protects": "training loop",
    },
    {
        "name": "composing_a_config_checks_the_data_file",
        "file": _CONFIG,
        "function": "DataConfig.problems",
        "old": "        if self.hf_streaming:\n",
        # a check that refuses nothing here (the paths do not exist): only the guard can see it
        "new": "        if self.path is not None and Path(str(self.path)).is_dir() and not any(Path(str(self.path))"
               ".iterdir()):\n"
               "            lines.append(invalid(\"data.path\", self.path, \"an empty folder\"))\n"
               "        if self.hf_streaming:\n",
        "gates": ["tests/config/test_pure_config.py::test_composing_a_config_touches_no_file"],
        "why": "a file check back in the pure composition: every caller of validate (an A/B plan, a sweep's plan) "
               "then depends on the files of the machine that composes, not of the one that runs",
        "protects": "training loop",
    },
    {
        "name": "train_skips_the_machine_checks",
        "file": _LOOP,
        "function": "train",
        "old": "    if environment.problems or environment.kernel is None:\n",
        "new": "    if False:\n",
        "gates": [_P + "test_what_the_machine_refuses_validate_and_train_refuse_alike_creating_nothing[data_missing]"],
        "why": "train goes on past what validate refuses on this machine (a missing data.path): a traceback, "
               "exit 1, instead of validate's line and exit 2",
        "protects": "training loop",
    },
    {
        "name": "loop_decides_the_kernel_again",
        "file": _LOOP,
        "function": "_report_kernel",
        "old": "    return kernel.path\n",
        "new": "    return __import__(\"dormouse.arms.registry\", fromlist=[\"arm_class\"]).arm_class(arm_name(cfg))"
               ".choose_kernel(cfg.model, torch.device(\"cpu\"))[0]\n",
        "gates": [_KERNEL_ONCE],
        "why": "a second decision of the read path in the loop: it may differ from the one validate reported and "
               "the preflight checked (a kernel that cannot run, or another one than said)",
        "protects": "kernels",
    },
    {
        "name": "auto_kernel_choice_said_nowhere",
        "file": _LOOP,
        "function": "_report_kernel",
        "old": "    if str(cfg.model.kernel) == \"auto\" and kernel.path != \"none\" and info.is_main:\n",
        "new": "    if False:\n",
        "gates": [_KERNEL_ONCE],
        "why": "model.kernel=auto falls back to the torch read (or takes triton) silently: a run's speed changes "
               "and nothing says why",
        "protects": "kernels",
    },
    {
        "name": "kernel_that_cannot_run_is_a_traceback",
        "file": _PREFLIGHT,
        "function": "_decide_kernel",
        "old": "    except RuntimeError as exc:  # the path cannot run on this device\n",
        "new": "    except ZeroDivisionError as exc:  # the path cannot run on this device\n",
        "gates": ["tests/config/test_config.py::test_triton_kernel_where_it_cannot_run_is_refused_before_any_work"],
        "why": "model.kernel=triton where the fused kernel cannot run reaches the user as a traceback (exit 1) "
               "instead of a refusal naming the fix",
        "protects": "kernels",
    },
    {
        "name": "sweep_settings_share_one_run_folder",
        "file": _SWEEP,
        "function": "plan",
        "old": "[f\"run.name={sweep}/{i:0{width}d}\"]",
        "new": "[f\"run.name={sweep}/0\"]",
        "gates": ["tests/flows/test_sweep.py::test_multirun_trains_each_setting_in_its_own_run_and_logs_shows_one_table"],
        "why": "every setting of a sweep is sent to one run folder: the second is refused (or, with "
               "train.overwrite, replaces the first)",
        "protects": "training loop",
    },
    {
        "name": "ab_plan_skips_the_machine_checks",
        "file": "dormouse/ab/comparison/runner.py",
        "function": "machine_problems",
        "old": "        if machine := environment_problems(cfg):\n",
        "new": "        if machine := []:\n",
        "gates": ["tests/flows/test_ab.py::test_what_this_machine_cannot_run_is_refused_before_any_run"],
        "why": "a comparison whose arm asks for what this machine cannot run (the fused kernel on a CPU, CUDA) starts "
               "its runs and each one fails at its start, instead of the comparison being refused before any run",
        "protects": "A/B rule",
    },
    {
        "name": "composed_config_shared_between_callers",
        "file": _CONFIG,
        "function": "compose_config",
        "old": "        return copy.deepcopy(_COMPOSED[key])\n",
        "new": "        return _COMPOSED[key]\n",
        "gates": ["tests/config/test_compose_memo.py::test_a_composed_config_is_the_callers_own_copy"],
        "why": "the memo hands every caller one config object: a run's name or steps set by one caller (a plan "
               "naming its runs) become the next caller's, so two runs of a comparison share one config",
        "protects": "arms' set-up",
    },
    {
        "name": "composed_config_keyed_without_the_preset_files_values",
        "file": _CONFIG,
        "function": "compose_config",
        "old": "tuple(asked), tuple(preset_texts), schema()",
        "new": "tuple(asked), schema()",
        "gates": ["tests/config/test_compose_memo.py::test_an_edited_user_preset_file_composes_again"],
        "why": "an edited preset file (same path) is served from the memo with its old values: a sweep or a "
               "comparison in one process trains what the file said before the edit",
        "protects": "arms' set-up",
    },
    {
        "name": "conf_files_signature_by_name_only",
        "file": _CONFIG,
        "function": "files_signature",
        "old": "st.st_mtime_ns, st.st_size))",
        "new": "0, 0))",
        "gates": ["tests/config/test_compose_memo.py::test_the_conf_files_signature_moves_with_an_edit"],
        "why": "the memo's key sees which files conf/ holds, not what they say: an edited preset or default is "
               "composed as it was",
        "protects": "arms' set-up",
    },
]
