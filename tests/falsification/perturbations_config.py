"""Perturbations of what a config reaches before a run starts: a user's preset files, the completion of
config keys, the preflight warnings and a sweep's run folders (issue 24; tests/falsification; format in
perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_C = "tests/config/test_completion.py::"
_COMPLETION = "dormouse/cli/completion.py"
_PREFLIGHT = "dormouse/train/preflight.py"
_CONFIG = "dormouse/config/schema.py"
_SWEEP = "dormouse/cli/sweep.py"

PERTURBATIONS: list[dict] = [
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
]
