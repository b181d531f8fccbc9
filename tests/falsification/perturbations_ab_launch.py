"""Perturbations of how a comparison's runs are launched: the `ab NAME` refusals, the
locks, the per-run slots, the submitit requeue hook, `ab status` and its ETA under --jobs, the live board,
errors said once, a run's life under faults (no finished run deleted) and workers that outlive no driver
(tests/falsification; format in perturbations_attnres.py). ``protects`` names what a defect here would
break."""

from __future__ import annotations

_LOCK = "dormouse/run/lock.py"  # the run, comparison and run locks
_LAUNCH = "dormouse/ab/launchers/local.py"
_CLUSTER = "dormouse/ab/launchers/cluster.py"
_PAIRJOB = "dormouse/ab/runs/job.py"
_RUNNER = "dormouse/ab/comparison/runner.py"
_REGISTRATION = "dormouse/ab/comparison/binding.py"
_PLAN = "dormouse/ab/comparison/plan.py"
_LOOKS = "dormouse/ab/rule/looks.py"
_STATUS = "dormouse/ab/comparison/status.py"
_LIVE = "dormouse/ab/runs/board.py"
_L = "tests/ab/test_ab_lock.py::"
_T = "tests/flows/test_ab_launch.py::"
_A = "tests/flows/test_ab.py::"
_REGISTRY = "dormouse/ab/comparison/registry.py"
_NAMES = "tests/ab/test_ab_names.py::"
_ETA = "tests/ab/test_ab_eta.py::"
_LIFE = "tests/flows/test_run_life.py::"
_NO_RETRAIN = _LIFE + "test_no_submitit_exception_at_any_point_of_a_runs_life_deletes_or_retrains_it"

PERTURBATIONS: list[dict] = [
    {
        "name": "slot_workers_keep_the_fork_servers_plugins",
        "file": _LAUNCH,
        "function": "_worker_init",
        "old": "        os.environ[PLUGINS_ENV_VAR] = plugins_env\n",
        "new": "        pass\n",
        "gates": [_T + "test_slot_workers_start_with_torch_and_the_trainer_already_imported"],
        "why": "a process keeps one fork server, started with its first comparison's environment: a later "
               "comparison's workers load that comparison's plugins, and its runs are refused as computed by "
               "other code, or count with a plugin they never asked for",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_lock_shared",
        "file": _LOCK,
        "function": "HolderLock.acquire",
        "old": "            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n",
        "new": "            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n",
        "gates": [_L + "test_a_lock_held_by_a_live_process_is_refused_naming_its_pid_and_host"],
        "why": "a shared lock admits a second `dormouse ab`: two processes train the same run and one "
               "deletes the other's folder",
        "protects": "A/B rule",
    },
    {
        "name": "stale_lock_taken_silently",
        "file": _LOCK,
        "function": "HolderLock.acquire",
        "old": "        self.took_over = read_holder(self.path)\n",
        "new": "        self.took_over = None\n",
        "gates": [_L + "test_a_stale_lock_from_a_dead_process_is_taken_over_with_a_message"],
        "why": "a dead holder's lock is taken over without saying whose it was",
        "protects": "A/B rule",
    },
    {
        "name": "pair_lock_not_the_pairs",
        "file": _PAIRJOB,
        "function": "train_run",
        "old": "        lock = run_lock(task.comp_dir, run.name).acquire()\n",
        "new": "        lock = run_lock(task.comp_dir, run.name + '-x').acquire()\n",
        "gates": [_T + "test_a_run_trained_by_another_process_is_not_touched"],
        "why": "a new driver restarts a run an orphaned job is still training (deleting its directory)",
        "protects": "A/B rule",
    },
    {
        "name": "slot_threads_not_applied",
        "file": _LAUNCH,
        "function": "enter_slot",
        "old": "        torch.set_num_threads(slot.threads)\n",
        "new": "        pass\n",
        "gates": [_T + "test_parallel_runs_equal_the_sequential_runs_bit_for_bit"],
        "why": "--threads / the per-run share of the cores is recorded but not applied: the reduction order "
               "(and the report's thread count) is not what was asked",
        "protects": "A/B rule",
    },
    {
        "name": "cores_not_shared_between_jobs",
        "file": _LAUNCH,
        "function": "plan_slots",
        "old": "    per_job = threads if threads is not None else max(1, cores // max(jobs, 1))\n",
        "new": "    per_job = threads if threads is not None else cores\n",
        "gates": [_T + "test_slots_share_the_cores_and_refuse_what_cannot_be_honoured"],
        "why": "every job runs on all the cores: N jobs oversubscribe the CPU N-fold",
        "protects": "A/B rule",
    },
    {
        "name": "cuda_jobs_share_one_gpu",
        "file": _LAUNCH,
        "function": "plan_slots",
        "old": "        slots.append(Slot(i, per_job, (devices[i],) if cuda and devices is not None else None))\n",
        "new": "        slots.append(Slot(i, per_job, (devices[0],) if cuda and devices is not None else None))\n",
        "gates": [_T + "test_slots_share_the_cores_and_refuse_what_cannot_be_honoured"],
        "why": "--jobs N on an N-GPU node puts every run on GPU 0",
        "protects": "A/B rule",
    },
    {
        "name": "preempted_job_not_requeued",
        "file": _CLUSTER,
        "function": "RunJob.checkpoint",
        "old": "        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)\n",
        "new": "        return None\n",
        "gates": [_T + "test_submitit_local_jobs_complete_and_preempted_jobs_requeue_and_resume"],
        "why": "submitit's checkpointing hook declines: a preempted or timed-out run is lost instead of "
               "requeued and resumed",
        "protects": "training loop",
    },
    {
        "name": "preempted_pair_not_handed_to_submitit",
        "file": _CLUSTER,
        "function": "RunJob.__call__",
        "old": "        if outcome.status == INTERRUPTED and outcome.exit_code == 128 + int(usr):\n",
        "new": "        if outcome.status == INTERRUPTED and outcome.exit_code == -1:\n",
        "gates": [_T + "test_submitit_local_jobs_complete_and_preempted_jobs_requeue_and_resume"],
        "why": "the trainer checkpointed on the preemption signal but the job ends instead of requeueing: "
               "the run stays unfinished until someone reruns the comparison",
        "protects": "training loop",
    },
    {
        "name": "override_error_said_per_arm",
        "file": _PLAN,
        "function": "arm_problem_lines",
        "old": "              if len(arm_lines) == len(reg.spec.arms) and all(ln in lns for lns in arm_lines.values())]\n",
        "new": "              if False]\n",
        "gates": [_T + "test_an_invalid_override_is_reported_once_for_the_comparison"],
        "why": "a bad CLI override is reported once per arm (five identical errors)",
        "protects": "arms' set-up",
    },
    {
        "name": "status_misses_running_pairs",
        "file": _STATUS,
        "function": "run_status",
        "old": "    elif is_locked(lock_path):\n",
        "new": "    elif False:\n",
        "gates": [_T + "test_status_during_a_run_shows_done_running_pending_and_failed"],
        "why": "`dormouse ab status` shows a run being trained as interrupted or pending",
        "protects": "A/B rule",
    },
    {
        "name": "board_never_live",
        "file": _LIVE,
        "function": "RunBoard.__enter__",
        "old": "        if self.console.is_terminal:\n",
        "new": "        if False:\n",
        "gates": [_T + "test_the_board_is_plain_lines_off_a_terminal_and_a_live_table_on_one"],
        "why": "on a terminal the progress scrolls as lines instead of one table updated in place",
        "protects": "A/B rule",
    },
    {
        "name": "code_compared_by_commit_not_fingerprint",
        "file": _REGISTRATION,
        "function": "check_same_code",
        "old": "            if old is None or old.sha256 != code.sha256:\n",
        "new": "            if old is None or old.commit != code.commit:\n",
        "gates": [_A + "test_runs_computed_by_other_code_are_refused_until_restart"],
        "why": "the comparison compares commits, not what computes a run: an uncommitted edit (the commit "
               "stays 'sha+dirty') adds runs computed by other code to a resumed comparison",
        "protects": "A/B rule",
    },
    {
        "name": "job_does_not_check_its_code",
        "file": _PAIRJOB,
        "function": "train_run",
        "old": "    if task.fingerprint is not None and code_here.sha256 != task.fingerprint:\n",
        "new": "    if task.fingerprint is None and code_here.sha256 != task.fingerprint:\n",
        "gates": [_A + "test_a_run_whose_job_runs_other_code_is_failed_not_trained"],
        "why": "a job that runs on other code than the comparison's (an edit after the driver's check, a node "
               "with another checkout) trains its run anyway",
        "protects": "A/B rule",
    },
    {
        "name": "decided_arms_keep_running",
        "file": _LOOKS,
        "function": "ConfirmatoryLooks._arms_look",
        "old": "        return [a for a in active if decided[a].verdict == UNDECIDED]\n",
        "new": "        return list(active)\n",
        "gates": [_A + "test_sequential_looks_stop_decided_arms_and_resume_continues_the_schedule"],
        "why": "an arm decided at an early look keeps running replicates to the maximum: the looks save nothing",
        "protects": "A/B rule",
    },
    {
        "name": "driver_keeps_sigint_to_itself",
        "file": _LAUNCH,
        "function": "ProcessLauncher.run",
        "old": "for sig in (signal.SIGINT, signal.SIGTERM)}",
        "new": "for sig in (signal.SIGTERM,)}",
        "gates": [_T + "test_a_sigint_to_the_driver_alone_stops_each_running_run_with_one_signal"],
        "why": "`kill -INT` of `dormouse ab` stops the driver and leaves its workers training: the comparison "
               "looks stopped while two runs go on writing into it, and a restart races them",
        "protects": "A/B rule",
    },
    {
        "name": "workers_share_the_terminal_group",
        "file": _LAUNCH,
        "function": "_worker_init",
        "old": "        os.setpgrp()\n",
        "new": "        pass\n",
        "gates": [_T + "test_a_sigint_to_the_driver_alone_stops_each_running_run_with_one_signal"],
        "why": "a terminal's Ctrl-C reaches each worker twice (from the terminal and from the driver), and a "
               "second SIGINT stops a training loop without its checkpoint: every running run restarts",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_looks_for_conf_beside_the_sources",
        "file": "dormouse/ab/comparison/fingerprint.py",
        "function": "conf_dir",
        "old": "    conf = Path(importlib.import_module(\"dormouse.conf\").__file__ or \"\").resolve().parent\n",
        "new": "    conf = Path(__file__).resolve().parents[1] / \"conf\"\n",
        "gates": [_A + "test_the_code_fingerprint_covers_the_configs_where_the_installed_package_has_them"],
        "why": "in an editable install (the README's set-up) the fingerprint hashes no config: an edited preset "
               "joins a running comparison unseen, and a fresh checkout cannot resume one started elsewhere",
        "protects": "A/B rule",
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
    {
        "name": "slot_workers_spawned_reimporting_torch",
        "file": "dormouse/ab/launchers/local.py",
        "function": "ProcessLauncher.__init__",
        "old": "        self.context = worker_context()\n",
        "new": "        self.context = multiprocessing.get_context(\"spawn\")\n",
        "gates": ["tests/flows/test_ab_launch.py::test_slot_workers_start_with_torch_and_the_trainer_already_imported"],
        "why": "every --jobs worker is spawned and imports torch (and torch._dynamo at its first optimizer) "
               "again: seconds per worker before its first run, more than a small run's training",
        "protects": "A/B rule",
    },
    {
        "name": "eta_ignores_the_parallel_slots",
        "file": "dormouse/ab/comparison/status.py",
        "function": "comparison_eta",
        "old": "        heapq.heappush(free, heapq.heappop(free) + per_run)\n",
        "new": "        heapq.heappush(free, max(free) + per_run)\n",
        "gates": [_ETA + "test_two_slots_before_any_run_finished_give_an_eta_from_the_running_runs_pace",
                  _ETA + "test_finished_runs_set_the_run_time_and_the_slots_share_the_pending_runs"],
        "why": "the pending runs are counted one after another as if one slot ran them: under --jobs N the "
               "ETA is about N times too long",
        "protects": "A/B rule",
    },
    {
        "name": "eta_unknown_until_a_pair_finished",
        "file": "dormouse/ab/comparison/status.py",
        "function": "comparison_eta",
        "old": "                else sum(projected) / len(projected) if projected else None)\n",
        "new": "                else None)\n",
        "gates": [_ETA + "test_two_slots_before_any_run_finished_give_an_eta_from_the_running_runs_pace"],
        "why": "under --jobs N the first N runs run together, so no ETA until the first wave ends",
        "protects": "A/B rule",
    },
    {
        "name": "board_eta_forgets_the_pending_pairs",
        "file": "dormouse/ab/runs/board.py",
        "function": "RunBoard.eta_s",
        "old": "comparison_eta(running, done, sum(p.status == \"pending\" for p in self.runs.values()))",
        "new": "comparison_eta(running, done, 0)",
        "gates": [_ETA + "test_the_live_board_shows_the_eta_for_the_slots_running_at_once"],
        "why": "the live board's ETA covers the running runs only: it says minutes when hours of pending "
               "runs remain",
        "protects": "A/B rule",
    },
    {
        "name": "any_resume_exception_starts_the_pair_over",
        "file": _PAIRJOB,
        "function": "_complete",
        "old": "unreadable = unreadable_checkpoints(run) if isinstance(exc, CHECKPOINT_REFUSALS) else None\n",
        "new": "unreadable = f\"{type(exc).__name__}: {exc}\"\n",
        "gates": [_NO_RETRAIN + "[UncompletedJobError-after_a_checkpoint-resume]", _NO_RETRAIN],
        "why": "any exception during a resume (submitit's UncompletedJobError from its signal "
               "handler) is taken for an unreadable checkpoint: the run was removed and trained again from "
               "step 0",
        "protects": "A/B rule",
    },
    {
        "name": "run_past_its_final_eval_not_complete",
        "file": _PAIRJOB,
        "function": "_kept_after",
        "old": "    if state != \"complete\":\n",
        "new": "    if True:\n",
        "gates": [_NO_RETRAIN + "[UncompletedJobError-during_plots-resume]", _NO_RETRAIN],
        "why": "a run whose final eval and checkpoint are on disk fails when the scheduler's "
               "exception comes during its probe plots (USR2 after the loop), and is trained again",
        "protects": "A/B rule",
    },
    {
        "name": "finished_run_without_done_line_resumed",
        "file": _PAIRJOB,
        "function": "run_state",
        "old": "        return \"complete\", (f\"finished at step {run.steps}: its final eval is on disk; it stopped",
        "new": "        return \"resume\", (f\"finished at step {run.steps}: its final eval is on disk; it stopped",
        "gates": [_LIFE + "test_a_finished_run_without_its_done_line_is_kept_and_its_log_finished",
                  _NO_RETRAIN + "[UncompletedJobError-after_final_eval-first]"],
        "why": "a run stopped between its final eval and its done line is not complete: it fails its "
               "attempt and its next one, and never reads finished",
        "protects": "A/B rule",
    },
    {
        "name": "restart_deletes_a_run_whose_final_row_was_torn",
        "file": _PAIRJOB,
        "function": "_clear_for_restart",
        "old": "(read_metrics(run.files.metrics), logged_evals(run.run_dir))",
        "new": "(read_metrics(run.files.metrics),)",
        "gates": [_LIFE + "test_a_restart_never_deletes_a_run_holding_a_final_eval_or_a_checkpoint"],
        "why": "a run whose final metrics row was torn and whose checkpoints are gone is deleted and trained "
               "again from step 0, though train.log holds its final eval",
        "protects": "record",
    },
    {
        "name": "unreadable_run_deleted_not_set_aside",
        "file": _PAIRJOB,
        "function": "set_aside",
        "old": "    os.replace(run.run_dir, dest)  # same filesystem: one rename, nothing copied or lost\n",
        "new": "    shutil.rmtree(run.run_dir)\n",
        "gates": [_LIFE + "test_a_run_whose_checkpoints_are_all_unreadable_is_moved_aside_with_its_reason_then_"
                  "restarted"],
        "why": "a run whose checkpoints are all unreadable is deleted with its metrics and reason instead of "
               "moved aside where the user can look",
        "protects": "A/B rule",
    },
    {
        "name": "readable_checkpoint_refusal_sets_the_run_aside",
        "file": _PAIRJOB,
        "function": "unreadable_checkpoints",
        "old": "        else:\n            return None\n",
        "new": "        else:\n            reasons.append(f\"{path} loads\")\n",
        "gates": [_LIFE + "test_a_refused_checkpoint_that_loads_fails_the_run_and_moves_nothing"],
        "why": "a checkpoint refusal moves the run aside and restarts it although its checkpoints load (the "
               "evidence is not checked)",
        "protects": "A/B rule",
    },
    {
        "name": "workers_outlive_a_killed_driver",
        "file": _LAUNCH,
        "function": "_worker_init",
        "old": "    if driver is not None:\n",
        "new": "    if False:\n",
        "gates": [_T + "test_a_killed_driver_leaves_no_process_nor_semaphore_and_a_rerun_loses_and_repeats_nothing"],
        "why": "SIGKILL of `dormouse ab --jobs 2` leaves its workers training to the end, then alive "
               "forever with the fork server and resource tracker (~1.1 GB), each run still holding its lock",
        "protects": "A/B rule",
    },
    {
        "name": "orphaned_pair_killed_without_its_checkpoint",
        "file": _LAUNCH,
        "function": "watch_driver",
        "old": "    while _BUSY.is_set():\n",
        "new": "    while False:\n",
        "gates": [_T + "test_a_killed_driver_leaves_no_process_nor_semaphore_and_a_rerun_loses_and_repeats_nothing"],
        "why": "a worker whose driver died exits mid-step: its run loses the steps since its last checkpoint "
               "and leaves its lock and launch record saying it is running",
        "protects": "A/B rule",
    },
    {
        "name": "driver_leaves_a_finished_run_unfinished",
        "file": _RUNNER,
        "function": "run_comparison",
        "old": "        for line in finish_complete_runs(plan.all_runs, plan.comp_dir):",
        "new": "        for line in []:",
        "gates": [_LIFE + "test_the_driver_finishes_a_complete_run_it_would_not_schedule"],
        "why": "a run stopped between its final checkpoint and its done line is complete but never scheduled: "
               "its log stays unfinished and the counter check invalidates its arm for good",
        "protects": "A/B rule",
    },
    {
        "name": "final_eval_without_checkpoint_not_complete",
        "file": _PAIRJOB,
        "function": "run_state",
        "old": "    if final_row(rows, run.steps) is not None:\n",
        "new": "    if final_row(rows, run.steps) is not None and read_run(run.run_dir).finished:\n",
        "gates": [_LIFE + "test_a_run_with_its_final_eval_but_no_checkpoint_is_kept",
                  _LIFE + "test_a_run_killed_between_its_final_eval_row_and_its_final_checkpoint_is_complete"],
        "why": "a run needs its done line to be complete, so one whose final eval row "
               "is on disk but which stopped before its final checkpoint or done line is restarted or resumed "
               "from an earlier checkpoint, and its counted number retrained",
        "protects": "A/B rule",
    },
    {
        "name": "time_left_from_runs_timed_on_another_cpu",
        "file": _STATUS,
        "function": "timed_elsewhere",
        "old": "    return cpu is not None and cpu != _this_cpu()\n",
        "new": "    return False\n",
        "gates": [_T + "test_the_time_left_is_estimated_from_runs_timed_on_this_cpu_only"],
        "why": "a comparison resumed on a machine with another CPU projects its remaining runs at the old CPU's "
               "speed: the depth study's `ab status` said minutes where its runs had become 3.7 times as long",
        "protects": "A/B rule",
    },
]
