"""Perturbations of what keeps a run's directory its own (issue 24: two `train` on one run, a run name that
leaves the run root, a resume that takes its saved config and refuses one that changes what the run computes;
tests/falsification; format in perturbations_attnres.py, plus ``protects``).

A run directory is the loop's record: two writers interleave its metrics, a name with `..` writes (and with
train.overwrite=true deletes) outside run.dir.
"""

from __future__ import annotations

_RUNDIR = "dormouse/rundir.py"
_CONFIG = "dormouse/config.py"
_LOCK = "tests/test_run_lock.py::"
_RESUME = "tests/test_resume_default.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "run_lock_not_taken",
        "file": _RUNDIR,
        "function": "hold_run",
        "old": "            lock = run_lock(files).acquire()\n",
        "new": "            lock = None\n",
        "gates": [_LOCK + "test_a_second_train_on_a_run_in_use_is_refused_naming_the_holder_and_touches_nothing",
                  _LOCK + "test_train_holds_the_lock_while_it_runs_and_releases_it_when_done"],
        "why": "train does not take its run's lock: a second train on the same run.name (with "
               "train.overwrite=true) deletes the first's files and both write metrics.jsonl",
        "protects": "training loop",
    },
    {
        "name": "overwrite_deletes_the_held_run_lock",
        "file": _RUNDIR,
        "function": "_clear_run_dir",
        "old": "        if entry == files.lock:\n",
        "new": "        if False:\n",
        "gates": [_LOCK + "test_overwrite_replaces_the_run_but_keeps_the_lock_it_holds"],
        "why": "train.overwrite=true removes the lock file it holds: a third train creates a fresh one and "
               "writes beside it",
        "protects": "training loop",
    },
    {
        "name": "stale_run_lock_taken_silently",
        "file": _RUNDIR,
        "function": "hold_run",
        "old": "        if lock is not None and lock.stale_message():\n",
        "new": "        if False:\n",
        "gates": [_LOCK + "test_a_stale_run_lock_from_a_dead_train_is_taken_over_with_a_message"],
        "why": "a dead train's lock is taken over without saying whose it was",
        "protects": "training loop",
    },
    {
        "name": "run_name_may_climb_out_of_run_dir",
        "file": _CONFIG,
        "function": "validate",
        "old": "or \"..\" in Path(str(name)).parts",
        "new": "or \"...\" in Path(str(name)).parts",
        "gates": ["tests/test_run_name.py::test_a_run_name_that_leaves_the_run_root_is_refused_naming_the_field"],
        "why": "run.name=../escape is accepted: the run (and train.overwrite=true's delete) lands outside run.dir",
        "protects": "training loop",
    },
    {
        "name": "block_attnres_default_run_name_says_full",
        "file": _RUNDIR,
        "function": "default_run_name",
        "old": "        stem += f\"_block{cfg.model.attnres.block_size}\"\n",
        "new": "        stem += \"\"\n",
        "gates": ["tests/test_run_name.py::test_full_and_block_attnres_get_different_default_run_names"],
        "why": "a Block AttnRes run started without run.name is named like a Full one (attnres-<time>)",
        "protects": "arms' set-up",
    },
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
]
