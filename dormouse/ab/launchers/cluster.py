"""Runs as submitit jobs (``--launcher slurm``; options :class:`SlurmLauncherConfig`, defaults
``conf/launcher/slurm.yaml``); ``launcher.cluster=local`` runs the same path on submitit's local executor, sharing
the cores as ``--jobs`` does. A run of several ranks (``gpus_per_run``, ``tasks_per_node`` or ``nodes_per_run``
above 1) is one DDP job, one srun task per rank. On USR2 (preemption, time-out) submitit requeues the job, which
resumes the run from its checkpoints on disk bit-identically. SIGTERM is both a cancel and a requeue: a requeue
raises the job's restart count (:func:`requeued_by_slurm`). A job gone from the queue without a result is failed
after ``lost_after_s`` (:func:`queue_verdict`). The driver's Ctrl-C or SIGTERM cancels its jobs; the job it submitted
for each run is in ``launch/RUN.job.json``, so a killed driver's rerun adopts the jobs still queued or running."""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import submitit
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dormouse.ab.launchers.base import DONE, FAILED, INTERRUPTED, FinishFn, Job, LaunchError, Outcome, Slot, StartFn
from dormouse.ab.launchers.local import cluster_share, ranks_per_node, run_in_slot
from dormouse.ab.runs.job import read_launch_job
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import ComparisonFiles

LAUNCHER_PACKAGE = "dormouse.conf"
LAUNCHER_DIR = "launcher"
CLUSTERS = ("slurm", "local")
GPUS_AS = ("gpus_per_node", "gres")  # sites ask for GPUs one way or the other
# The job id as the driver shows it (``3_1`` for an array task), for the run's attempt record.
JOB_ID_ENV = "DORMOUSE_JOB_ID"
# How long a driver stopped by a signal waits for the jobs it cancelled to checkpoint and leave the queue: SLURM
# kills a cancelled job KillWait (30 s by default) after its SIGTERM, so each has ended well within this.
STOP_GRACE_S = 120.0
# SLURM's time-limit warning comes up to a minute before it is due (its timer's resolution); a job needs about a
# minute from its start (Python, torch, the run's set-up) before the training loop's handler takes the signal.
SIGNAL_EARLY_S, JOB_START_S = 60, 60


@dataclass
class SlurmLauncherConfig:
    """SLURM options for one run's job (``conf/launcher/slurm.yaml``; ``launcher.KEY=VALUE`` overrides)."""

    cluster: str = "slurm"  # "slurm", or "local": submitit's local executor (same path, no cluster)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time_min: int = 240  # wall-clock limit of one job; a job that reaches it is requeued and resumes
    gpus_per_run: int = 1  # per node of the run; 0 = a CPU job; > 1 = the run trains as a DDP job, one task per GPU
    nodes_per_run: int = 1  # nodes one run spans: > 1 = one DDP run across them (its ranks meet over env://)
    tasks_per_node: int = 0  # DDP ranks per node: 0 = one per GPU (one on CPU); > 1 on CPU = gloo ranks
    gpus_as: str = "gpus_per_node"  # how a GPU is asked for: gpus_per_node (--gpus-per-node) or gres (--gres=gpu:N)
    cpus_per_task: int = 8  # per task (per GPU); also the job's torch.set_num_threads (local: at most; launch.py)
    mem_gb: int | None = None
    max_requeues: int = 3  # time-outs a run may be requeued after (submitit's max_num_timeout)
    signal_delay_s: int = 120  # USR2 this long before the time limit: time to checkpoint
    array_parallelism: int = 64  # at most this many runs at once
    setup: list[str] = field(default_factory=list)  # shell lines before the job (module load, venv)
    sbatch: dict[str, str] = field(default_factory=dict)  # any other sbatch option, e.g. {exclusive: ""}
    wckey: str | None = "submitit"  # the --wckey submitit adds; null drops it (a site that refuses unknown wckeys)
    folder: str | None = None  # submitit's pickles and logs; null = <comparison>/submitit
    poll_s: float = 10.0  # how often the driver polls the jobs
    lost_after_s: float = 300.0  # a job out of the queue without a result is failed after this long


def _fields() -> str:
    return ", ".join(SlurmLauncherConfig.__dataclass_fields__)


def load_launcher_config(name: str, overrides: Sequence[str] = ()) -> SlurmLauncherConfig:
    """``conf/launcher/NAME.yaml`` (or a YAML path) on the typed schema, then ``KEY=VALUE`` overrides (no
    ``launcher.`` prefix); :class:`LaunchError` names every bad field."""
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
    if c.gpus_as not in GPUS_AS:
        lines.append(f"launcher.gpus_as={c.gpus_as!r}: one of {', '.join(GPUS_AS)}")
    if c.gpus_per_run > 0 and c.tasks_per_node not in (0, c.gpus_per_run):
        lines.append(f"launcher.tasks_per_node={c.tasks_per_node} with launcher.gpus_per_run={c.gpus_per_run}: a GPU "
                     "run has one rank per GPU; leave tasks_per_node at 0")
    if c.cluster == "local" and c.nodes_per_run > 1:
        lines.append(f"launcher.nodes_per_run={c.nodes_per_run} with launcher.cluster=local: this machine is one "
                     "node; use launcher.tasks_per_node for several ranks here")
    for key in ("time_min", "cpus_per_task", "array_parallelism", "nodes_per_run"):
        if getattr(c, key) < 1:
            lines.append(f"launcher.{key}={getattr(c, key)}: must be >= 1")
    for key in ("gpus_per_run", "tasks_per_node", "max_requeues", "signal_delay_s", "lost_after_s"):
        if getattr(c, key) < 0:
            lines.append(f"launcher.{key}={getattr(c, key)}: must be >= 0")
    if c.cluster == "slurm" and (first := 60 * c.time_min - c.signal_delay_s - SIGNAL_EARLY_S) < JOB_START_S:
        lines.append(f"launcher.signal_delay_s={c.signal_delay_s} with launcher.time_min={c.time_min}: SLURM sends "
                     f"the warning signal up to {SIGNAL_EARLY_S} s early, so a job may get it {max(first, 0)} s in, "
                     f"before its run can take it and checkpoint (allow {JOB_START_S} s); use launcher.time_min >= "
                     f"{-(-(c.signal_delay_s + SIGNAL_EARLY_S + JOB_START_S) // 60)} or a smaller signal_delay_s")
    elif c.signal_delay_s >= 60 * c.time_min:
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
    """The submitit executor for ``c``: SLURM (refused loudly off a cluster) or the local executor. A run of
    several ranks is one job of ``nodes_per_run`` x ``ranks_per_node`` srun tasks, which meet as torchrun's
    processes do (RunJob)."""
    tasks = ranks_per_node(c)
    if c.cluster == "local":
        ex: Any = submitit.LocalExecutor(folder=folder, max_num_timeout=c.max_requeues)
        ex.update_parameters(timeout_min=c.time_min, tasks_per_node=tasks, gpus_per_node=c.gpus_per_run,
                             signal_delay_s=c.signal_delay_s, setup=list(c.setup))
        return ex
    check_cluster(c)
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=c.max_requeues)
    params: dict[str, Any] = {
        "job_name": job_name, "time": c.time_min, "nodes": c.nodes_per_run, "ntasks_per_node": tasks,
        "cpus_per_task": c.cpus_per_task, "signal_delay_s": c.signal_delay_s,
        "array_parallelism": c.array_parallelism, "setup": list(c.setup), "wckey": c.wckey or None,
    }
    if c.gpus_per_run and c.gpus_as == "gres":
        params["gres"] = f"gpu:{c.gpus_per_run}"
    elif c.gpus_per_run:
        params["gpus_per_node"] = c.gpus_per_run
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


# --- what SLURM says about a job (pure decisions: tests/flows/test_ab_cluster.py checks them without a cluster) ---

# squeue's states of a job that is still SLURM's to run or finish (``squeue -t all`` also lists ended jobs
# for MinJobAge seconds, with their final state).
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED",
                         "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED",
                         "RESV_DEL_HOLD", "SPECIAL_EXIT"})


def state_word(state: str) -> str:
    """A SLURM state as one upper-case word (squeue's ``RUNNING``, sacct's ``CANCELLED by 0``); "" for none."""
    return state.split()[0].upper() if state.strip() else ""


def queue_verdict(queue_state: str | None, sacct_state: str, has_result: bool) -> str:
    """What the driver makes of a job it waits for: ``result`` (its file is there), ``alive`` (squeue lists it),
    ``ended`` (a final state, no result), ``absent`` (no squeue or sacct record: cancelled while pending, or no
    accounting) or ``unsure`` (squeue did not answer: no evidence, the lost clock does not run). ``queue_state`` is
    squeue's state ("" when unlisted), ``sacct_state`` submitit's (``UNKNOWN`` without a record). ``ended`` and
    ``absent`` fail after ``lost_after_s``, the grace for a result file on a shared filesystem (submitit counts
    UNKNOWN as unfinished forever)."""
    if has_result:
        return "result"
    if queue_state is None:
        return "unsure"
    state = state_word(queue_state)
    if state in LIVE_STATES:
        return "alive"
    if state:
        return "ended"
    sacct = state_word(sacct_state) or "UNKNOWN"
    if sacct in LIVE_STATES:
        # sacct's record lags squeue's (submitit reads it at most every few minutes): squeue is current
        # and does not list the job, so the job is not alive, whatever the old record says.
        return "absent"
    return "absent" if sacct == "UNKNOWN" else "ended"


def restart_count(info: dict[str, str] | None) -> int | None:
    """``Restarts=N`` of ``scontrol show job`` (None when unknown)."""
    try:
        return int(info["Restarts"]) if info else None
    except (KeyError, ValueError):
        return None


def requeued_by_slurm(restarts_at_start: int, info: dict[str, str] | None) -> bool:
    """Whether the job that started as restart ``restarts_at_start`` (``SLURM_RESTART_COUNT``) was requeued since:
    SLURM raises the restart count before it signals a requeue, a cancel leaves it, so a SIGTERM is a requeue
    exactly when the count went up. No record (``info`` None): not requeued."""
    now = restart_count(info)
    return now is not None and now > restarts_at_start


def stale_result(outcome: Any, info: dict[str, str] | None) -> bool:
    """A result written before its job was requeued (restart count above ``where["restarts"]``): not the outcome."""
    where = getattr(outcome, "where", None) or {}
    if "restarts" not in where:
        return False
    return requeued_by_slurm(int(where["restarts"]), info)


def requeue_went_through(returncode: int, restarts_at_start: int, info: dict[str, str] | None) -> bool:
    """Whether a failed ``scontrol requeue`` happened anyway: killed by its own requeue's SIGTERM, restart count up."""
    return returncode < 0 and requeued_by_slurm(restarts_at_start, info)


_TRACE_RULE = "-" * 22  # submitit's FailedJobError puts the job's traceback between two such lines


def failure_reason(text: str) -> str:
    """The line(s) of a submitit error that say why the job failed (its last line is only a log path): the
    traceback's exception line, or for a job with no result submitit's "has not produced any output" and the error
    stream's last line that is not submitit's bookkeeping."""
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    if _TRACE_RULE in lines:
        first = lines.index(_TRACE_RULE)
        rest = lines[first + 1:]
        trace = rest[:rest.index(_TRACE_RULE)] if _TRACE_RULE in rest else rest
        exc_lines = [ln for ln in trace if ln.strip() and not ln.startswith((" ", "\t", "Traceback"))]
        if exc_lines:
            return exc_lines[-1].strip()
    said: list[str] = []
    for ln in lines:
        if "has not produced any output" in ln:
            said.append("no result: the job " + ln[ln.index("has not produced"):].strip())
    log = [ln.strip() for ln in lines if ln.strip() and ln.strip("-") and not ln.strip().startswith(
        ("Job ", "has not produced", "Error stream produced", "No error stream", "No output", "/"))
        and "submitit " not in ln and not ln.startswith("  - ")]
    if log:
        said.append(log[-1])
    if said:
        return "; ".join(said)
    return lines[-1].strip() if lines else "no reason given"


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o``'s KEY=VALUE fields (the first job's line)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    out: dict[str, str] = {}
    for item in line.split():
        key, eq, value = item.partition("=")
        if eq:
            out.setdefault(key, value)
    return out


def slurm_job_info(job_id: str) -> dict[str, str] | None:
    """``scontrol show job -o JOB`` as a dict; None when SLURM has no record of the job (or no answer)."""
    try:
        text = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_scontrol(text) or None


def job_info_in_job(job_id: str, tries: int = 5, pause_s: float = 0.5) -> dict[str, str] | None:
    """:func:`slurm_job_info` asked twice from a job being signalled: a requeue's SIGTERM can kill the first call."""
    for attempt in range(tries):
        info = slurm_job_info(job_id)
        if info is not None:
            return info
        if attempt + 1 < tries:
            time.sleep(pause_s)
    return None


def squeue_states() -> dict[str, str] | None:
    """This user's jobs as squeue lists them (array tasks one by one, ended ones included: ``-t all``): job id ->
    state; None when squeue does not answer."""
    try:
        text = subprocess.run(["squeue", "-h", "-r", "-t", "all", "--me", "-o", "%i|%T"], capture_output=True,
                              text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    states = {}
    for line in text.splitlines():
        job, _, state = line.strip().partition("|")
        if job:
            states[job] = state
    return states


def _restarts_at_start() -> int:
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def _requeue_surviving_its_own_signal(self: Any, countdown: int) -> None:
    """submitit's ``SlurmJobEnvironment._requeue``, except that a ``scontrol requeue`` killed by the requeue's own
    SIGTERM is no error when the job was requeued (:func:`requeue_went_through`)."""
    from submitit.core import logger

    jid = self.job_id
    try:
        subprocess.check_call(["scontrol", "requeue", jid], timeout=60)
    except subprocess.CalledProcessError as exc:
        info = job_info_in_job(jid)
        if not requeue_went_through(exc.returncode, _restarts_at_start(), info):
            raise
        logger.get_logger().info(f"`scontrol requeue {jid}` died with signal {-exc.returncode}, sent by the "
                                 f"requeue it asked for: job {jid} is requeued (restart {restart_count(info)})")
    logger.get_logger().info(f"Requeued job {jid} ({countdown} remaining timeouts)")


class RunJob(submitit.helpers.Checkpointable):
    """One run as a checkpointable submitit job: requeued on USR2, it resumes from the run's checkpoints."""

    def __init__(self, fn: Any, args: tuple[Any, ...], threads: int | None) -> None:
        self.fn, self.args, self.threads = fn, args, threads

    def __call__(self) -> Outcome:
        env = submitit.JobEnvironment()
        slurm = isinstance(env, submitit.slurm.slurm.SlurmJobEnvironment)
        if slurm:
            # submitit's requeue, made to survive the SIGTERM of its own requeue.
            submitit.slurm.slurm.SlurmJobEnvironment._requeue = _requeue_surviving_its_own_signal
        # The job id as the driver and its board name it (an array task: 3_1, not SLURM_JOB_ID's 5), for
        # the run's attempt record (dormouse/ab/runs/job.py).
        os.environ[JOB_ID_ENV] = env.job_id
        if env.num_tasks > 1:  # a DDP run: one task per rank, on one node or several, torch.distributed over env://
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        outcome = run_in_slot(Slot(env.global_rank, self.threads, None), self.fn, self.args)
        outcome.where["job_id"] = env.job_id
        if slurm:
            outcome.where["restarts"] = _restarts_at_start()
        usr = env._usr_sig()  # submitit's preemption/time-out signal (USR2 unless SUBMITIT_PREEMPT_SIGNAL)
        if outcome.status == INTERRUPTED and outcome.exit_code == 128 + int(usr):
            # The trainer caught the preemption signal at a step boundary and checkpointed: hand over to
            # submitit's own handler, which calls checkpoint() below and requeues.
            signal.raise_signal(usr)
            time.sleep(5)  # the handler exits; never reached unless it declined to requeue
        if (slurm and outcome.status == INTERRUPTED and outcome.exit_code == 128 + int(signal.SIGTERM)
                and requeued_by_slurm(_restarts_at_start(), job_info_in_job(env.job_id))):
            # SIGTERM was SLURM's requeue, not a cancel: end without a result, as submitit's own requeue
            # does (SystemExit writes none), so the driver waits for the requeued job, which resumes.
            print(f"job {env.job_id}: SIGTERM was SLURM's requeue; the requeued job resumes the run", flush=True)
            sys.exit(-1)
        return outcome

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's hook: resubmit this job unchanged (the run's state is its checkpoints on disk)."""
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


class SubmititLauncher:
    """Each job a submitit job. Waits for them all, polling squeue once per round on SLURM. Ctrl-C or SIGTERM
    cancels the unfinished jobs (each checkpoints at its next step), waits for them to end, and returns; a rerun
    adopts the jobs a killed driver left in the queue (``launch/RUN.job.json``) rather than submitting them again."""

    def __init__(self, config: SlurmLauncherConfig, folder: Path, job_name: str, comp_dir: Path | None = None) -> None:
        check_cluster(config)
        self.config = config
        self.folder, self.job_name = Path(folder), job_name
        self.comp_dir = None if comp_dir is None else Path(comp_dir)  # where the job files go (None: nowhere)
        self.name = "slurm" if config.cluster == "slurm" else "submitit-local"
        self.stopped_by: int | None = None
        self._signal: int | None = None  # the signal that stopped the launch
        # SLURM jobs submitted but not yet seen out of PENDING: key -> where; the board hears "start" only then.
        self._unstarted: dict[str, str] = {}
        self._on_start: StartFn = lambda key, where: None
        # On SLURM every job is submitted at once (the scheduler runs them as nodes free up, with the
        # threads it allocated); on this machine, a share of its cores (:func:`local_cluster_share`).
        self.at_once, self.threads = cluster_share(config)

    def settings(self) -> dict[str, Any]:
        c = asdict(self.config)
        return {"launcher": self.name, "threads_per_pair": self.threads,
                **({"jobs": self.at_once} if self.at_once is not None else {}),
                **{k: c[k] for k in ("partition", "time_min", "gpus_per_run", "cpus_per_task", "max_requeues")},
                **({"ranks_per_run": c["nodes_per_run"] * ranks_per_node(self.config)}
                   if c["nodes_per_run"] * ranks_per_node(self.config) > 1 else {})}

    def run(self, jobs: Sequence[Job], on_start: StartFn, on_finish: FinishFn) -> list[Outcome]:
        """Submit (or adopt) and wait: all at once on SLURM, locally in waves of ``at_once``; after a stop no
        wave starts. A signal anywhere in here, submitting included, stops every job submitted."""
        if not jobs:
            return []
        # The executor (and its folder) only now: after the comparison's lock and registration check.
        executor = make_executor(self.config, self.folder, self.job_name)
        width = self.at_once or len(jobs)
        outcomes: list[Outcome] = []
        submitted: list[tuple[Job, Any]] = []
        self._on_start = on_start

        def finished(outcome: Outcome) -> None:
            outcomes.append(outcome)
            self._record_job(outcome.key, state=outcome.status, note=outcome.note,
                             ended=datetime.now().isoformat(timespec="seconds"))
            on_finish(outcome)

        with self._signals_stop():
            try:
                for first in range(0, len(jobs), width):
                    wave = self._submit(executor, jobs[first:first + width], on_start, submitted)
                    self.wait(wave, finished)
                    if self.stopped_by is not None:
                        break
            except KeyboardInterrupt:
                self.stopped_by = 128 + int(self._signal or signal.SIGINT)
                ended = {o.key for o in outcomes}
                self._stop([(job, sj) for job, sj in submitted if job.key not in ended], finished)
        return outcomes

    def _submit(self, executor: Any, wave: Sequence[Job], on_start: StartFn,
                submitted: list[tuple[Job, Any]]) -> list[tuple[Job, Any]]:
        """Each job of ``wave`` submitted, or adopted when a job an earlier driver submitted for it still runs,
        and added to ``submitted`` at once (a signal from here on stops it); each job file written before the
        board hears of it, so a killed driver's rerun finds every job."""
        live = self._live_jobs([job.key for job in wave])
        fresh = [job for job in wave if job.key not in live]
        handles: list[tuple[Job, Any]] = []
        if fresh:
            with executor.batch():
                handles = [(job, executor.submit(RunJob(job.fn, job.args, self.threads))) for job in fresh]
        now = datetime.now().isoformat(timespec="seconds")
        for job, sj in handles:
            self._record_job(job.key, fresh=True, job_id=sj.job_id, cluster=self.config.cluster,
                             folder=str(self.folder), submitted=now, state="submitted")
        adopted = [(job, submitit.SlurmJob(folder=live[job.key]["folder"], job_id=live[job.key]["job_id"],
                                           tasks=tuple(range(self.config.nodes_per_run
                                                             * ranks_per_node(self.config)))))
                   for job in wave if job.key in live]
        submitted += handles + adopted
        for job, sj in handles:
            if self.config.cluster == "slurm":  # queued: its start is when squeue first lists it out of PENDING
                self._unstarted[job.key] = f"{self.name} job {sj.job_id}"
            else:
                on_start(job.key, f"{self.name} job {sj.job_id}")
        for job, sj in adopted:
            on_start(job.key, f"{self.name} job {sj.job_id}, adopted ({live[job.key]['queue_state']})")
        return handles + adopted

    def adoptable(self, keys: Sequence[str]) -> dict[str, str]:
        """The runs whose job an earlier driver submitted and SLURM still runs or queues: run -> what to say.
        Waiting for such a job, not submitting a second one, is the rerun of a killed driver (a duplicate would
        fail on the run's lock)."""
        return {key: f"{job['queue_state'].lower()} as {self.name} job {job['job_id']}, submitted by an earlier "
                     f"`dormouse ab` ({job.get('submitted', '?')}): waiting for it, not submitting it again"
                for key, job in self._live_jobs(keys).items()}

    def _live_jobs(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Job files (``launch/RUN.job.json``) of ``keys`` naming a job squeue lists as live; on SLURM only (a
        local job dies with its driver), and none when squeue does not answer (no evidence of a live job)."""
        if self.config.cluster != "slurm" or self.comp_dir is None:
            return {}
        recorded = {key: job for key in keys if (job := self._read_job(key)).get("state") == "submitted"
                    and job.get("job_id") and job.get("cluster") == "slurm"}
        queue = squeue_states() if recorded else None
        if not queue:
            return {}
        live = {}
        for key, job in recorded.items():
            state = state_word(queue.get(str(job["job_id"]), ""))
            if state in LIVE_STATES:
                live[key] = {**job, "queue_state": state}
        return live

    def _read_job(self, key: str) -> dict[str, Any]:
        return {} if self.comp_dir is None else read_launch_job(self.comp_dir, key)

    def _record_job(self, key: str, fresh: bool = False, **fields: Any) -> None:
        """Merge ``fields`` into the run's job file (``fresh``: a new job, nothing kept); atomic, written by the
        driver alone (it holds the comparison's lock), read by ``ab status`` and a later driver."""
        if self.comp_dir is None:
            return
        path = ComparisonFiles(self.comp_dir).launch_job(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({**({} if fresh else self._read_job(key)), **fields}, indent=2) + "\n")

    @contextlib.contextmanager
    def _signals_stop(self) -> Iterator[None]:
        """SIGINT and SIGTERM raise KeyboardInterrupt here, the signal noted: both stop the jobs the same way,
        and the comparison exits 128 + the signal (130, 143). Only the main thread may set a handler."""
        def handler(signum: int, frame: Any) -> None:
            self._signal = signum
            raise KeyboardInterrupt

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def _stop(self, unfinished: Sequence[tuple[Job, Any]], finished: FinishFn) -> None:
        """Cancel the unfinished jobs (SLURM's SIGTERM: each run checkpoints at its next step, within KillWait)
        and wait up to STOP_GRACE_S for each to end, so its outcome is recorded and its run's lock free when the
        driver exits; a second signal stops the wait."""
        how = "SIGTERM" if self._signal == signal.SIGTERM else "Ctrl-C"
        for _, sj in unfinished:
            # a job that already finished has nothing to cancel; a second signal must not leave the rest running
            with contextlib.suppress(Exception, KeyboardInterrupt):
                sj.cancel(check=False)
        left = dict(enumerate(unfinished))
        if left:
            print(f"{how}: cancelled {len(left)} {self.name} job(s) ({', '.join(sj.job_id for _, sj in unfinished)});"
                  f" waiting up to {STOP_GRACE_S:g} s for them to checkpoint and end (signal again to stop waiting)",
                  flush=True)
        deadline = time.monotonic() + STOP_GRACE_S
        try:
            while left and time.monotonic() < deadline:
                slurm = self.config.cluster == "slurm"
                queue = squeue_states() if slurm else {}
                for i, (job, sj) in list(left.items()):
                    if _ended(sj, queue, slurm):
                        del left[i]
                        finished(_outcome_of(job, sj) if sj.task(0).paths.result_pickle.exists() else
                                 Outcome(job.key, INTERRUPTED, f"job {sj.job_id} cancelled by {how} before it "
                                         "wrote a result", self.stopped_by))
                if left:
                    time.sleep(min(self.config.poll_s, 1.0))
        except KeyboardInterrupt:
            pass
        for job, sj in left.values():
            finished(Outcome(job.key, INTERRUPTED, f"job {sj.job_id} cancelled by {how}; it had not ended when the "
                             "driver stopped waiting", self.stopped_by))

    def wait(self, submitted: Sequence[tuple[Job, Any]], on_finish: FinishFn) -> list[Outcome]:
        outcomes: list[Outcome] = []
        left = dict(enumerate(submitted))
        lost_since: dict[int, float] = {}
        slurm = self.config.cluster == "slurm"
        silent_since: float | None = None  # since when squeue has not answered (the controller is down)
        while left:
            queue = squeue_states() if slurm else {}
            silent_since = self._say_if_silent(queue, silent_since)
            for i, (job, sj) in list(left.items()):
                if slurm:
                    outcome = self._poll_slurm(job, sj, queue, lost_since, i)
                    self._say_started(job.key, (queue or {}).get(sj.job_id, ""), ended=outcome is not None)
                elif sj.done():
                    outcome = _outcome_of(job, sj)
                else:
                    outcome = None
                if outcome is None:
                    continue
                del left[i]
                outcomes.append(outcome)
                on_finish(outcome)
            if left:
                time.sleep(self.config.poll_s)
        return outcomes

    def _say_started(self, key: str, queue_state: str, ended: bool) -> None:
        """Tell the board a queued job started once squeue lists it out of PENDING (or it ended first): a job
        still waiting for a node is not running."""
        where = self._unstarted.get(key)
        if where is None or not (ended or state_word(queue_state) not in ("", "PENDING")):
            return
        del self._unstarted[key]
        self._on_start(key, where)

    def _say_if_silent(self, queue: dict[str, str] | None, since: float | None) -> float | None:
        """A silent controller is no evidence of a lost job, so the driver waits, saying so once every
        ``lost_after_s``. Returns the new start of the silence (None once squeue answers)."""
        if queue is not None:
            return None
        now = time.monotonic()
        if since is None:
            return now
        if now - since >= self.config.lost_after_s:
            print(f"squeue has not answered for {now - since:.0f} s (the SLURM controller is down or "
                  f"unreachable); still waiting for {self.name} jobs: Ctrl-C stops the comparison and cancels "
                  "them", flush=True)
            return now
        return since

    def _poll_slurm(self, job: Job, sj: Any, queue: dict[str, str] | None, lost_since: dict[int, float],
                    i: int) -> Outcome | None:
        """One SLURM job's outcome, or None while there is none yet (see :func:`queue_verdict`)."""
        result = sj.task(0).paths.result_pickle
        queue_state = None if queue is None else queue.get(sj.job_id, "")
        verdict = queue_verdict(queue_state, sj.state if queue_state == "" else "", result.exists())
        if verdict == "result":
            lost_since.pop(i, None)
            outcome = _outcome_of(job, sj)
            if outcome.status != DONE and stale_result(outcome, slurm_job_info(sj.job_id)):
                # The job was requeued after it wrote this (SIGTERM requeue, preemption): the requeued job
                # writes the run's outcome. Keep the stale file beside it, for the record.
                aside = result.with_name(f"{result.name}.before-restart-{outcome.where.get('restarts')}")
                result.replace(aside)
                print(f"job {sj.job_id}: {outcome.status} ({outcome.note}), then requeued by SLURM: waiting for "
                      f"the requeued job (the earlier result is {aside.name})", flush=True)
                return None
            return outcome
        if verdict in ("alive", "unsure"):
            lost_since.pop(i, None)
            return None
        if job.complete is not None and job.complete():
            # the job is gone without a result but its work is on disk (a second USR2 killed the requeued
            # job after the run's final eval): nothing left to wait lost_after_s for
            lost_since.pop(i, None)
            return Outcome(job.key, DONE, f"job {sj.job_id} left the queue ({queue_state or sj.state}) without a "
                           "result, after the run's final eval: complete on disk")
        since = lost_since.setdefault(i, time.monotonic())
        if time.monotonic() - since < self.config.lost_after_s:
            return None
        what = ("SLURM has no record of it (cancelled while pending, or gone on a cluster without accounting)"
                if verdict == "absent" else f"it ended ({queue_state or sj.state}) without a result")
        said = _last_line(sj.paths.stderr)
        return Outcome(job.key, FAILED, f"job {sj.job_id}: {what}, for {self.config.lost_after_s:g} s "
                       f"(launcher.lost_after_s)" + (f"; its log ends: {said}" if said else "")
                       + f"; {_log_clause(sj.paths.stderr)}")


def _ended(sj: Any, queue: dict[str, str] | None, slurm: bool) -> bool:
    """Whether a cancelled job is over: on SLURM, squeue lists it in no live state (its result, if any, is
    written before), or squeue does not answer and its result is there; a local job: its result, or submitit
    says it is done."""
    result = sj.task(0).paths.result_pickle.exists()
    if not slurm:
        return result or bool(sj.done())
    if queue is None:
        return result
    return state_word(queue.get(sj.job_id, "")) not in LIVE_STATES


def _outcome_of(job: Job, sj: Any) -> Outcome:
    """A finished submitit job's outcome: what the run function returned, or why there is none."""
    try:
        results = sj.results()
    except Exception as exc:  # the job raised, was killed, or timed out too often
        state = _state_now(sj)
        return Outcome(job.key, FAILED, f"job {sj.job_id}{f' ({state})' if state else ''}: "
                       f"{failure_reason(str(exc))}; {_log_clause(sj.paths.stderr)}")
    outcome: Outcome = results[0]  # rank 0 speaks for a multi-task (DDP) run
    if outcome.status not in (DONE, FAILED, INTERRUPTED):
        return Outcome(job.key, FAILED, f"job {sj.job_id} returned {outcome.status!r}")
    return outcome


def _last_line(path: Path) -> str:
    """The last non-empty line of a job's log (``srun: error: ... Killed``), or "" when there is none."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _log_clause(path: Path) -> str:
    """Where the job's log is, or that it wrote none: a path to read must exist."""
    return f"its log: {path}" if Path(path).is_file() else (
        f"no log at {path} (the job never started, or its folder is not shared with this machine)")


def _state_now(sj: Any) -> str:
    """The job's final state as SLURM says it now (submitit's cached one can be minutes old); "" while SLURM
    still lists it live (a job whose result says it failed is only ending: RUNNING would mislead)."""
    if isinstance(sj, submitit.SlurmJob):
        info = slurm_job_info(sj.job_id)
        if info and info.get("JobState"):
            state = info["JobState"]
        else:
            try:
                state = sj.get_info(mode="force").get("State") or "UNKNOWN"
            except Exception:  # sacct unreachable: say so rather than a stale state
                return "state unknown"
    else:
        state = str(sj.state)
    return "" if state_word(state) in LIVE_STATES else f"state {state} now"


def default_folder(comp_dir: Path, c: SlurmLauncherConfig) -> Path:
    return Path(os.path.expanduser(c.folder)) if c.folder else ComparisonFiles(Path(comp_dir)).submitit
