"""Perturbations of issue 24's rough edges (day3): a resume's default is its saved config, the refusal of a
resume that changes what the run computes, the `ab NAME` refusals, the --status ETA under --jobs
(tests/falsification; format in perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_RUNDIR = "dormouse/rundir.py"
_CONFIG = "dormouse/config.py"
_REGISTRY = "dormouse/ab/registry.py"
_RESUME = "tests/test_resume_default.py::"
_NAMES = "tests/test_ab_names.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "resume_ignores_the_saved_config",
        "file": _CONFIG,
        "function": "load_config",
        "old": "    if str(cfg.train.resume) != \"never\":",
        "new": "    if False:",
        "gates": [_RESUME + "test_a_resume_without_other_overrides_continues_the_run_with_its_saved_config"],
        "why": "a resume composes from the defaults again: every override of the run must be retyped, or the "
               "resume is refused",
        "protects": "training loop",
    },
    {
        "name": "resume_saved_config_overrides_the_command_line",
        "file": _RUNDIR,
        "function": "resume_config",
        "old": "        if key in COMMAND_KEYS or any(key == g or key.startswith(g + \".\") for g in given):\n",
        "new": "        if key in COMMAND_KEYS:\n",
        "gates": [_RESUME + "test_an_explicit_override_on_a_resume_wins_over_the_saved_config"],
        "why": "an override given on a resume is silently replaced by the saved value (train.eval_every=5 "
               "ignored; a changed model silently resumed as the old one)",
        "protects": "training loop",
    },
    {
        "name": "resume_refusal_names_keys_without_values",
        "file": _RUNDIR,
        "function": "_differences_with_values",
        "old": "    return \", \".join(f\"{k}={a.get(k)} -> {b.get(k)}\" for k in keys)\n",
        "new": "    return \", \".join(keys)\n",
        "gates": [_RESUME + "test_a_refused_resume_names_every_differing_key_with_both_values"],
        "why": "a refused resume names the keys but not the saved and the given value: the user cannot tell "
               "which side to change",
        "protects": "training loop",
    },
    {
        "name": "ab_missing_path_called_a_bad_name",
        "file": _REGISTRY,
        "function": "_read_text",
        "old": "    if _looks_like_path(name):",
        "new": "    if name.endswith((\".yaml\", \".yml\")) and Path(name).is_file():",
        "gates": [_NAMES + "test_a_missing_registration_file_is_said_to_be_a_missing_file_not_a_bad_name"],
        "why": "`dormouse ab /nonexist/x.yaml` is told 'not a plain name' instead of 'the file does not exist'",
        "protects": "A/B rule",
    },
    {
        "name": "ab_unknown_name_without_did_you_mean",
        "file": _REGISTRY,
        "function": "_read_text",
        "old": "        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)\n",
        "new": "        close: list[str] = []\n",
        "gates": [_NAMES + "test_a_mistyped_comparison_name_gets_the_closest_registered_names"],
        "why": "`dormouse ab smok` lists every comparison but not the one meant",
        "protects": "A/B rule",
    },
]
