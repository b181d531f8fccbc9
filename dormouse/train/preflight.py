"""``dormouse validate``: a dry run of everything ``dormouse train`` would refuse before step 0.

The config itself is checked by :func:`dormouse.config.schema.load_config`. This module checks the rest with the
*same* functions ``train`` calls, so the two can never disagree:

* the data source: :func:`dormouse.data.load_corpus` (the file or folder exists and is readable, the
  corpus holds one ``seq_len + 1`` window in each split, a Hugging Face dataset is reachable or cached);
* the run directory: :func:`dormouse.train.start.prepare_run_dir` in dry-run mode (an existing run without
  ``train.resume``/``train.overwrite``, a resume whose checkpoint is unreadable or whose config differs),
  and that the directory can be created and is not in use by another ``train`` (its lock);
* what :func:`start_refusals` refuses, which ``train`` also calls before it creates anything:
  ``logging.wandb=online`` without credentials, and a training step that cannot fit in the device's memory
  (:func:`dormouse.train.step_notice.memory_refusal`).

:func:`config_warnings` are what runs but is probably not what was meant (``train.warmup >= train.steps``):
``train`` and ``validate`` print them and go on.

Nothing is created, removed or trained. Each problem is one line; each passing check says what it found.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig

from dormouse.data import DataError, load_corpus, resolve_eval_bytes
from dormouse.errors import TrainError
from dormouse.run.checkpoint import CheckpointError
from dormouse.run.files import RunFiles
from dormouse.train.device import resolve_device
from dormouse.train.start import default_run_name, prepare_run_dir, run_in_use
from dormouse.train.state import checkpoint_step
from dormouse.train.step_notice import device_memory, memory_refusal, size, step_memory


@dataclass
class Preflight:
    problems: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # what each passing check saw
    warnings: list[str] = field(default_factory=list)  # config_warnings: runs, but probably not as meant


def config_warnings(cfg: DictConfig) -> list[str]:
    """What a valid config runs but probably does not mean, one line each (printed, never refused)."""
    out = []
    t = cfg.train
    if int(t.warmup) >= int(t.steps):
        out.append(f"train.warmup={t.warmup} >= train.steps={t.steps}: the whole run is warmup (the learning "
                   "rate climbs to train.lr at best and never decays); lower train.warmup (nanoGPT uses ~1-5 % "
                   "of the steps)")
    return out


def _writable_ancestor(path: Path) -> str | None:
    """Why ``path`` cannot be created, or None: its nearest existing ancestor must be a writable folder."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def _wandb_credentials() -> bool:
    return bool(os.environ.get("WANDB_API_KEY")) or (Path.home() / ".netrc").exists()


WANDB_REFUSAL = ("logging.wandb=online needs credentials (WANDB_API_KEY or `wandb login`); use "
                 "logging.wandb=offline to log locally")


def start_refusals(cfg: DictConfig, device: torch.device, world_size: int = 1) -> list[str]:
    """What ``train`` refuses before it creates anything, beyond the config's own fields (load_config), the
    data and the run directory (prepare_run_dir): the same function ``validate`` calls, so whatever
    ``validate`` refuses ``train`` refuses too, before the run directory exists (issue 31, item 10)."""
    out = []
    if str(cfg.logging.wandb) == "online" and not _wandb_credentials():
        out.append(WANDB_REFUSAL)
    memory = memory_refusal(cfg, device, world_size)
    if memory is not None:
        out.append(memory)
    return out


def preflight(cfg: DictConfig) -> Preflight:
    """Every refusal ``train`` would make before step 0, for a config that passed validation."""
    out = Preflight(warnings=config_warnings(cfg))
    try:
        corpus = load_corpus(cfg.data)
        out.found.append(f"data: {corpus.source}: train {corpus.train.numel():,} bytes, "
                         f"val {corpus.val.numel():,} bytes (eval reads "
                         f"{resolve_eval_bytes(cfg.data.eval_bytes, corpus.val.numel()):,})")
    except DataError as exc:
        out.problems.append(str(exc))

    if cfg.run.name is None:
        run_dir = Path(str(cfg.run.dir)) / default_run_name(cfg, started="<start time>")
        why_not = _writable_ancestor(Path(str(cfg.run.dir)))
        if why_not is None:
            out.found.append(f"run directory: {run_dir} (new; run.name is null)")
    else:
        run_dir = Path(str(cfg.run.dir)) / str(cfg.run.name)
        why_not = _writable_ancestor(run_dir)
        in_use = run_in_use(RunFiles(run_dir))
        if in_use is not None:
            out.problems.append(in_use)
        try:
            run_dir, state, source = prepare_run_dir(cfg, dry_run=True)
            if state is not None:
                out.found.append(f"run directory: {run_dir} (resume at step {checkpoint_step(state)} from {source})")
            elif RunFiles(run_dir).holds_run():
                out.found.append(f"run directory: {run_dir} (holds a run: train.overwrite=true replaces it)")
            elif why_not is None:
                out.found.append(f"run directory: {run_dir} (new)")
        except (TrainError, CheckpointError) as exc:
            out.problems.append(str(exc))
    if why_not is not None:
        out.problems.append(f"run.dir={cfg.run.dir!r}: cannot create {run_dir}: {why_not}; choose a writable "
                            "run.dir")

    from dormouse.train.distributed import dist_info_from_env

    info = dist_info_from_env()
    device = resolve_device(str(cfg.train.device), info)
    out.problems += start_refusals(cfg, device, info.world_size)
    if memory_refusal(cfg, device, info.world_size) is None:
        have = device_memory(device)
        out.found.append(f"memory: one training step needs about {size(step_memory(cfg, info.world_size).total)}"
                         + (f" of the {size(have)} {device.type} has" if have else f" on {device.type}"))
    return out
