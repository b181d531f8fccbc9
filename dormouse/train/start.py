"""The run directory: what a run records about itself (provenance) and whether it may start or resume.

Starting over an existing run needs ``train.resume`` or ``train.overwrite``; a resume's default config is the
run's saved one (nanoGPT's ``init_from='resume'``), and one that changes what the run computes is refused
naming each key with both values. ``<run>/run.lock`` (:func:`hold_run`) makes one process at a time write a run.
"""

from __future__ import annotations

import errno
import importlib.resources
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from dormouse import __version__
from dormouse.arms import builtin  # noqa: F401  (the arm classes a run's name and a resume's plugins read)
from dormouse.arms.plugins import records_for
from dormouse.arms.registry import arm_class, arm_classes
from dormouse.config.overrides import GROUPS
from dormouse.config.schema import ConfigError, arm_name, compose_config
from dormouse.data import DEFAULT_EVAL_BYTES, resolve_eval_bytes
from dormouse.errors import RunDirRefused, TrainError
from dormouse.run import plugins as run_plugins
from dormouse.run.checkpoint import CheckpointError, list_checkpoints, load_checkpoint, load_newest
from dormouse.run.files import RunFiles
from dormouse.run.lock import HolderLock, LockHeld, is_locked, read_holder
from dormouse.train.batches import ByteCorpus
from dormouse.train.dist_info import DistInfo
from dormouse.train.distributed import broadcast_object
from dormouse.train.schedule import SCHEDULE_KEYS, schedule_change_problem
from dormouse.train.state import checkpoint_step

# Keys that may differ between a checkpoint's config and a resuming run's: the eval/checkpoint cadence and
# logging, and how a step's batch is split into micro-batches (train.grad_accum: the same step up to float32
# rounding, e.g. resumed on a smaller GPU; a checkpoint's config may lack the key). The schedule's keys
# (dormouse.train.schedule.SCHEDULE_KEYS: train.steps among them) may change only when
# the steps already taken keep their learning rates (schedule_change_problem).
RESUMABLE_CHANGES = ("train.eval_every", "train.ckpt_every", "train.keep_ckpts", "train.keep_best",
                     "train.grad_accum", "train.resume", "train.overwrite", "logging.")

# What a second `train` on a run in use is told: wait or stop the first; train elsewhere. Not the destructive
# train.overwrite=true, which would not help anyway (the lock refuses it too).
RUN_IN_USE_ADVICE = ("wait for it to finish, or stop it (Ctrl-C checkpoints it; continue it with "
                     "train.resume=auto); to train beside it, choose another run.name")


def default_run_name(cfg: DictConfig, started: str | None = None) -> str:
    """``<stem>-<start time>`` for a run without ``run.name``; the stem is the arm's."""
    stem = arm_class(arm_name(cfg)).run_name_stem(cfg.model)
    return f"{stem}-{started or datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"


# A write that failed because the disk (or the user's quota) is full: free space, then rerun.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def run_lock(files: RunFiles) -> HolderLock:
    """The lock of one run directory, ``<run>/run.lock``."""
    return HolderLock(files.lock, f"run {files.dir}", RUN_IN_USE_ADVICE, "run.dir")


def run_in_use(files: RunFiles) -> str | None:
    """The refusal a ``train`` on this run would meet now (its lock held), else None; read-only."""
    if not is_locked(files.lock):
        return None
    return str(LockHeld(files.lock, f"run {files.dir}", read_holder(files.lock) or {}, RUN_IN_USE_ADVICE))


@contextmanager
def hold_run(cfg: DictConfig, info: DistInfo) -> Iterator[None]:
    """Rank 0 holds the run's lock for the whole run (taking over a stale one); a start that ends before the run has a
    record (:func:`has_record`) removes what it created."""
    files = RunFiles(Path(str(cfg.run.dir)) / str(cfg.run.name))
    lock, refusal, failure = None, None, None
    created, fresh, before = False, False, set()
    if info.is_main:
        created = not files.dir.exists()
        fresh = created or not files.holds_run()
        before = {p.name for p in files.dir.iterdir()} if files.dir.is_dir() else set()
        try:
            lock = run_lock(files).acquire()
        except LockHeld as exc:
            refusal = str(exc)
        except OSError as exc:
            if exc.errno in DISK_FULL:  # not bad input: a runtime failure (exit 1), said in one line
                failure = (f"cannot write {files.lock}: {exc.strerror}; nothing of the run was written; free disk "
                           "space and rerun the same command")
            refusal = (f"cannot write the run directory {files.dir}: {exc.strerror or exc}; choose a writable "
                       "run.dir")
            if created:
                shutil.rmtree(files.dir, ignore_errors=True)  # the lock file half-made: nothing to keep
        if lock is not None and lock.stale_message():
            print(lock.stale_message(), file=sys.stderr, flush=True)
    refusal, failure = broadcast_object((refusal, failure), info)
    if failure is not None:
        raise TrainError(failure)
    if refusal is not None:
        raise RunDirRefused(refusal)
    ended = False
    try:
        yield
        ended = True
    finally:
        if lock is not None:
            failed_start = fresh and not ended and not has_record(files)
            if failed_start:
                _remove_new_entries(files, before)
            if (failed_start and files.lock.name not in before) or (
                    created and [p.name for p in files.dir.iterdir()] == [files.lock.name]):
                files.lock.unlink()  # while still held: no one can be granted a lock on a file being removed
                if created:
                    files.dir.rmdir()
            lock.release()


def has_record(files: RunFiles) -> bool:
    """Whether a run directory holds a complete metrics row or a checkpoint (else a rerun loses nothing)."""
    from dormouse.run.loglines import read_metrics

    return bool(list_checkpoints(files.checkpoints)) or bool(read_metrics(files.metrics))


def _remove_new_entries(files: RunFiles, before: set[str]) -> None:
    """Remove what a failed start created in its run directory, keeping this process's lock."""
    for entry in list(files.dir.iterdir()):  # listed first: a folder read while entries go may skip some
        if entry == files.lock or entry.name in before:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def write_failure(exc: OSError, cfg: DictConfig) -> TrainError:
    """The one line for a run stopped by a failed write, true to what is left: nothing (rerun), a checkpoint
    (resume) or a record without one (overwrite)."""
    files = RunFiles(Path(str(cfg.run.dir)) / str(cfg.run.name))
    where = f"cannot write {exc.filename}" if exc.filename else f"a write to {files.dir} failed"
    fix = "free disk space" if exc.errno in DISK_FULL else "make the run directory writable"
    checkpoints = list_checkpoints(files.checkpoints)
    if not files.holds_run():
        then = f"no checkpoint was written yet and nothing of the run was kept; {fix} and rerun the same command"
    elif checkpoints:
        then = f"the last checkpoint {checkpoints[-1]} is intact; {fix} and continue with: {resume_command(cfg)}"
    else:
        then = (f"no checkpoint was written yet, so there is nothing to resume; {fix} and start the run again "
                "with train.overwrite=true")
    return TrainError(f"{where}: {exc.strerror or exc}; {then}")


def _clear_run_dir(files: RunFiles) -> None:
    """Remove a run's files for ``train.overwrite=true``, keeping the lock this process holds on it."""
    for entry in list(files.dir.iterdir()):  # listed first: a folder read while entries go may skip some
        if entry == files.lock:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


# The CPU flags that choose which vectorised kernels torch (ATen's dispatch, oneDNN, MKL) runs: two machines
# that differ in one of them can round a float32 training run differently, at the same code, torch and threads.
KERNEL_ISA_FLAGS = ("fma", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                    "amx_tile", "amx_bf16", "amx_int8")


def cpu_description() -> dict[str, Any]:
    """The CPU as far as it decides rounding (model, torch dispatch level, :data:`KERNEL_ISA_FLAGS`): runs are
    bit-identical only on the same description and thread count."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:  # not Linux: the model and torch's dispatch level are what there is
        pass
    return {"model": model, "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "isa": [flag for flag in KERNEL_ISA_FLAGS if flag in flags]}


def provenance(cfg: DictConfig, device: torch.device, dtype: str, kernel: str, corpus: ByteCorpus,
               counts: dict[str, int], info: DistInfo) -> dict[str, Any]:
    return {
        "dormouse": __version__,
        "commit": git_commit(),
        "command": " ".join(sys.argv),
        "started": datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "cpu": cpu_description(),
        "dtype": dtype,
        "kernel": kernel,
        "kernel_requested": str(cfg.model.kernel),
        "arm": arm_name(cfg),
        run_plugins.PROVENANCE_KEY: records_for(arm_name(cfg)),  # the arm's plugin; none for a built-in arm
        "world_size": info.world_size,
        "corpus": corpus.source,
        "corpus_sha256": corpus.sha256,
        "train_bytes": int(corpus.train.numel()),
        "val_bytes": int(corpus.val.numel()),
        # what the eval set reads, and whether the default fitted it to a short val split
        "eval_bytes": resolve_eval_bytes(cfg.data.eval_bytes, corpus.val.numel()),
        "eval_bytes_from": ("data.eval_bytes" if cfg.data.eval_bytes is not None
                            else f"data.eval_bytes=null: min({DEFAULT_EVAL_BYTES}, the val split)"),
        **counts,
    }


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """A config container as ``{dotted key: leaf value}`` (a list is one leaf)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def config_differences(old: DictConfig, new: DictConfig) -> list[str]:
    """Dotted keys whose values differ, ignoring those a resume may change (budget, logging)."""
    from dormouse.config.schema import schema

    # A key the checkpoint's config lacks ran with that key's schema default (e.g. train.grad_accum=1), so it
    # differs only if the new value is not the default.
    defaults = _flat(OmegaConf.to_container(OmegaConf.structured(schema()), resolve=True))
    a = {**defaults, **_flat(OmegaConf.to_container(old, resolve=True))}
    b = _flat(OmegaConf.to_container(new, resolve=True))
    keys = sorted(set(a) | set(b))
    return [k for k in keys if a.get(k) != b.get(k) and not k.startswith(RESUMABLE_CHANGES)
            and k not in ("run.name", "run.dir")]


def _differences_with_values(old: DictConfig, new: DictConfig, keys: list[str]) -> str:
    """``key=old -> new`` for each of ``keys``, the refusal's words (one owner: the schedule's refusal too)."""
    a = _flat(OmegaConf.to_container(old, resolve=True))
    b = _flat(OmegaConf.to_container(new, resolve=True))
    return ", ".join(f"{k}={a.get(k)} -> {b.get(k)}" for k in keys)


# What a resume takes from the command line and never from the saved config: where the run is, and what to
# do with it.
COMMAND_KEYS = ("run.name", "run.dir", "train.resume", "train.overwrite")


def resume_command(cfg: DictConfig) -> str:
    """The command that continues this run: the saved config is a resume's default, so no other override."""
    where = "" if str(cfg.run.dir) == "runs" else f"run.dir={cfg.run.dir} "
    return f"dormouse train {where}run.name={cfg.run.name} train.resume=auto"


def saved_config(cfg: DictConfig) -> tuple[Path, DictConfig] | None:
    """The saved config of the run a resume continues; None when there is nothing readable to resume."""
    resume = str(cfg.train.resume)
    if resume == "never" or cfg.run.name is None:
        return None
    if resume != "auto":
        try:
            return Path(resume), OmegaConf.create(load_checkpoint(Path(resume))["config"])
        except (CheckpointError, KeyError, OSError):
            return None
    files = RunFiles(Path(str(cfg.run.dir)) / str(cfg.run.name))
    if not (files.config.is_file() and list_checkpoints(files.checkpoints)):
        return None
    try:
        return files.config, OmegaConf.load(files.config)
    except Exception as exc:  # a YAML or I/O error: say which file, whatever the parser raised
        raise ConfigError([f"train.resume=auto: cannot read the run's saved config {files.config} ({exc}); "
                           "restore it, or give every key of the run on the command line"]) from exc


def explicit_keys(overrides: list[str]) -> list[str]:
    """The dotted keys the command line sets, a preset's keys included (Hydra's grammar)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys: list[str] = []
    for o in OverridesParser.create().parse_overrides(overrides):
        if o.key_or_group in GROUPS:
            source = importlib.resources.files("dormouse.conf") / o.key_or_group / f"{o.value()}.yaml"
            preset = OmegaConf.to_container(OmegaConf.create(source.read_text()))
            keys += [k for k in _flat(preset) if not k.startswith("defaults")]
        else:
            keys.append(o.key_or_group)
    return keys


def resume_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The config a resume runs with: the run's saved one, only the command line's ``overrides`` differing."""
    found = saved_config(cfg)
    if found is None:
        return cfg
    source, saved = found
    given = explicit_keys(overrides)
    out = cfg.copy()
    for key, value in _flat(OmegaConf.to_container(saved, resolve=True)).items():
        if key in COMMAND_KEYS or any(key == g or key.startswith(g + ".") for g in given):
            continue
        try:
            OmegaConf.update(out, key, value, merge=False)
        except Exception as exc:  # OmegaConf's own error: an unknown key or a type this version refuses
            raise ConfigError([f"{source}: the saved config's {key}={value!r} does not fit this version's config "
                               f"({type(exc).__name__}); give {key} on the command line, or start a new run "
                               "(another run.name)"]) from exc
    return out


def prepare_run_dir(cfg: DictConfig, *, dry_run: bool = False) -> tuple[Path, dict[str, Any] | None, Path | None]:
    """The run directory and the checkpoint to resume from; refuses an existing run unless resumed or overwritten.
    ``dry_run`` removes nothing."""
    files = RunFiles(Path(cfg.run.dir) / str(cfg.run.name))
    run_dir, ckpt_dir = files.dir, files.checkpoints
    resume = str(cfg.train.resume)
    state: dict[str, Any] | None = None
    source: Path | None = None
    if resume not in ("never", "auto"):
        source = Path(resume)
        try:
            state = load_checkpoint(source)
        except CheckpointError as exc:
            raise RunDirRefused(f"train.resume={resume}: {exc}") from exc
    elif resume == "auto" and list_checkpoints(ckpt_dir):
        found = load_newest(ckpt_dir, warn=lambda m: print(m, file=sys.stderr))
        if found is None:
            raise RunDirRefused(f"train.resume=auto: no readable checkpoint in {ckpt_dir} (all are corrupt); "
                             "start over with train.resume=never train.overwrite=true")
        source, state = found
    if state is not None:
        old = OmegaConf.create(state["config"])
        differences = [k for k in config_differences(old, cfg) if k not in SCHEDULE_KEYS]
        problem = schedule_change_problem(old, cfg, checkpoint_step(state))
        refusals = [f"the command line differs from the run's saved config in "
                    f"{_differences_with_values(old, cfg, differences)}, which change what the run computes; a "
                    f"resume takes the saved config by default, so drop these overrides ({resume_command(cfg)}), "
                    "or start a new run (another run.name) with the new values"] if differences else []
        if problem or refusals:
            raise RunDirRefused(f"cannot resume from {source}: " + "; and ".join([*refusals, *filter(None, [problem])]))
        return run_dir, state, source
    holds_run = files.holds_run()
    if holds_run and resume == "auto" and not cfg.train.overwrite:
        raise RunDirRefused(f"train.resume=auto: {run_dir} holds a run but {ckpt_dir} has no checkpoint to resume "
                         "from; pass train.overwrite=true to restart it, or choose another run.name")
    if holds_run:
        if not cfg.train.overwrite:
            raise RunDirRefused(f"{run_dir} already holds a run; pass train.resume=auto to continue it, "
                             "train.overwrite=true to replace it, or choose another run.name")
        if not dry_run:
            _clear_run_dir(files)
    return run_dir, None, None


def _load_resumed_plugins(cfg: DictConfig) -> bool:
    """Load the plugins the resumed run recorded; True when that registered a new arm."""
    resume = str(cfg.train.resume)
    if resume == "auto" and cfg.run.name is not None:
        run: RunFiles | None = RunFiles(Path(str(cfg.run.dir)) / str(cfg.run.name))
    elif resume not in ("auto", "never"):
        run = RunFiles.of_checkpoint(Path(resume))
    else:
        run = None
    if run is None:
        return False
    before = set(arm_classes())
    for note in run_plugins.load_run_plugins(run.dir):
        print(f"warning: {note}", file=sys.stderr, flush=True)
    return set(arm_classes()) != before


def resumed_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """A resume's config: its run's plugins loaded, then its saved config under the command line's ``overrides``."""
    if _load_resumed_plugins(cfg):  # the run's plugin arm: its switch must be in the schema composed
        cfg = compose_config(overrides)
    return resume_config(cfg, overrides)
