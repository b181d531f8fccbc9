"""Pairs as cluster jobs through submitit (the library behind Hydra's SLURM launcher).

``dormouse ab NAME --launcher slurm [launcher.KEY=VALUE ...]``: each pair is one submitit job with the
SLURM options of :class:`SlurmLauncherConfig` (defaults in ``conf/launcher/slurm.yaml``, each overridable
on the command line as ``launcher.KEY=VALUE``). ``launcher.cluster=local`` runs the very same path on
submitit's local executor (real processes, no SLURM): the tests use it, and so can a user who wants to
see the requeue path work before queueing on a cluster.

- A pair that wants several GPUs (``gpus_per_pair > 1``) runs as a DDP job inside its allocation: one
  task per GPU, and submitit's ``TorchDistributedEnvironment`` exports the ``RANK``/``WORLD_SIZE``/
  ``MASTER_ADDR`` variables torchrun would, which the trainer reads (dormouse/distributed.py).
- Preemption and time-outs: SLURM sends ``USR2`` ahead of the kill (``signal_delay_s``). The job is a
  ``submitit.helpers.Checkpointable``; submitit's handler calls its :meth:`PairJob.checkpoint`, which
  resubmits the same job, and requeues it. The training state lives in the pair's own checkpoints on
  disk (atomic writes), so the requeued job finds the pair interrupted and resumes it from its newest
  checkpoint, bit-identically (the run's data order and depth are functions of (seed, step)). When the
  trainer itself caught the signal at a step boundary and wrote a fresh checkpoint first (it returns
  ``interrupted`` with exit code 128+USR2), the job hands over to the same submitit hook.
- ``SIGTERM`` alone (``scancel``) stops the pair at its next step with a checkpoint, without a requeue.
"""

from __future__ import annotations

import importlib.resources
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import submitit
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dormouse.ab.launch import (
    DONE,
    FAILED,
    INTERRUPTED,
    FinishFn,
    Job,
    LaunchError,
    Outcome,
    Slot,
    StartFn,
    run_in_slot,
)
from dormouse.runfiles import ComparisonFiles

LAUNCHER_PACKAGE = "dormouse.conf"
LAUNCHER_DIR = "launcher"
CLUSTERS = ("slurm", "local")


@dataclass
class SlurmLauncherConfig:
    """SLURM options for one pair's job (``conf/launcher/slurm.yaml``; ``launcher.KEY=VALUE`` overrides)."""

    cluster: str = "slurm"  # "slurm", or "local": submitit's local executor (same path, no cluster)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time_min: int = 240  # wall-clock limit of one job; a job that reaches it is requeued and resumes
    gpus_per_pair: int = 1  # 0 = a CPU job; > 1 = the pair runs as a DDP job, one task per GPU
    cpus_per_task: int = 8  # per task (per GPU); also the job's torch.set_num_threads
    mem_gb: int | None = None
    max_requeues: int = 3  # time-outs a pair may be requeued after (submitit's max_num_timeout)
    signal_delay_s: int = 120  # USR2 this long before the time limit: time to checkpoint
    array_parallelism: int = 64  # at most this many pairs at once
    setup: list[str] = field(default_factory=list)  # shell lines before the job (module load, venv)
    sbatch: dict[str, str] = field(default_factory=dict)  # any other sbatch option, e.g. {exclusive: ""}
    folder: str | None = None  # submitit's pickles and logs; null = <comparison>/submitit
    poll_s: float = 10.0  # how often the driver polls the jobs


def _fields() -> str:
    return ", ".join(SlurmLauncherConfig.__dataclass_fields__)


def load_launcher_config(name: str, overrides: Sequence[str] = ()) -> SlurmLauncherConfig:
    """``conf/launcher/NAME.yaml`` (or a YAML path) on the typed schema, then ``KEY=VALUE`` overrides (the
    ``launcher.`` prefix already stripped). :class:`LaunchError` names every bad field."""
    if name.endswith((".yaml", ".yml")):
        path: Any = Path(name)
        source = name
    else:
        path = importlib.resources.files(LAUNCHER_PACKAGE) / LAUNCHER_DIR / f"{name}.yaml"
        source = f"{LAUNCHER_PACKAGE}/{LAUNCHER_DIR}/{name}.yaml"
    if not path.is_file():
        known = sorted(p.name[:-5] for p in (importlib.resources.files(LAUNCHER_PACKAGE) / LAUNCHER_DIR)
                       .iterdir() if p.name.endswith(".yaml"))
        raise LaunchError([f"--launcher {name}: no {source}; known launchers: local (--jobs), "
                           f"{', '.join(known)}"])
    lines: list[str] = []
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(SlurmLauncherConfig), OmegaConf.create(path.read_text()))
    except OmegaConfBaseException as exc:
        raise LaunchError([f"{source}: field '{getattr(exc, 'full_key', '?')}': "
                           f"{str(getattr(exc, 'msg', exc)).splitlines()[0]} (fields: {_fields()})"]) from exc
    for o in overrides:
        key, eq, value = o.partition("=")
        if not eq:
            lines.append(f"launcher override {o!r} is not launcher.KEY=VALUE")
            continue
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}={value}"]))
        except OmegaConfBaseException as exc:
            lines.append(f"launcher.{key}={value!r}: {str(getattr(exc, 'msg', exc)).splitlines()[0]} "
                         f"(fields: {_fields()})")
    if lines:
        raise LaunchError(lines)
    out: SlurmLauncherConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    lines = validate_launcher_config(out)
    if lines:
        raise LaunchError(lines)
    return out


def validate_launcher_config(c: SlurmLauncherConfig) -> list[str]:
    lines = []
    if c.cluster not in CLUSTERS:
        lines.append(f"launcher.cluster={c.cluster!r}: one of {', '.join(CLUSTERS)}")
    for key in ("time_min", "cpus_per_task", "array_parallelism"):
        if getattr(c, key) < 1:
            lines.append(f"launcher.{key}={getattr(c, key)}: must be >= 1")
    for key in ("gpus_per_pair", "max_requeues", "signal_delay_s"):
        if getattr(c, key) < 0:
            lines.append(f"launcher.{key}={getattr(c, key)}: must be >= 0")
    if c.signal_delay_s >= 60 * c.time_min:
        lines.append(f"launcher.signal_delay_s={c.signal_delay_s} is not shorter than launcher.time_min="
                     f"{c.time_min} minutes: the job would be signalled before it starts")
    return lines


def check_cluster(c: SlurmLauncherConfig) -> None:
    """Refuse, before anything is written, a SLURM launch where there is no SLURM."""
    if c.cluster == "slurm" and submitit.SlurmExecutor.affinity() <= 0:
        raise LaunchError(["--launcher slurm: `srun` is not on PATH, so this is not a SLURM login node "
                           "(submitit submits with sbatch and runs with srun); run it on the cluster, or pass "
                           "launcher.cluster=local to run the same jobs on this machine"])


def make_executor(c: SlurmLauncherConfig, folder: Path, job_name: str) -> Any:
    """The submitit executor for ``c``: SLURM (refused loudly off a cluster) or the local executor."""
    tasks = max(1, c.gpus_per_pair)
    if c.cluster == "local":
        ex: Any = submitit.LocalExecutor(folder=folder, max_num_timeout=c.max_requeues)
        ex.update_parameters(timeout_min=c.time_min, tasks_per_node=tasks, gpus_per_node=c.gpus_per_pair,
                             signal_delay_s=c.signal_delay_s, setup=list(c.setup))
        return ex
    check_cluster(c)
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=c.max_requeues)
    params: dict[str, Any] = {
        "job_name": job_name, "time": c.time_min, "nodes": 1, "ntasks_per_node": tasks,
        "cpus_per_task": c.cpus_per_task, "signal_delay_s": c.signal_delay_s,
        "array_parallelism": c.array_parallelism, "setup": list(c.setup),
    }
    if c.gpus_per_pair:
        params["gpus_per_node"] = c.gpus_per_pair
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(c, key) is not None:
            params[key] = getattr(c, key)
    if c.mem_gb is not None:
        params["mem"] = f"{c.mem_gb}GB"
    if c.sbatch:
        params["additional_parameters"] = dict(c.sbatch)
    try:
        ex.update_parameters(**params)
    except ValueError as exc:
        raise LaunchError([f"--launcher slurm: submitit refused the options: {exc}"]) from exc
    return ex


class PairJob(submitit.helpers.Checkpointable):
    """One pair as a submitit job. Checkpointable: submitit calls :meth:`checkpoint` on USR2 (preemption
    or time-out) and requeues what it returns; the pair's state is its checkpoints on disk, so the
    resubmitted job is this same job, which resumes the pair."""

    def __init__(self, fn: Any, args: tuple[Any, ...], threads: int | None) -> None:
        self.fn, self.args, self.threads = fn, args, threads

    def __call__(self) -> Outcome:
        env = submitit.JobEnvironment()
        if env.num_tasks > 1:  # a multi-GPU pair: one task per GPU, torch.distributed over env://
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        outcome = run_in_slot(Slot(env.global_rank, self.threads, None), self.fn, self.args)
        outcome.where["job_id"] = env.job_id
        usr = env._usr_sig()  # submitit's preemption/time-out signal (USR2 unless SUBMITIT_PREEMPT_SIGNAL)
        if outcome.status == INTERRUPTED and outcome.exit_code == 128 + int(usr):
            # The trainer caught the preemption signal at a step boundary and checkpointed: hand over to
            # submitit's own handler, which calls checkpoint() below and requeues.
            signal.raise_signal(usr)
            time.sleep(5)  # the handler exits; never reached unless it declined to requeue
        return outcome

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's checkpointing hook: resubmit this job unchanged; it resumes from the pair's newest
        checkpoint on disk (nothing else holds state)."""
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


class SubmititLauncher:
    """Each job a submitit job (SLURM, or submitit's local executor). Waits for them all; Ctrl-C cancels the
    comparison's unfinished jobs (each stops at its next step with a checkpoint) and returns."""

    def __init__(self, config: SlurmLauncherConfig, folder: Path, job_name: str) -> None:
        check_cluster(config)
        self.config = config
        self.folder, self.job_name = Path(folder), job_name
        self.name = "slurm" if config.cluster == "slurm" else "submitit-local"
        self.stopped_by: int | None = None

    def settings(self) -> dict[str, Any]:
        c = asdict(self.config)
        return {"launcher": self.name, "threads_per_pair": self.config.cpus_per_task,
                **{k: c[k] for k in ("partition", "time_min", "gpus_per_pair", "cpus_per_task", "max_requeues")}}

    def run(self, jobs: Sequence[Job], on_start: StartFn, on_finish: FinishFn) -> list[Outcome]:
        if not jobs:
            return []
        # The executor (and its folder) only now: after the comparison's lock and registration check.
        executor = make_executor(self.config, self.folder, self.job_name)
        submitted: list[tuple[Job, Any]] = []
        with executor.batch():
            for job in jobs:
                submitted.append((job, executor.submit(PairJob(job.fn, job.args, self.config.cpus_per_task))))
        for job, sj in submitted:
            on_start(job.key, f"{self.name} job {sj.job_id}")
        outcomes: list[Outcome] = []
        left = dict(enumerate(submitted))
        try:
            while left:
                for i, (job, sj) in list(left.items()):
                    if not sj.done():
                        continue
                    del left[i]
                    outcome = _outcome_of(job, sj)
                    outcomes.append(outcome)
                    on_finish(outcome)
                if left:
                    time.sleep(self.config.poll_s)
        except KeyboardInterrupt:
            self.stopped_by = 130
            for job, sj in left.values():
                try:
                    sj.cancel(check=False)
                except Exception:  # a job that already finished: nothing to cancel
                    pass
                outcomes.append(Outcome(job.key, INTERRUPTED, f"job {sj.job_id} cancelled by Ctrl-C", 130))
        return outcomes


def _outcome_of(job: Job, sj: Any) -> Outcome:
    """A finished submitit job's outcome: what the pair function returned, or why there is none."""
    try:
        results = sj.results()
    except Exception as exc:  # the job raised, was killed, or timed out too often
        text = str(exc).strip().splitlines()
        return Outcome(job.key, FAILED, f"job {sj.job_id} ({sj.state}): "
                       + (text[-1] if text else type(exc).__name__) + f"; its log: {sj.paths.stderr}")
    outcome: Outcome = results[0]  # rank 0 speaks for a multi-task (DDP) pair
    if outcome.status not in (DONE, FAILED, INTERRUPTED):
        return Outcome(job.key, FAILED, f"job {sj.job_id} returned {outcome.status!r}")
    return outcome


def default_folder(comp_dir: Path, c: SlurmLauncherConfig) -> Path:
    return Path(os.path.expanduser(c.folder)) if c.folder else ComparisonFiles(Path(comp_dir)).submitit
