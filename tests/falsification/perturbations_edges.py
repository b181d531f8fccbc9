"""Perturbations of the rough edges a new user meets: a run's progress off a terminal, what wandb
gets (its own directory setting, the training loss between evals, the plots), and how many threads the
cluster path starts on one machine (tests/falsification; format in perturbations_attnres.py, plus
``protects``). The data and override edges are in perturbations_data.py and perturbations_config.py."""

from __future__ import annotations

_LOOP = "dormouse/train/loop.py"
_METRICS = "dormouse/train/metrics.py"
_LAUNCH = "dormouse/ab/launchers/local.py"
_CLUSTER = "dormouse/ab/launchers/cluster.py"
_TEAM = "tests/flows/test_wandb_team.py::"
_LOCAL = "tests/flows/test_ab_cluster.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "no_plain_progress_off_a_terminal",
        "file": _LOOP,
        "function": "_Progress.__init__",
        "old": "        self.plain = PlainProgress(total, start) if enabled and mode == \"auto\" and not sys.stdout.isatty() "
               "else None\n",
        "new": "        self.plain = None\n",
        "gates": ["tests/train/test_progress_line.py::test_the_run_prints_plain_progress_only_off_a_terminal"],
        "why": "a run written to a file prints nothing between its eval lines: 18 minutes of silence on a busy "
               "machine, and no way to tell a slow run from a hung one",
        "protects": "training loop",
    },
    {
        "name": "wandb_dir_ignored",
        "file": _METRICS,
        "function": "wandb_dir",
        "old": "    return os.environ.get(\"WANDB_DIR\") or str(run_dir)\n",
        "new": "    return str(run_dir)\n",
        "gates": [_TEAM + "test_wandb_writes_under_wandb_dir_when_the_user_set_it"],
        "why": "a wandb user's WANDB_DIR is overridden by the run directory: wandb's files land where the user "
               "said they must not (a small home, a synced disk)",
        "protects": "training loop",
    },
    {
        "name": "wandb_gets_no_training_loss_between_evals",
        "file": _METRICS,
        "function": "WandbSink.train_loss",
        "old": "        self.run.log({TRAIN_LOSS: loss}, step=step)\n",
        "new": "        pass\n",
        "gates": [_TEAM + "test_wandb_gets_the_training_loss_every_step_and_the_plots_as_images"],
        "why": "wandb shows one point per eval and no training-loss curve: what a wandb user looks at first",
        "protects": "training loop",
    },
    {
        "name": "wandb_gets_no_plots",
        "file": _METRICS,
        "function": "WandbSink.images",
        "old": "        if self.image is not None and paths:\n",
        "new": "        if False:\n",
        "gates": [_TEAM + "test_wandb_gets_the_training_loss_every_step_and_the_plots_as_images"],
        "why": "the run's plots of what the arm learned stay on disk; the wandb run has none",
        "protects": "training loop",
    },
    {
        "name": "local_cluster_jobs_take_every_core_each",
        "file": _LAUNCH,
        "function": "local_cluster_share",
        "old": "    return width, max(1, min(most_threads, cores // (width * max(tasks, 1))))\n",
        "new": "    return width, most_threads\n",
        "gates": [_LOCAL + "test_local_cluster_jobs_never_start_more_threads_than_cores"],
        "why": "launcher.cluster=local starts each job with cpus_per_task threads (8) on a 2-core machine: "
               "the jobs fight for the cores and the comparison runs 4x slower than --jobs 2",
        "protects": "A/B rule",
    },
    {
        "name": "local_cluster_jobs_all_at_once",
        "file": _CLUSTER,
        "function": "SubmititLauncher.run",
        "old": "        width = self.at_once or len(jobs)\n",
        "new": "        width = len(jobs)\n",
        "gates": [_LOCAL + "test_local_cluster_jobs_run_in_waves_of_the_machines_share_and_a_stop_starts_no_wave"],
        "why": "submitit's local executor starts every job at once: 10 jobs on 2 cores, whatever each job's "
               "thread count",
        "protects": "A/B rule",
    },
    {
        "name": "verdict_summary_run_not_grouped",
        "file": "dormouse/ab/reporting/wandb_summary.py",
        "function": "log_verdict",
        "old": "                     group=str(results.name), job_type=\"verdict\", name=f\"{results.name}-verdict\",\n",
        "new": "                     group=None, job_type=\"verdict\", name=f\"{results.name}-verdict\",\n",
        "gates": ["tests/ab/test_ab_wandb_summary.py::test_the_verdict_table_is_a_summary_run_grouped_with_the_"
                  "comparisons_runs"],
        "why": "the comparison's verdict lands in wandb outside the comparison's group: a wandb user looking at "
               "the runs never finds the answer beside them",
        "protects": "A/B rule",
    },
    {
        "name": "verdict_summary_sent_with_wandb_off",
        "file": "dormouse/ab/reporting/wandb_summary.py",
        "function": "log_verdict",
        "old": "    if not wandb_on(logging):\n",
        "new": "    if False:\n",
        "gates": ["tests/ab/test_ab_wandb_summary.py::test_nothing_reaches_wandb_when_the_comparisons_runs_do_not_"
                  "log_to_it"],
        "why": "a comparison whose runs have wandb off starts a wandb run anyway (and online would prompt)",
        "protects": "A/B rule",
    },
]
