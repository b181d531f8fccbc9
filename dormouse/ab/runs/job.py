"""One run of a comparison brought to completion wherever it runs: keep it, resume it, or (re)start it.
:func:`train_run`, what every launcher runs, holds the run's lock, records each attempt in
``<comparison>/launch/<run>.json`` and returns an :class:`~dormouse.ab.launchers.base.Outcome` (only ``SystemExit``,
submitit's requeue, passes). Users read *run* for one (arm, replicate) training run; the code's ``Run``, ``pair_*``
names and the JSON ``"pair"`` keys name the same thing and stay, as published results read them.

No path deletes a finished run: one with its final eval on disk is complete whatever was raised after it
(:func:`run_state`); a failed resume deletes nothing, and moves the run to ``<comparison>/set_aside/`` only when
every checkpoint is unreadable; a restart removes only a directory with neither checkpoint nor final eval. A final
row torn after the final checkpoint is a resume, which writes it again (dormouse.train.loop.rebuild_final_row)."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import pickle
import shutil
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import cloudpickle
from omegaconf import DictConfig

from dormouse.ab.comparison import fingerprint
from dormouse.ab.launchers.base import DONE, FAILED, INTERRUPTED, Outcome
from dormouse.ab.runs.records import final_row
from dormouse.arms.plugins import activate, plugin_specs
from dormouse.errors import Interrupted, TrainError
from dormouse.run.checkpoint import CheckpointError, atomic_write_text, list_checkpoints, load_checkpoint
from dormouse.run.files import ComparisonFiles, RunFiles
from dormouse.run.lock import LockHeld, run_lock
from dormouse.run.loglines import format_done_line, last_eval_phrase, read_metrics
from dormouse.run.reader import logged_evals, read_run

TrainFn = Callable[[DictConfig], Any]  # trains one run's run: dormouse.train.loop.train, or a test's fake
# Exceptions that mean "stopped by a signal": the run checkpointed (or could not) and the comparison stops;
# any other error fails only its run.
STOP = (KeyboardInterrupt, Interrupted)
# The exceptions by which a resume refuses a checkpoint (dormouse.run.checkpoint.load_checkpoint's, and the
# trainer's RunDirRefused "no readable checkpoint ... (all are corrupt)"). Only one of these, with every
# checkpoint of the run failing to load, moves a run aside; anything else deletes nothing.
CHECKPOINT_REFUSALS = (CheckpointError, TrainError)
# Where a run that had to start over is moved (never deleted): <comparison>/set_aside/<run>.<when>/, the
# reason in SET_ASIDE.txt inside it.
SET_ASIDE = "set_aside"
SET_ASIDE_REASON = "SET_ASIDE.txt"


@dataclass
class Run:
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


def run_state(run: Run) -> tuple[str, str]:
    """``(state, why)``, state ``new``, ``complete``, ``resume`` or ``restart``. Complete: the final metrics row is
    at train.steps with a finite bpb (:func:`dormouse.ab.runs.records.final_row`), whatever came after it: the loop
    writes that row, then the checkpoint, ``done`` and the probe plots, and a signal in between leaves a finished
    run."""
    if not run.run_dir.exists():
        return "new", "not started"
    rows = read_metrics(run.files.metrics)
    if final_row(rows, run.steps) is not None:
        if read_run(run.run_dir).finished:
            return "complete", f"finished at step {run.steps}"
        return "complete", (f"finished at step {run.steps}: its final eval is on disk; it stopped before its "
                            "done line")
    if list_checkpoints(run.files.checkpoints):
        return "resume", f"interrupted ({last_eval_phrase(rows)}); resuming from its checkpoint"
    return "restart", f"interrupted ({last_eval_phrase(rows)}) without a checkpoint; restarting it"


@dataclass
class RunTask:
    """What a job needs to run one run; picklable when ``train_fn`` is a module-level function."""

    run: Run
    comp_dir: Path
    train_fn: TrainFn
    launcher: str  # how the comparison launched it (recorded with the attempt)
    output_to_file: bool = False  # a worker: its prints go to launch/<run>.out, not the terminal
    fingerprint: str | None = None  # the code the comparison runs on (dormouse.ab.comparison.fingerprint); None = any

    def __reduce__(self) -> tuple[Any, tuple[list[str], bytes]]:
        """Pickled as the plugins to load, then the task: a worker loads the driver's plugins before it unpickles
        the config, whose arm options may be a plugin's classes."""
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        # cloudpickle (submitit's pickler) for the state, so what it pickles by value still is
        return _task_with_plugins, (plugin_specs(), cloudpickle.dumps(state))


def _task_with_plugins(specs: list[str], state: bytes) -> RunTask:
    activate(specs, origin="the comparison's driver")
    return RunTask(**pickle.loads(state))


# --- the attempt record ---------------------------------------------------------------------------------

def launch_record_path(comp_dir: Path, run: str) -> Path:
    return ComparisonFiles(Path(comp_dir)).launch_record(run)


def read_launch_record(comp_dir: Path, run: str) -> dict[str, Any]:
    """``{"pair": ..., "attempts": [...]}``; empty attempts when the run was never launched."""
    try:
        return json.loads(launch_record_path(comp_dir, run).read_text())
    except (OSError, ValueError):
        return {"pair": run, "attempts": []}


def read_launch_job(comp_dir: Path, run: str) -> dict[str, Any]:
    """The cluster job the driver last submitted for ``run`` and how the driver ended it
    (``launch/RUN.job.json``: ``job_id``, ``state``, ``note``, ``ended``); empty when there is none."""
    try:
        out = json.loads(ComparisonFiles(Path(comp_dir)).launch_job(run).read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def failed_by_the_driver(job: dict[str, Any], last_attempt: dict[str, Any]) -> bool:
    """Whether the driver failed the run (a job cancelled while pending, killed at start, timed out too many
    times) after its last attempt began: that verdict, not the attempt's own, is the run's latest word."""
    if job.get("state") != FAILED:
        return False
    return not last_attempt or str(last_attempt.get("started", "")) <= str(job.get("ended", ""))


def recorded_fingerprints(comp_dir: Path, run: str) -> list[dict[str, Any] | None]:
    """The fingerprint each attempt of a run recorded (None for an attempt that recorded none)."""
    return [a.get("fingerprint") for a in read_launch_record(comp_dir, run).get("attempts", [])]


def _write_record(comp_dir: Path, run: str, record: dict[str, Any]) -> None:
    path = launch_record_path(comp_dir, run)
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


# --- running one run -----------------------------------------------------------------------------------

# torch reads this variable each time it looks for a compiled artifact (torch._inductor's cache_dir()).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@contextlib.contextmanager
def compile_cache(run: Run, comp_dir: Path) -> Iterator[str | None]:
    """``train.compile=true``: a comparison compiles once. Every run points torch's own on-disk caches (Inductor FX
    graph, AOTAutograd) at ``<comparison>/compile_cache``, so later runs of an arm only load the graph; the key is
    torch's. A directory the user set is kept, and said. Yields the directory (None without compile)."""
    if not bool(run.cfg.train.compile):
        yield None
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    before = os.environ.get(INDUCTOR_CACHE_ENV)
    if before and os.path.abspath(before) != os.path.abspath(default_cache_dir()):
        print(f"{run.name}: compile cache {before} (set by {INDUCTOR_CACHE_ENV}, not the comparison's)", flush=True)
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


def _train(run: Run, train_fn: TrainFn, resume: str) -> None:
    cfg = copy.deepcopy(run.cfg)
    cfg.train.resume = resume
    train_fn(cfg)


def _train_or_keep(run: Run, train_fn: TrainFn, resume: str) -> tuple[str, str] | None:
    """Train the run; a raise after the final eval keeps it (``(done, note)``), any other propagates."""
    try:
        _train(run, train_fn, resume)
    except STOP:
        raise
    except Exception as exc:
        if (kept := _kept_after(run, exc)) is not None:
            return kept
        raise
    return None


def _kept_after(run: Run, exc: BaseException) -> tuple[str, str] | None:
    """``(done, note)`` when the run is complete although training raised ``exc``, else None."""
    state, why = run_state(run)
    if state != "complete":
        return None
    note = f"complete ({why}); {type(exc).__name__} after its final eval ({_first_line(exc)}) changed nothing"
    print(f"{run.name}: {note}", flush=True)
    return DONE, _finish_log(run, note)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"


def _finish_log(run: Run, note: str) -> str:
    """Write the ``done`` line (``wall_s``: the final eval's ``time_s``) a complete run lacks, after a comment
    saying why, so its log reads finished; draw its probe plots from the final row. Returns ``note`` plus what was
    added."""
    if read_run(run.run_dir).finished:
        return note
    final = final_row(read_metrics(run.files.metrics), run.steps)
    if final is None:  # not complete: nothing to finish (callers ask only of a complete run)
        return note
    wall = float(final.get("time_s") or 0.0)
    with run.files.log.open("a", encoding="utf-8") as log:
        log.write(f"# dormouse ab: the run stopped after its final eval (step {run.steps}), "
                  f"before its done line; the run's job wrote it\n")
        log.write(format_done_line(run.steps, wall if math.isfinite(wall) else 0.0) + "\n")
    note = "; ".join(filter(None, [note, "wrote its done line"]))
    try:
        from dormouse.arms import builtin  # noqa: F401  (the arm classes that draw; torch)
        from dormouse.arms.plots import write_probe_plots

        write_probe_plots(run.run_dir, final, label=f"{run.name}, step {run.steps}")
    except Exception as exc:  # the plots illustrate; the run's numbers are its metrics, already complete
        note += f"; its probe plots could not be drawn ({type(exc).__name__}: {_first_line(exc)})"
    return note


def finish_complete_runs(runs: list[Run], comp_dir: Path) -> list[str]:
    """Before any run trains, give each complete run that lacks its ``done`` line that line, under its lock: the
    runner schedules only runs without a final eval, so the counter check would call such a run unfinished. Returns
    one line per run finished."""
    lines = []
    for run in runs:
        if run_state(run)[0] != "complete" or read_run(run.run_dir).finished:
            continue
        try:
            lock = run_lock(comp_dir, run.name).acquire()
        except LockHeld:
            continue
        try:
            lines.append(f"{run.name}: {_finish_log(run, run_state(run)[1])}")
        finally:
            lock.release()
    return lines


def unreadable_checkpoints(run: Run) -> str | None:
    """Each checkpoint's load error when none can be resumed, else None (one loads, or there are none): the evidence
    for moving a run aside."""
    ckpts = list_checkpoints(run.files.checkpoints)
    if not ckpts:
        return None
    reasons = []
    for path in reversed(ckpts):
        try:
            load_checkpoint(path)
        except CheckpointError as exc:
            reasons.append(str(exc))
        else:
            return None
    return "; ".join(reasons)


def set_aside(run: Run, comp_dir: Path, reason: str) -> Path:
    """Move the run directory to ``<comparison>/set_aside/<run>.<time>/``, ``reason`` in SET_ASIDE.txt."""
    root = Path(comp_dir) / SET_ASIDE
    root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    dest, n = root / f"{run.name}.{stamp}", 1
    while dest.exists():
        n += 1
        dest = root / f"{run.name}.{stamp}-{n}"
    atomic_write_text(run.run_dir / SET_ASIDE_REASON,
                      f"set aside {datetime.now().isoformat(timespec='seconds')} by dormouse ab so that run "
                      f"{run.name} could start over:\n{reason}\n")
    os.replace(run.run_dir, dest)  # same filesystem: one rename, nothing copied or lost
    return dest


def _clear_for_restart(run: Run) -> None:
    """Empty the way for a fresh run: a directory holding a final eval (metrics.jsonl's row, or train.log's line
    when the row was torn) or a checkpoint is refused, not deleted, whatever the caller thought."""
    final = [final_row(rows, run.steps) for rows in (read_metrics(run.files.metrics), logged_evals(run.run_dir))]
    if any(row is not None for row in final) or list_checkpoints(run.files.checkpoints):
        raise RuntimeError(f"{run.run_dir} holds a final eval or a checkpoint; refusing to delete it to restart "
                           "the run (move it away by hand if it is not wanted)")
    shutil.rmtree(run.run_dir)


def _complete(run: Run, train_fn: TrainFn, comp_dir: Path) -> tuple[str, str]:
    """Keep, resume or (re)start the run; ``(status, note)``. A resume moves a run aside only on a checkpoint
    refusal (CHECKPOINT_REFUSALS) with every checkpoint unreadable; any other exception propagates, deleting
    nothing."""
    state, why = run_state(run)
    if state == "complete":
        return DONE, _finish_log(run, f"already complete ({why})")
    notes: list[str] = []
    if state == "resume":
        try:
            if (kept := _train_or_keep(run, train_fn, "auto")) is not None:
                return kept
        except STOP:
            raise
        except Exception as exc:
            unreadable = unreadable_checkpoints(run) if isinstance(exc, CHECKPOINT_REFUSALS) else None
            if unreadable is None:
                raise  # a crash, a scheduler's exception, a refusal of a readable checkpoint: fail, keep all
            reason = f"resume refused ({type(exc).__name__}: {_first_line(exc)}); no checkpoint loads: {unreadable}"
            dest = set_aside(run, comp_dir, reason)
            notes.append(f"{reason}; moved the run aside to {dest} and restarted it")
            print(f"{run.name}: {notes[-1]}", flush=True)
            state = "restart"
        else:
            notes.append("resumed from its checkpoint")
    if state in ("new", "restart"):
        if run.run_dir.exists():
            _clear_for_restart(run)
        if (kept := _train_or_keep(run, train_fn, "never")) is not None:
            return kept
    state, why = run_state(run)
    if state == "complete":
        return DONE, _finish_log(run, "; ".join(notes))
    rows = read_metrics(run.files.metrics)
    return FAILED, f"the run returned without its final eval ({last_eval_phrase(rows)}; train.steps={run.steps})"


def train_run(task: RunTask) -> Outcome:
    """Bring one run to completion under its lock, recording the attempt."""
    run = task.run
    if int(os.environ.get("RANK", "0")) > 0:
        # A follower rank of a multi-GPU run: rank 0 owns the lock, the directory and the record; the
        # trainer takes rank 0's start/resume decision (dormouse/train/loop.py).
        cfg = copy.deepcopy(run.cfg)
        cfg.train.resume = "auto"
        task.train_fn(cfg)
        return Outcome(run.name, DONE, "follower rank")
    code_here = fingerprint.compute()
    if task.fingerprint is not None and code_here.sha256 != task.fingerprint:
        # The code changed between the driver's check and this job (an edit, another checkout on a node):
        # a run computed by it must not join the comparison.
        return Outcome(run.name, FAILED, f"this job's code (fingerprint {code_here.sha256[:12]}, commit "
                       f"{code_here.commit}) is not the comparison's ({task.fingerprint[:12]}); nothing was run")
    try:
        lock = run_lock(task.comp_dir, run.name).acquire()
    except LockHeld as exc:
        return Outcome(run.name, FAILED, str(exc))
    record = read_launch_record(task.comp_dir, run.name)
    attempt: dict[str, Any] = {"launcher": task.launcher, **_where(),
                               "started": datetime.now().isoformat(timespec="seconds"), "state": "running",
                               "fingerprint": code_here.to_dict()}
    if lock.took_over:
        attempt["lock"] = lock.stale_message()
    record["attempts"] = [*record.get("attempts", []), attempt]
    _write_record(task.comp_dir, run.name, record)
    status, note, code = "stopped", "stopped by the scheduler or a second signal", None
    diverged = False  # recorded for the tune stage, which counts a diverged run as +inf (dormouse/ab/tune/stage.py)
    t0 = datetime.now()
    out = ComparisonFiles(Path(task.comp_dir)).launch_output(run.name) if task.output_to_file else None
    try:
        with _output_to(out), compile_cache(run, task.comp_dir) as cache:
            if cache:
                attempt["compile_cache"] = cache
            status, note = _complete(run, task.train_fn, Path(task.comp_dir))
    except STOP as exc:
        status, code = INTERRUPTED, int(getattr(exc, "exit_code", 130))
        note = f"interrupted ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); rerun to resume"
    except Exception as exc:  # one failed run must not lose the others: record it and go on
        status, note = FAILED, f"{type(exc).__name__}: {exc}"
        diverged = isinstance(exc, TrainError) and exc.diverged
        run.run_dir.mkdir(parents=True, exist_ok=True)
        run.files.ab_error.write_text(traceback.format_exc())
    finally:
        attempt.update(state=status, note=note, diverged=diverged,
                       finished=datetime.now().isoformat(timespec="seconds"),
                       elapsed_s=round((datetime.now() - t0).total_seconds(), 1))
        _write_record(task.comp_dir, run.name, record)
        lock.release()
    return Outcome(run.name, status, note, code)
