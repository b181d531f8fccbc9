"""Perturbations of what keeps a run's directory its own (two `train` on one run, a run name that
leaves the run root, a resume that takes its saved config and refuses one that changes what the run computes;
tests/falsification; format in perturbations_attnres.py, plus ``protects``).

A run directory is the loop's record: two writers interleave its metrics, a name with `..` writes (and with
train.overwrite=true deletes) outside run.dir. Then what a disk does to it: a torn last line that a
resume would extend, a replay that leaves a step twice in metrics.jsonl, a full disk whose half-made run
blocks the same command or whose message claims a checkpoint that is not there, and a start that `validate`
refuses but `train` begins.
"""

from __future__ import annotations

_RUNDIR = "dormouse/train/start.py"
_CONFIG = "dormouse/config/schema.py"
_LOCK = "tests/run/test_run_lock.py::"
_RESUME = "tests/train/test_resume_default.py::"
_FILES = "tests/run/test_run_files.py::"
_TORN = _FILES + "test_a_torn_metrics_row_is_reported_then_cut_on_resume_and_the_first_new_row_survives"
_FULL = _FILES + "test_a_full_disk_at_the_first_writes_says_one_true_line_and_the_same_command_reruns"
_REFUSED = _FILES + "test_whatever_validate_refuses_train_refuses_creating_nothing"
_LOST_FINAL = _FILES + "test_a_finished_run_whose_final_row_was_torn_gets_it_back_byte_for_byte_on_resume"
_LOST_FINAL_AB = ("tests/flows/test_run_life.py::"
                  "test_a_comparison_rebuilds_a_run_final_row_torn_after_its_final_checkpoint_and_counts_the_run")

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
        "function": "RunConfig.problems",
        "old": "or \"..\" in parts",
        "new": "or \"...\" in parts",
        "gates": ["tests/run/test_run_name.py::test_a_run_name_that_leaves_the_run_root_is_refused_naming_the_field"],
        "why": "run.name=../escape is accepted: the run (and train.overwrite=true's delete) lands outside run.dir",
        "protects": "training loop",
    },
    {
        "name": "block_attnres_default_run_name_says_full",
        "file": "dormouse/arms/attnres.py",
        "function": "AttnRes.run_name_stem",
        "old": "        return cls.name if size is None else f\"{cls.name}_block{size}\"\n",
        "new": "        return cls.name\n",
        "gates": ["tests/run/test_run_name.py::test_full_and_block_attnres_get_different_default_run_names"],
        "why": "a Block AttnRes run started without run.name is named like a Full one (attnres-<time>)",
        "protects": "arms' set-up",
    },
    {
        "name": "resume_ignores_the_saved_config",
        "file": "dormouse/train/run_config.py",
        "function": "load_run_config",
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
    # --- append-only files, a full disk, validate's refusals -------------------------------------------
    {
        "name": "torn_last_line_not_seen",
        "file": "dormouse/run/loglines.py",
        "function": "torn_tail",
        "old": "                    return end - (pos - size + newline + 1)\n",
        "new": "                    return 0\n",
        "gates": [_TORN],
        "why": "a last line cut short by a crash is not seen: `logs --check` says no findings, and the resume "
               "appends its `resume` line onto train.log's torn eval line",
        "protects": "training loop",
    },
    {
        "name": "resume_appends_onto_a_torn_train_log_line",
        "file": "dormouse/train/loop.py",
        "function": "_open_run_dir",
        "old": "        if torn := cut_torn_tail(files.log):\n",
        "new": "        if torn := 0:\n",
        "gates": [_TORN],
        "why": "the resume's own line is appended onto train.log's torn eval line: both are one malformed line",
        "protects": "training loop",
    },
    {
        "name": "resume_appends_onto_a_torn_metrics_row",
        "file": "dormouse/train/loop.py",
        "function": "_open_run_dir",
        "old": "        settled = settle_metrics(files.metrics, loop.step)\n",
        "new": "        settled = settle_metrics(files.metrics, loop.step, write=False)\n",
        "gates": [_TORN],
        "why": "the resume appends the first new metrics row onto the torn one, and that row "
               "is lost to every JSON reader",
        "protects": "training loop",
    },
    {
        "name": "finished_run_keeps_its_lost_final_row_lost",
        "file": "dormouse/train/loop.py",
        "function": "_train",
        "old": "            if info.is_main and final_row_lost(run, loop, source):\n",
        "new": "            if False:\n",
        "gates": [_LOST_FINAL, _LOST_FINAL_AB],
        "why": "a finished run whose final metrics row was torn after its final checkpoint resumes as 'already "
               "complete': the row stays lost, the previous eval's bpb is called final, `logs --check` stays red "
               "and a comparison counts the run failed on every rerun",
        "protects": "record",
    },
    {
        "name": "rebuilt_final_row_takes_the_empty_window",
        "file": "dormouse/train/loop.py",
        "function": "rebuild_final_row",
        "old": "    row.update(measured)  # the row's own keys: each keeps its place\n",
        "new": "    pass\n",
        "gates": [_LOST_FINAL],
        "why": "the rebuilt final row reads the resumed (empty) window: its loss and depth NaN, its counters 0/0 "
               "(a dead arm to the check), its cost the repair's, not the original row",
        "protects": "record",
    },
    {
        "name": "lost_final_row_without_its_window_crashes",
        "file": "dormouse/train/loop.py",
        "function": "rebuild_final_row",
        "old": "    if measured is None:\n",
        "new": "    if False:\n",
        "gates": [_FILES + "test_a_lost_final_row_whose_checkpoint_cannot_rebuild_it_is_refused_in_one_line"],
        "why": "a final checkpoint without its eval's window fields is not refused: the rebuild crashes with a "
               "traceback after settling the files",
        "protects": "record",
    },
    {
        "name": "logs_check_misses_a_torn_metrics_row",
        "file": "dormouse/run/checks.py",
        "function": "_check_metrics_file",
        "old": "    _check_torn(run, path, len(lines))\n",
        "new": "    pass\n",
        "gates": [_TORN],
        "why": "a torn metrics.jsonl row in a run not yet resumed passes `dormouse logs --check`",
        "protects": "training loop",
    },
    {
        "name": "replayed_steps_stay_twice_in_metrics_jsonl",
        "file": "dormouse/train/metrics.py",
        "function": "settle_metrics",
        "old": "    kept = [(row, line) for row, line in kept if int(row[\"step\"]) <= step]\n",
        "new": "    kept = [(row, line) for row, line in kept]\n",
        "gates": [_FILES + "test_a_fallback_resume_leaves_each_step_once_in_metrics_jsonl"],
        "why": "after a fallback to an earlier checkpoint metrics.jsonl holds the replayed steps twice: a pandas "
               "reader gets the abandoned row beside the replayed one",
        "protects": "training loop",
    },
    {
        "name": "failed_start_leaves_a_half_made_run",
        "file": _RUNDIR,
        "function": "hold_run",
        "old": "            failed_start = fresh and not ended and not has_record(files)\n",
        "new": "            failed_start = False\n",
        "gates": [_FULL],
        "why": "a full disk at a new run's first writes leaves config.yaml behind: the same command is then "
               "refused (`holds a run`) until the user deletes it or passes train.overwrite=true",
        "protects": "training loop",
    },
    {
        "name": "full_disk_is_a_traceback",
        "file": "dormouse/train/loop.py",
        "function": "train",
        "old": "        except OSError as exc:  # a write failed",
        "new": "        except ZeroDivisionError as exc:  # a write failed",
        "gates": [_FULL],
        "why": "ENOSPC from provenance.json, train.log or metrics.jsonl reaches the user as a raw OSError "
               "traceback, with nothing said about what is left",
        "protects": "training loop",
    },
    {
        "name": "failed_checkpoint_claims_an_intact_previous_one",
        "file": "dormouse/run/checkpoint.py",
        "function": "left_intact",
        "old": "    return \"no checkpoint was written before it, so none is left to resume from\"\n",
        "new": "    return \"the previous checkpoint is intact\"\n",
        "gates": [_FILES + "test_a_failed_checkpoint_write_says_whether_an_earlier_one_is_left"],
        "why": "the first checkpoint's failed write says the previous checkpoint is intact when there is none",
        "protects": "training loop",
    },
    {
        "name": "train_begins_what_validate_refuses",
        "file": "dormouse/train/loop.py",
        "function": "train",
        "old": "            raise StartRefused(\"; \".join(refusals))\n",
        "new": "            pass\n",
        "gates": [_REFUSED + "[wandb_online]"],
        "why": "train creates the run directory before it meets what validate refused (wandb online without "
               "credentials): exit 1 instead of 2, after a run directory was made",
        "protects": "training loop",
    },
    {
        "name": "memory_estimate_never_refuses",
        "file": "dormouse/train/step_notice.py",
        "function": "memory_refusal",
        "old": "    if have is None or need.total <= have:\n",
        "new": "    if True:\n",
        "gates": [_REFUSED + "[memory]"],
        "why": "model.d_model=100000 passes validate (and train goes on to a traceback at allocation)",
        "protects": "training loop",
    },
    {
        "name": "provenance_without_the_cpu",
        "file": "dormouse/train/start.py",
        "function": "provenance",
        "old": "        \"cpu\": cpu_description(),\n",
        "new": "",
        "gates": ["tests/train/test_train.py::test_each_arm_trains_end_to_end_through_the_cli"],
        "why": "a run does not record the CPU features that choose its kernels, so a re-run "
               "that differs cannot tell the machine's rounding from a broken resume",
        "protects": "training loop",
    },
]
