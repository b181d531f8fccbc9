"""How the runs of a comparison run: in this process (:class:`InProcessLauncher`), up to N at once in worker processes
(:class:`ProcessLauncher`, ``--jobs N``) or as submitit jobs
(:class:`dormouse.ab.launchers.cluster.SubmititLauncher`). A launcher runs :class:`Job` s and owns only where each
runs, its :class:`Slot` (CPU threads, CUDA devices); what a job does is the runner's. A run's numbers depend on
neither the launcher nor its neighbours, only on the device and the CPU thread count (the reduction order), so both
are recorded with each run."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dormouse.ab.launchers.base import FAILED, INTERRUPTED, FinishFn, Job, LaunchError, Outcome, Slot, StartFn
from dormouse.arms.plugin_routes import ENV_VAR as PLUGINS_ENV_VAR

# --- slots ----------------------------------------------------------------------------------------------

def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, which a cluster or `taskset` may restrict)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_cluster_share(cores: int, *, tasks: int, most_jobs: int, most_threads: int) -> tuple[int, int]:
    """``(jobs at once, threads per task)`` of submitit's local executor on ``cores`` cores: one job per ``tasks``
    cores, each task the cores left, so jobs never start more threads than there are cores (it would start every job
    with ``cpus_per_task`` threads: 10 x 8 on 2 cores ran 4x slower). Jobs before threads, as in :func:`plan_slots`."""
    width = max(1, min(most_jobs, cores // max(tasks, 1)))
    return width, max(1, min(most_threads, cores // (width * max(tasks, 1))))


def ranks_per_node(c: Any) -> int:
    """A slurm config's DDP ranks on each node of a run: ``tasks_per_node``, else one per GPU (one on CPU)."""
    return int(c.tasks_per_node) or max(1, int(c.gpus_per_run))


def cluster_share(c: Any, cores: int | None = None) -> tuple[int | None, int]:
    """``(jobs at once, threads per task)`` of a slurm config: ``(None, cpus_per_task)`` on SLURM, else local."""
    if c.cluster == "slurm":
        return None, int(c.cpus_per_task)
    return local_cluster_share(available_cores() if cores is None else cores, tasks=ranks_per_node(c),
                               most_jobs=c.array_parallelism, most_threads=c.cpus_per_task)


def visible_cuda_devices() -> list[int]:
    """Indices of the CUDA devices this process can use, as ``CUDA_VISIBLE_DEVICES`` numbers them."""
    import torch

    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def plan_slots(jobs: int, *, cuda: bool, threads: int | None = None, cores: int | None = None,
               devices: Sequence[int] | None = None) -> list[Slot]:
    """``jobs`` slots sharing the machine: the cores split evenly, one CUDA device per job; refuses what cannot be
    honoured. The thread count is set explicitly: it fixes a CPU run's reduction order, and N jobs each on every
    core slow down by more than N."""
    lines: list[str] = []
    if jobs < 1:
        lines.append(f"--jobs {jobs}: must be >= 1")
    cores = available_cores() if cores is None else cores
    if threads is not None and threads < 1:
        lines.append(f"--threads {threads}: must be >= 1")
    per_job = threads if threads is not None else max(1, cores // max(jobs, 1))
    if jobs >= 1 and threads is None and jobs > cores and not cuda:
        lines.append(f"--jobs {jobs} on a CPU with {cores} core(s): each run would get a fraction of a core; "
                     f"use --jobs {cores} or fewer (or --threads 1 to oversubscribe on purpose)")
    slots: list[Slot] = []
    if cuda:
        devices = list(visible_cuda_devices() if devices is None else devices)
        if jobs > len(devices):
            lines.append(f"--jobs {jobs} with CUDA: each job needs its own GPU and {len(devices)} are visible "
                         f"({os.environ.get('CUDA_VISIBLE_DEVICES', 'CUDA_VISIBLE_DEVICES unset')}); use "
                         f"--jobs {max(1, len(devices))}, or train.device=cpu")
    if lines:
        raise LaunchError(lines)
    for i in range(jobs):
        slots.append(Slot(i, per_job, (devices[i],) if cuda and devices is not None else None))
    return slots


def enter_slot(slot: Slot) -> dict[str, Any]:
    """Apply a slot in this process, before any CUDA call; returns where the job runs (for the record)."""
    import torch

    if slot.cuda_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, slot.cuda_devices))
    if slot.threads is not None:
        torch.set_num_threads(slot.threads)
    return {"host": socket.gethostname(), "pid": os.getpid(), "threads": torch.get_num_threads(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "slot": slot.index}


# Set while this process runs a job (run_job): a worker whose driver died stops the job, then exits only once
# it returned (its checkpoint written, its run's lock and launch record released: dormouse/ab/runs/job.py).
_BUSY = threading.Event()


def run_in_slot(slot: Slot, fn: Callable[..., Outcome], args: tuple[Any, ...]) -> Outcome:
    """The body of one job in a fresh process: enter the slot, run the job, note where it ran."""
    enter_slot(slot)
    return run_job(fn, args)


def run_job(fn: Callable[..., Outcome], args: tuple[Any, ...]) -> Outcome:
    import torch

    _BUSY.set()
    try:
        outcome = fn(*args)
    finally:
        _BUSY.clear()
    outcome.where = {"host": socket.gethostname(), "pid": os.getpid(), "threads": torch.get_num_threads(),
                     "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), **outcome.where}
    return outcome


# --- sequential, in this process ------------------------------------------------------------------------

class InProcessLauncher:
    """One job after another in this process (closures work); the slot's threads set per job, then restored."""

    name = "sequential"

    def __init__(self, slot: Slot | None = None) -> None:
        self.slot = slot or Slot()
        self.stopped_by: int | None = None

    def settings(self) -> dict[str, Any]:
        return {"launcher": self.name, "jobs": 1, "threads_per_pair": self.slot.threads}

    def adoptable(self, keys: Sequence[str]) -> dict[str, str]:
        return {}  # its jobs die with the process that ran them

    def run(self, jobs: Sequence[Job], on_start: StartFn, on_finish: FinishFn) -> list[Outcome]:
        import torch

        outcomes: list[Outcome] = []
        before = torch.get_num_threads()
        try:
            for job in jobs:
                on_start(job.key, self.slot.describe())
                where = enter_slot(Slot(self.slot.index, self.slot.threads, None))  # never re-point CUDA here
                outcome = job.fn(*job.args)
                outcome.where = {**where, **outcome.where}
                outcomes.append(outcome)
                on_finish(outcome)
                if outcome.status == INTERRUPTED:
                    self.stopped_by = outcome.exit_code or 130
                    break
        finally:
            torch.set_num_threads(before)
        return outcomes


# --- N at once, a process each --------------------------------------------------------------------------

def _worker_init(slot: Slot, driver: DriverId | None = None, plugins_env: str | None = None) -> None:
    """Set up a slot's worker before any job: the driver's ``DORMOUSE_PLUGINS``, CUDA devices and threads (before
    any CUDA call), its own process group, SIGINT ignored outside a training loop, and :func:`watch_driver`. The
    plugins variable is the driver's now, not the one the fork server inherited when it started (a process
    keeps one server: an earlier comparison's plugins would load into this one's runs and change their code
    fingerprint). Its own group so a terminal's Ctrl-C reaches it once, through the driver: a second SIGINT
    would stop the loop without a checkpoint."""
    if plugins_env is None:
        os.environ.pop(PLUGINS_ENV_VAR, None)
    else:
        os.environ[PLUGINS_ENV_VAR] = plugins_env
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    enter_slot(slot)
    if driver is not None:
        threading.Thread(target=watch_driver, args=(driver,), name="dormouse-driver-watch", daemon=True).start()


# --- a worker outlives no driver ------------------------------------------------------------------------

@dataclass(frozen=True)
class DriverId:
    """A process told apart from a later one reusing its pid: pid and start time (``/proc/PID/stat`` field 22)."""

    pid: int
    start: str | None

    @classmethod
    def this_process(cls) -> DriverId:
        return cls(os.getpid(), _proc_start(os.getpid())[0])

    def alive(self) -> bool:
        """Whether that process still runs: not gone, not a zombie, not another process with its pid."""
        start, state = _proc_start(self.pid)
        if self.start is not None:
            return start == self.start and state not in ("Z", "X")
        try:
            os.kill(self.pid, 0)  # no /proc: a pid that exists (pid reuse cannot be told apart here)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _proc_start(pid: int) -> tuple[str | None, str | None]:
    """``(start time, state)`` of ``pid`` from ``/proc/PID/stat``; ``(None, None)`` when it has none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None, None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": comm may hold spaces and parens
    return fields[19], fields[0]  # stat fields 22 (starttime) and 3 (state)


DRIVER_POLL_S = 1.0  # how often a worker looks at its driver: cheap (one /proc read), and quick to notice
DRIVER_GONE_EXIT = 143  # as a SIGTERM would leave it: stopped from outside, its run resumable


def watch_driver(driver: DriverId, poll_s: float = DRIVER_POLL_S) -> None:
    """Stop this ``--jobs`` worker when its driver dies: a running run gets one SIGINT (once the loop's handler is
    installed) so it checkpoints and returns interrupted; an idle worker exits. A watch, not the parent: the parent
    is the fork server, which outlives the driver, and a pid alone may be reused."""
    while driver.alive():
        time.sleep(poll_s)
    print(f"dormouse ab worker {os.getpid()}: driver pid {driver.pid} is gone; stopping", file=sys.stderr,
          flush=True)
    signalled = False
    while _BUSY.is_set():
        handler = signal.getsignal(signal.SIGINT)
        if not signalled and callable(handler) and handler is not signal.default_int_handler:
            os.kill(os.getpid(), signal.SIGINT)  # the loop's handler: checkpoint at the next step, then stop
            signalled = True
        time.sleep(poll_s / 10)
    os._exit(DRIVER_GONE_EXIT)  # no driver to return to: the pool's own loop would wait on its pipe forever


class ProcessLauncher:
    """Up to ``len(slots)`` jobs at once: one long-lived single-worker ``ProcessPoolExecutor`` per slot (importing
    torch costs more than a small run), forked from :func:`worker_context` and pinned to the slot. A worker that
    dies fails its run and is replaced. SIGINT or SIGTERM is passed to each worker as one SIGINT: the runs
    checkpoint, none starts, and the comparison exits 130 or 143; a second Ctrl-C stops them at once. A SIGKILLed
    driver is seen by each worker's :func:`watch_driver`."""

    name = "local-processes"

    def __init__(self, slots: Sequence[Slot]) -> None:
        self.slots = list(slots)
        self.stopped_by: int | None = None
        # Made here, so the fork server imports torch while the driver plans and checks the comparison.
        self.context = worker_context()

    def settings(self) -> dict[str, Any]:
        return {"launcher": self.name, "jobs": len(self.slots),
                "threads_per_pair": self.slots[0].threads if self.slots else None,
                "cuda_devices": [list(s.cuda_devices) for s in self.slots if s.cuda_devices is not None] or None}

    def adoptable(self, keys: Sequence[str]) -> dict[str, str]:
        return {}  # a worker outlives no driver (watch_driver)

    def run(self, jobs: Sequence[Job], on_start: StartFn, on_finish: FinishFn) -> list[Outcome]:
        driver = DriverId.this_process()

        def pool_for(slot: Slot) -> ProcessPoolExecutor:
            return ProcessPoolExecutor(max_workers=1, mp_context=self.context, initializer=_worker_init,
                                       initargs=(slot, driver, os.environ.get(PLUGINS_ENV_VAR)))

        pools = {slot.index: pool_for(slot) for slot in self.slots}
        settle(list(pools.values()))
        pending = list(jobs)
        free = list(self.slots)
        running: dict[Future[Outcome], tuple[Job, Slot]] = {}
        outcomes: list[Outcome] = []
        stopping: list[int] = []  # the exit code of the signal that stopped the comparison, if any

        def stop_workers(code: int) -> None:
            stopping.append(code)
            for child in multiprocessing.active_children():
                try:
                    os.kill(child.pid, signal.SIGINT)  # type: ignore[arg-type]
                except OSError:
                    pass

        def on_signal(signum: int, frame: Any) -> None:
            stop_workers(128 + signum)  # 130 SIGINT, 143 SIGTERM

        # While the runs run, a signal is passed on rather than raised here: a KeyboardInterrupt outside
        # wait() (in on_start, say) would leave this loop with the workers still training.
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} \
            if _main_thread() else {}
        try:
            while pending or running:
                while pending and free and not stopping:
                    job, slot = pending.pop(0), free.pop(0)
                    running[pools[slot.index].submit(run_job, job.fn, job.args)] = (job, slot)
                    on_start(job.key, slot.describe())
                if not running:
                    break
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    job, slot = running.pop(fut)
                    free.append(slot)
                    try:
                        outcome = fut.result()
                    except Exception as exc:  # the worker process died (OOM kill, segfault, ...)
                        outcome = Outcome(job.key, FAILED, f"the worker process failed: {type(exc).__name__}: {exc}")
                        pools[slot.index].shutdown(wait=False)
                        pools[slot.index] = pool_for(slot)
                        settle([pools[slot.index]])
                    if outcome.status == INTERRUPTED and not stopping:
                        stopping.append(outcome.exit_code or 130)
                    outcomes.append(outcome)
                    on_finish(outcome)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for pool in pools.values():
                pool.shutdown(wait=True, cancel_futures=True)
        self.stopped_by = stopping[0] if stopping else None
        return outcomes


def settle(pools: list[ProcessPoolExecutor]) -> None:
    """Start each pool's worker, then unlink the names of the pool's semaphores (its queues' locks): the worker has
    opened them, and no other process will. A name left linked is the resource tracker's to clean up when the driver
    is SIGKILLed, with a "leaked semaphore objects" warning; unlinked, nothing is left to clean up."""
    for pool, ready in [(pool, pool.submit(os.getpid)) for pool in pools]:
        try:
            ready.result()
        except Exception:  # the worker died starting: its first job fails as any dead worker's does
            continue
        _unlink_semaphores(pool)


def _unlink_semaphores(pool: ProcessPoolExecutor) -> None:
    """Unlink the named semaphores of ``pool``'s call and result queues, and take them off the resource tracker's
    and the finalizers' lists (the handles the driver and the worker hold stay valid)."""
    from _multiprocessing import sem_unlink
    from multiprocessing import resource_tracker, synchronize, util

    names = set()
    for queue in (getattr(pool, "_call_queue", None), getattr(pool, "_result_queue", None)):
        for attr in ("_rlock", "_wlock", "_sem"):
            name = getattr(getattr(getattr(queue, attr, None), "_semlock", None), "name", None)
            if name is not None:
                names.add(name)
    # CPython's own bookkeeping, private: where a version lacks it, nothing is unlinked and the tracker's
    # warning is all that is left
    registry = getattr(util, "_finalizer_registry", None)
    if registry is None:
        return
    for final in list(registry.values()):  # each would unlink its name again at collection
        if getattr(final, "_callback", None) is synchronize.SemLock._cleanup and final._args[0] in names:
            final.cancel()
    for name in names:
        sem_unlink(name)
        resource_tracker.unregister(name, "semaphore")


# What the fork server imports once so no worker imports it again: torch and the trainer, and what a run's
# first run would import lazily (torch._dynamo, ~3 s, on the optimizer's construction; the probe plots).
WORKER_PRELOAD = ["torch", "torch._dynamo", "dormouse.train.loop", "dormouse.ab.runs.job", "dormouse.arms.plots"]


def worker_context() -> multiprocessing.context.BaseContext:
    """The workers' start method: the fork server with :data:`WORKER_PRELOAD` imported, else spawn. Not plain fork:
    this process may hold threads (OpenMP, CUDA) a child must not inherit; the fork server only imports, so its
    children are as clean as spawned ones."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_PRELOAD)
    multiprocessing.forkserver.ensure_running()  # returns at once; the server imports in the background
    return ctx


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
