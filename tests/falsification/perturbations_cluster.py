"""Perturbations of what the SLURM launcher makes of what SLURM says: a run cancelled while pending, a SIGTERM
requeue, submitit's requeue killed by its own SIGTERM, a failure's reason and its job id. Each reverts one rule;
the gates are tests/flows/test_ab_cluster.py's, which need no cluster (the same behaviours against a real SLURM
are tests/flows/test_ab_slurm.py's, which the falsification runner cannot count on). Format in
perturbations_attnres.py, plus ``protects``."""

from __future__ import annotations

_CLUSTER = "dormouse/ab/launchers/cluster.py"
_PAIRJOB = "dormouse/ab/runs/job.py"
_C = "tests/flows/test_ab_cluster.py::"
_STATUS = "dormouse/ab/comparison/status.py"
_RUNNER = "dormouse/ab/comparison/runner.py"
_LOCAL = "dormouse/ab/launchers/local.py"
_SPANS = "test_a_run_spans_nodes_per_run_nodes_with_a_rank_per_gpu_or_tasks_per_node_and_asks_gpus_the_sites_way"

PERTURBATIONS: list[dict] = [
    # --- item 2: a job out of the queue without a result ----------------------------------------------
    {
        "name": "lost_job_waited_on_forever",
        "file": _CLUSTER,
        "function": "SubmititLauncher._poll_slurm",
        "old": "        if time.monotonic() - since < self.config.lost_after_s:\n",
        "new": "        if True:\n",
        "gates": [_C + "test_a_run_cancelled_while_pending_is_failed_after_lost_after_s_not_waited_on_forever",
                  _C + "test_a_job_that_died_without_a_result_is_failed_and_a_job_squeue_cannot_see_is_not"],
        "why": "no bound on the wait for a job SLURM no longer lists: a run cancelled while pending (or a job "
               "killed without a result, without accounting) hangs `dormouse ab` forever, the board showing "
               "it running",
        "protects": "A/B rule",
    },
    {
        "name": "unknown_job_taken_for_a_pending_one",
        "file": _CLUSTER,
        "function": "queue_verdict",
        "old": "    return \"absent\" if sacct == \"UNKNOWN\" else \"ended\"\n",
        "new": "    return \"alive\" if sacct == \"UNKNOWN\" else \"ended\"\n",
        "gates": [_C + "test_a_job_squeue_does_not_list_and_sacct_does_not_know_is_absent_not_pending",
                  _C + "test_a_run_cancelled_while_pending_is_failed_after_lost_after_s_not_waited_on_forever"],
        "why": "submitit's reading: a job sacct has no record of (UNKNOWN) is unfinished, so the cancelled "
               "pending array task, of which SLURM keeps no record, is waited on forever",
        "protects": "A/B rule",
    },
    {
        "name": "unanswered_squeue_counts_as_lost",
        "file": _CLUSTER,
        "function": "queue_verdict",
        "old": "    if queue_state is None:\n        return \"unsure\"\n",
        "new": "    if queue_state is None:\n        return \"absent\"\n",
        "gates": [_C + "test_a_pending_running_completing_or_requeued_job_is_alive_and_a_result_wins",
                  _C + "test_a_job_that_died_without_a_result_is_failed_and_a_job_squeue_cannot_see_is_not"],
        "why": "a controller that does not answer for lost_after_s (a restart) fails every running run "
               "while their jobs go on training",
        "protects": "A/B rule",
    },
    # --- item 3: SIGTERM requeue ------------------------------------------------------------------------
    {
        "name": "sigterm_requeue_returns_interrupted",
        "file": _CLUSTER,
        "function": "RunJob.__call__",
        "old": "                and requeued_by_slurm(_restarts_at_start(), job_info_in_job(env.job_id))):\n",
        "new": "                and False):\n",
        "gates": [_C + "test_a_sigterm_that_was_a_requeue_ends_the_job_without_a_result"],
        "why": "a SIGTERM from `scontrol requeue` or PreemptMode=REQUEUE is returned as an interrupted run: the "
               "look ends with every arm invalid and exit 1 while SLURM finishes the requeued job unobserved",
        "protects": "A/B rule",
    },
    {
        "name": "result_from_before_a_requeue_reported",
        "file": _CLUSTER,
        "function": "SubmititLauncher._poll_slurm",
        "old": "            if outcome.status != DONE and stale_result(outcome, slurm_job_info(sj.job_id)):\n",
        "new": "            if False:\n",
        "gates": [_C + "test_a_result_written_before_a_requeue_is_set_aside_and_the_requeued_job_waited_for"],
        "why": "a result written before its job was requeued is taken as the run's outcome: the run is "
               "reported interrupted while its requeued job resumes it",
        "protects": "A/B rule",
    },
    {
        "name": "restart_count_unchanged_taken_for_a_requeue",
        "file": _CLUSTER,
        "function": "requeued_by_slurm",
        "old": "    return now is not None and now > restarts_at_start\n",
        "new": "    return now is not None and now >= restarts_at_start\n",
        "gates": [_C + "test_a_restart_count_that_went_up_is_a_requeue_and_one_that_did_not_is_a_cancel",
                  _C + "test_a_sigterm_that_was_a_cancel_returns_interrupted_with_the_boards_job_id"],
        "why": "an `scancel` is taken for a requeue: the job ends without a result and the run is failed "
               "lost_after_s later instead of recorded interrupted",
        "protects": "A/B rule",
    },
    # --- item 4: submitit's requeue killed by its own SIGTERM ---------------------------------------------
    {
        "name": "requeue_race_raises",
        "file": _CLUSTER,
        "function": "_requeue_surviving_its_own_signal",
        "old": "        if not requeue_went_through(exc.returncode, _restarts_at_start(), info):\n",
        "new": "        if True:\n",
        "gates": [_C + "test_submitits_requeue_killed_by_its_own_sigterm_is_a_requeue_not_a_failure"],
        "why": "`scontrol requeue` killed by the requeue it asked for raises CalledProcessError: the run is "
               "reported failed while the requeued job goes on running it",
        "protects": "A/B rule",
    },
    {
        "name": "requeue_race_fix_not_installed_in_the_job",
        "file": _CLUSTER,
        "function": "RunJob.__call__",
        "old": "            submitit.slurm.slurm.SlurmJobEnvironment._requeue = _requeue_surviving_its_own_signal\n",
        "new": "            pass\n",
        "gates": [_C + "test_submitits_requeue_killed_by_its_own_sigterm_is_a_requeue_not_a_failure"],
        "why": "the job keeps submitit's own requeue, which the race fails",
        "protects": "A/B rule",
    },
    {
        "name": "requeue_state_asked_once_in_the_sigterm_wave",
        "file": _CLUSTER,
        "function": "job_info_in_job",
        "old": "    for attempt in range(tries):\n",
        "new": "    for attempt in range(1):\n",
        "gates": [_C + "test_submitits_requeue_killed_by_its_own_sigterm_is_a_requeue_not_a_failure"],
        "why": "the job asks `scontrol show job` once, and the requeue's SIGTERM kills that too (seen on the "
               "test cluster): the race is raised after all",
        "protects": "A/B rule",
    },
    # --- item 5: what a failure says -----------------------------------------------------------------------
    {
        "name": "failure_names_the_log_path",
        "file": _CLUSTER,
        "function": "failure_reason",
        "old": "    if _TRACE_RULE in lines:\n",
        "new": "    if False:\n",
        "gates": [_C + "test_a_failure_names_its_reason_not_the_log_path"],
        "why": "a failed job's note is the error's last line, a log path, not the exception",
        "protects": "A/B rule",
    },
    {
        "name": "attempt_record_job_id_is_slurms_raw_id",
        "file": _CLUSTER,
        "function": "RunJob.__call__",
        "old": "        os.environ[JOB_ID_ENV] = env.job_id\n",
        "new": "        os.environ[JOB_ID_ENV] = env.raw_job_id\n",
        "gates": [_C + "test_a_sigterm_that_was_a_cancel_returns_interrupted_with_the_boards_job_id"],
        "why": "launch/RUN.json records SLURM_JOB_ID (5) while the board and the failure say 3_1",
        "protects": "A/B rule",
    },
    {
        "name": "attempt_record_ignores_the_boards_job_id",
        "file": _PAIRJOB,
        "function": "_where",
        "old": "os.environ.get(\"DORMOUSE_JOB_ID\") or ",
        "new": "",
        "gates": [_C + "test_a_sigterm_that_was_a_cancel_returns_interrupted_with_the_boards_job_id"],
        "why": "the attempt record takes SLURM_JOB_ID (5), not the job id the board shows (3_1)",
        "protects": "A/B rule",
    },
    {
        "name": "driver_waits_on_a_silent_controller_in_silence",
        "file": _CLUSTER,
        "function": "SubmititLauncher._say_if_silent",
        "old": "        if now - since >= self.config.lost_after_s:\n",
        "new": "        if False:\n",
        "gates": [_C + "test_a_job_that_died_without_a_result_is_failed_and_a_job_squeue_cannot_see_is_not"],
        "why": "while squeue does not answer the driver waits without a word: a controller down for good looks "
               "like a hang",
        "protects": "A/B rule",
    },
    # --- the driver stopped by a signal ---------------------------------------------------------------
    {
        "name": "driver_sigterm_left_to_the_runner",
        "file": _CLUSTER,
        "function": "SubmititLauncher._signals_stop",
        "old": "for sig in (signal.SIGINT, signal.SIGTERM)}",
        "new": "for sig in (signal.SIGINT,)}",
        "gates": [_C + "test_a_sigterm_to_the_driver_cancels_every_job_waits_for_their_checkpoints_and_exits_143"],
        "why": "a SIGTERM reaches the launcher as the runner's KeyboardInterrupt, a Ctrl-C: the driver stops "
               "its jobs but exits 130, and a batch system's stop reads as a user's",
        "protects": "A/B rule",
    },
    {
        "name": "stopped_driver_cancels_nothing",
        "file": _CLUSTER,
        "function": "SubmititLauncher.run",
        "old": "self._stop([(job, sj) for job, sj in submitted if job.key not in ended], finished)",
        "new": "self._stop([], finished)",
        "gates": [_C + "test_a_sigterm_to_the_driver_cancels_every_job_waits_for_their_checkpoints_and_exits_143"],
        "why": "`kill -TERM` of the driver leaves its jobs queued and training with no driver; a rerun then "
               "submits duplicates that fail on the runs' locks",
        "protects": "A/B rule",
    },
    {
        "name": "stopped_driver_does_not_wait_for_its_cancelled_jobs",
        "file": _CLUSTER,
        "function": "SubmititLauncher._stop",
        "old": "            while left and time.monotonic() < deadline:\n",
        "new": "            while False:\n",
        "gates": [_C + "test_a_sigterm_to_the_driver_cancels_every_job_waits_for_their_checkpoints_and_exits_143"],
        "why": "the driver exits while its cancelled jobs still checkpoint: their runs' locks are held and "
               "their outcomes unrecorded when a rerun starts",
        "protects": "A/B rule",
    },
    # --- a rerun after a killed driver ---------------------------------------------------------------
    {
        "name": "rerun_resubmits_a_live_job",
        "file": _CLUSTER,
        "function": "SubmititLauncher._live_jobs",
        "old": "            if state in LIVE_STATES:\n",
        "new": "            if False:\n",
        "gates": [_C + "test_a_rerun_adopts_the_job_a_killed_driver_left_in_the_queue_and_submits_only_the_others"],
        "why": "the rerun of a killed driver submits a second job for a run its old job still trains: the "
               "duplicate fails on the run's lock, the arm turns invalid and the command exits 1",
        "protects": "A/B rule",
    },
    {
        "name": "submitted_job_not_recorded",
        "file": _CLUSTER,
        "function": "SubmititLauncher._submit",
        "old": "self._record_job(job.key, fresh=True, job_id=sj.job_id,",
        "new": "self._record_job(job.key, fresh=True, job_id=None,",
        "gates": [_C + "test_a_sigterm_to_the_driver_cancels_every_job_waits_for_their_checkpoints_and_exits_143",
                  _C + "test_a_rerun_adopts_the_job_a_killed_driver_left_in_the_queue_and_submits_only_the_others"],
        "why": "no job file names the job a run was submitted as: a killed driver's rerun cannot find it and "
               "submits a duplicate",
        "protects": "A/B rule",
    },
    # --- what `ab status` and `ab plan` say ---------------------------------------------------------------
    {
        "name": "status_blind_to_the_drivers_failures",
        "file": _STATUS,
        "function": "run_status",
        "old": "    elif failed_by_the_driver(job, last_attempt):\n",
        "new": "    elif False:\n",
        "gates": [_C + "test_status_shows_failed_for_runs_the_driver_failed_and_plan_shows_a_run_being_trained_as_running"],
        "why": "`ab status` shows a run the driver failed (cancelled while pending, killed at start, timed out "
               "too many times) as interrupted or pending: the operator waits for a run nothing will train",
        "protects": "A/B rule",
    },
    {
        "name": "plan_blind_to_a_run_being_trained",
        "file": _STATUS,
        "function": "_plan_state",
        "old": "    if state == \"complete\" or not is_locked(lock_path):\n",
        "new": "    if True:\n",
        "gates": [_C + "test_status_shows_failed_for_runs_the_driver_failed_and_plan_shows_a_run_being_trained_as_running"],
        "why": "`ab plan` says a run a job is training will be resumed from its checkpoint or restarted",
        "protects": "A/B rule",
    },
    # --- smaller things an operator meets ------------------------------------------------------------
    {
        "name": "signal_delay_checked_as_if_slurm_were_punctual",
        "file": _CLUSTER,
        "function": "validate_launcher_config",
        "old": "(first := 60 * c.time_min - c.signal_delay_s - SIGNAL_EARLY_S) < JOB_START_S",
        "new": "(first := 60 * c.time_min - c.signal_delay_s) < 0",
        "gates": [_C + "test_a_signal_delay_that_leaves_a_job_no_time_to_take_the_signal_is_refused"],
        "why": "time_min=1 with signal_delay_s=30 passes: SLURM's early warning kills the job seconds in, "
               "before the run's handler is installed",
        "protects": "A/B rule",
    },
    {
        "name": "board_starts_a_job_still_queued",
        "file": _CLUSTER,
        "function": "SubmititLauncher._submit",
        "old": "            if self.config.cluster == \"slurm\":  # queued",
        "new": "            if False:  # queued",
        "gates": [_C + "test_a_queued_job_is_started_on_the_board_only_once_squeue_lists_it_running"],
        "why": "the board prints `start` for a job still waiting for a node, and times the queue as training",
        "protects": "A/B rule",
    },
    {
        "name": "failed_job_said_running",
        "file": _CLUSTER,
        "function": "_state_now",
        "old": "    return \"\" if state_word(state) in LIVE_STATES else f\"state {state} now\"\n",
        "new": "    return f\"state {state} now\"\n",
        "gates": [_C + "test_a_failed_job_names_a_final_state_and_a_log_that_exists_or_says_there_is_none"],
        "why": "a failed run's line says `state RUNNING now` for a job that is only ending",
        "protects": "A/B rule",
    },
    {
        "name": "missing_log_given_as_its_log",
        "file": _CLUSTER,
        "function": "_log_clause",
        "old": "if Path(path).is_file() else",
        "new": "if True else",
        "gates": [_C + "test_a_failed_job_names_a_final_state_and_a_log_that_exists_or_says_there_is_none"],
        "why": "a failure sends the operator to a log path that does not exist",
        "protects": "A/B rule",
    },
    {
        "name": "complete_run_failed_by_its_job_not_counted",
        "file": _RUNNER,
        "function": "_failures",
        "old": "        if run is not None and run_state(run)[0] == \"complete\":\n",
        "new": "        if False:\n",
        "gates": [_C + "test_a_run_complete_on_disk_counts_though_its_job_was_failed_after_its_final_eval"],
        "why": "a run whose job was lost after its final eval (a second USR2 during a requeue) is failed: its "
               "arm turns invalid although the run is complete on disk",
        "protects": "A/B rule",
    },
    # --- one run across several ranks or nodes ----------------------------------------------------------
    {
        "name": "a_run_held_to_one_node",
        "file": _CLUSTER,
        "function": "make_executor",
        "old": "\"nodes\": c.nodes_per_run,",
        "new": "\"nodes\": 1,",
        "gates": [_C + _SPANS],
        "why": "launcher.nodes_per_run=2 is accepted and the run's ranks are packed onto one node",
        "protects": "A/B rule",
    },
    {
        "name": "cpu_ranks_per_node_ignored",
        "file": _LOCAL,
        "function": "ranks_per_node",
        "old": "    return int(c.tasks_per_node) or max(1, int(c.gpus_per_run))\n",
        "new": "    return max(1, int(c.gpus_per_run))\n",
        "gates": [_C + _SPANS],
        "why": "launcher.tasks_per_node=2 on CPU trains each run in one process: the DDP run asked for is "
               "never run",
        "protects": "A/B rule",
    },
    {
        "name": "gres_asked_as_gpus_per_node",
        "file": _CLUSTER,
        "function": "make_executor",
        "old": "    if c.gpus_per_run and c.gpus_as == \"gres\":\n",
        "new": "    if False:\n",
        "gates": [_C + _SPANS],
        "why": "a site that allocates GPUs by --gres gets --gpus-per-node: its jobs pend or are refused",
        "protects": "A/B rule",
    },
    {
        "name": "lost_job_of_a_complete_run_waited_for",
        "file": _CLUSTER,
        "function": "SubmititLauncher._poll_slurm",
        "old": "        if job.complete is not None and job.complete():\n",
        "new": "        if False:\n",
        "gates": [_C + "test_a_job_lost_after_its_runs_final_eval_is_done_at_once_not_failed_after_lost_after_s"],
        "why": "a job killed after its run's final eval (a second USR2 during a requeue) is waited on for "
               "lost_after_s (300 s) and reported failed, though the run is complete",
        "protects": "A/B rule",
    },
]

