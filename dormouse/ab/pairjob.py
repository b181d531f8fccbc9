"""One pair of a comparison brought to completion, wherever it runs (this process, a pool worker, a
cluster job): keep it, resume it from its checkpoint, or (re)start it.

:func:`run_pair` is the function every launcher runs (dormouse/ab/launch.py). It holds the pair's own
lock while it works (a second process can never train the same pair), records each attempt in
``<comparison>/launch/<pair>.json`` (where it ran: host, pid, threads, CUDA devices, launcher; when; how
it ended) for ``--status`` and the report, and never lets an exception cross a process boundary: it
returns an :class:`~dormouse.ab.launch.Outcome`. Only ``SystemExit`` passes through (submitit's requeue).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dormouse.ab import fingerprint
from dormouse.ab.launch import DONE, FAILED, INTERRUPTED, Outcome
from dormouse.ab.lock import LockHeld, pair_lock
from dormouse.ab.records import final_row
from dormouse.checkpoint import atomic_write_text, list_checkpoints
from dormouse.errors import Interrupted
from dormouse.loglines import last_eval_phrase, read_metrics
from dormouse.logs import read_run
from dormouse.runfiles import ComparisonFiles, RunFiles

TrainFn = Callable[[DictConfig], Any]
# Exceptions that mean "stopped by a signal": the pair checkpointed (or could not) and the comparison stops;
# any other error fails only its pair.
STOP = (KeyboardInterrupt, Interrupted)


@dataclass
class Pair:
    """One (arm, replicate) run of the comparison; ``seed`` is the replicate's init seed (``train.seed``)."""

    arm: str
    seed: int
    cfg: DictConfig  # composed and validated
    run_dir: Path
    status: str = "pending"  # pending | running | resuming | done | kept | failed | interrupted
    note: str = ""
    replicate: int = 1  # 1-based index in the registered replicate stream

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def files(self) -> RunFiles:
        return RunFiles(self.run_dir)

    @property
    def steps(self) -> int:
        return int(self.cfg.train.steps)


def pair_state(pair: Pair) -> tuple[str, str]:
    """``(state, why)`` with state one of ``new``, ``complete``, ``resume`` or ``restart``.

    Complete = the final metrics row is at train.steps with a finite bpb and the log has its ``done`` line
    (a kill between the final eval and ``done`` resumes: the final checkpoint makes that a no-op run).
    """
    if not pair.run_dir.exists():
        return "new", "not started"
    rows = read_metrics(pair.files.metrics)
    if final_row(rows, pair.steps) is not None and read_run(pair.run_dir).finished:
        return "complete", f"finished at step {pair.steps}"
    if list_checkpoints(pair.files.checkpoints):
        return "resume", f"interrupted ({last_eval_phrase(rows)}); resuming from its checkpoint"
    return "restart", f"interrupted ({last_eval_phrase(rows)}) without a checkpoint; restarting it"


@dataclass
class PairTask:
    """What a job needs to run one pair; picklable when ``train_fn`` is a module-level function."""

    pair: Pair
    comp_dir: Path
    train_fn: TrainFn
    launcher: str  # how the comparison launched it (recorded with the attempt)
    output_to_file: bool = False  # a worker: its prints go to launch/<pair>.out, not the terminal
    fingerprint: str | None = None  # the code the comparison runs on (dormouse.ab.fingerprint); None = any


# --- the attempt record ---------------------------------------------------------------------------------

def launch_record_path(comp_dir: Path, pair: str) -> Path:
    return ComparisonFiles(Path(comp_dir)).launch_record(pair)


def read_launch_record(comp_dir: Path, pair: str) -> dict[str, Any]:
    """``{"pair": ..., "attempts": [...]}``; empty attempts when the pair was never launched."""
    try:
        return json.loads(launch_record_path(comp_dir, pair).read_text())
    except (OSError, ValueError):
        return {"pair": pair, "attempts": []}


def recorded_fingerprints(comp_dir: Path, pair: str) -> list[dict[str, Any] | None]:
    """The fingerprint each attempt of a pair recorded (None for an attempt that recorded none)."""
    return [a.get("fingerprint") for a in read_launch_record(comp_dir, pair).get("attempts", [])]


def _write_record(comp_dir: Path, pair: str, record: dict[str, Any]) -> None:
    path = launch_record_path(comp_dir, pair)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")


def _where() -> dict[str, Any]:
    import socket

    import torch

    return {"host": socket.gethostname(), "pid": os.getpid(), "threads": torch.get_num_threads(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "job_id": (os.environ.get("DORMOUSE_JOB_ID") or os.environ.get("SLURM_JOB_ID")  # cluster.JOB_ID_ENV
                       or os.environ.get("SUBMITIT_LOCAL_JOB_ID"))}


@contextlib.contextmanager
def _output_to(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        yield


# --- running one pair -----------------------------------------------------------------------------------

# torch reads this variable each time it looks for a compiled artifact (torch._inductor's cache_dir()).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@contextlib.contextmanager
def compile_cache(pair: Pair, comp_dir: Path) -> Iterator[str | None]:
    """``train.compile=true``: a comparison compiles once (issue 23). Every pair of the comparison, in any
    process and on any resume, points torch's own on-disk compile caches (Inductor's FX-graph cache and the
    AOTAutograd cache, both on by default) at ``<comparison>/compile_cache``, so the graph of an arm is
    lowered and built by its first pair, and later pairs (other seeds, other learning rates: the optimizer
    is outside the graph) only trace it and load the result. No home-made cache: the key and what it covers
    (graph, torch version, config) are torch's. A cache directory the user set is kept, and said; torch's
    own default is not the user's (importing ``torch._dynamo`` writes it into the environment).

    Yields the cache directory in force (None when the pair does not compile)."""
    if not bool(pair.cfg.train.compile):
        yield None
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    before = os.environ.get(INDUCTOR_CACHE_ENV)
    if before and os.path.abspath(before) != os.path.abspath(default_cache_dir()):
        print(f"{pair.name}: compile cache {before} (set by {INDUCTOR_CACHE_ENV}, not the comparison's)", flush=True)
        yield before
        return
    path = str(ComparisonFiles(Path(comp_dir)).compile_cache.resolve())
    os.environ[INDUCTOR_CACHE_ENV] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(INDUCTOR_CACHE_ENV, None)
        else:
            os.environ[INDUCTOR_CACHE_ENV] = before


def _complete(pair: Pair, train_fn: TrainFn) -> tuple[str, str]:
    """Keep, resume or (re)start the pair; ``(status, note)`` with status done or failed."""
    state, why = pair_state(pair)
    if state == "complete":
        return DONE, f"already complete ({why})"
    notes: list[str] = []
    if state == "resume":
        cfg = copy.deepcopy(pair.cfg)
        cfg.train.resume = "auto"
        try:
            train_fn(cfg)
        except STOP:
            raise
        except Exception as exc:  # a checkpoint that cannot be resumed: start the pair over
            notes.append(f"resume failed ({type(exc).__name__}: {exc}); restarted it")
            print(f"{pair.name}: {notes[-1]}", flush=True)
            state = "restart"
        else:
            notes.append("resumed from its checkpoint")
    if state in ("new", "restart"):
        if pair.run_dir.exists():
            shutil.rmtree(pair.run_dir)  # the runner owns this directory; a fresh run needs it empty
        cfg = copy.deepcopy(pair.cfg)
        cfg.train.resume = "never"
        train_fn(cfg)
    state, why = pair_state(pair)
    if state == "complete":
        return DONE, "; ".join(notes)
    rows = read_metrics(pair.files.metrics)
    return FAILED, f"the run returned without its final eval ({last_eval_phrase(rows)}; train.steps={pair.steps})"


def run_pair(task: PairTask) -> Outcome:
    """Bring one pair to completion under its lock, recording the attempt. See the module docstring."""
    pair = task.pair
    if int(os.environ.get("RANK", "0")) > 0:
        # A follower rank of a multi-GPU pair: rank 0 owns the lock, the directory and the record; the
        # trainer takes rank 0's start/resume decision (dormouse/train.py).
        cfg = copy.deepcopy(pair.cfg)
        cfg.train.resume = "auto"
        task.train_fn(cfg)
        return Outcome(pair.name, DONE, "follower rank")
    code_here = fingerprint.compute()
    if task.fingerprint is not None and code_here.sha256 != task.fingerprint:
        # The code changed between the driver's check and this job (an edit, another checkout on a node):
        # a run computed by it must not join the comparison.
        return Outcome(pair.name, FAILED, f"this job's code (fingerprint {code_here.sha256[:12]}, commit "
                       f"{code_here.commit}) is not the comparison's ({task.fingerprint[:12]}); nothing was run")
    try:
        lock = pair_lock(task.comp_dir, pair.name).acquire()
    except LockHeld as exc:
        return Outcome(pair.name, FAILED, str(exc))
    record = read_launch_record(task.comp_dir, pair.name)
    attempt: dict[str, Any] = {"launcher": task.launcher, **_where(),
                               "started": datetime.now().isoformat(timespec="seconds"), "state": "running",
                               "fingerprint": code_here.to_dict()}
    if lock.took_over:
        attempt["lock"] = lock.stale_message()
    record["attempts"] = [*record.get("attempts", []), attempt]
    _write_record(task.comp_dir, pair.name, record)
    status, note, code = "stopped", "stopped by the scheduler or a second signal", None
    t0 = datetime.now()
    out = ComparisonFiles(Path(task.comp_dir)).launch_output(pair.name) if task.output_to_file else None
    try:
        with _output_to(out), compile_cache(pair, task.comp_dir) as cache:
            if cache:
                attempt["compile_cache"] = cache
            status, note = _complete(pair, task.train_fn)
    except STOP as exc:
        status, code = INTERRUPTED, int(getattr(exc, "exit_code", 130))
        note = f"interrupted ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); rerun to resume"
    except Exception as exc:  # one failed run must not lose the others: record it and go on
        status, note = FAILED, f"{type(exc).__name__}: {exc}"
        pair.run_dir.mkdir(parents=True, exist_ok=True)
        pair.files.ab_error.write_text(traceback.format_exc())
    finally:
        attempt.update(state=status, note=note, finished=datetime.now().isoformat(timespec="seconds"),
                       elapsed_s=round((datetime.now() - t0).total_seconds(), 1))
        _write_record(task.comp_dir, pair.name, record)
        lock.release()
    return Outcome(pair.name, status, note, code)
