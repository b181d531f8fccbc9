"""A trained run's model read back from its checkpoint for ``sample``, ``eval`` and scripts: :func:`find_checkpoint`,
:func:`load_model` (from the checkpoint's saved config) and :func:`resolve_device`; a request that cannot be
honoured is a :class:`ModelLoadError` saying what to give instead."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from dormouse.arms.registry import UnknownArmError, model_arm
from dormouse.errors import DormouseError
from dormouse.model.looped import LoopedByteLM
from dormouse.run.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from dormouse.run.files import ComparisonFiles, RunFiles
from dormouse.run.plugins import load_run_plugins
from dormouse.train.state import checkpoint_step


class ModelLoadError(DormouseError, ValueError, exit_code=2):
    """A trained model that cannot be loaded as asked (exit 2); names what was given and what to give."""


def find_checkpoint(run_dir: Path, checkpoint: Path | None = None) -> Path:
    """``checkpoint`` when given, else the run's newest ``checkpoints/step_*.pt``."""
    if checkpoint is not None:
        if not checkpoint.is_file():
            raise ModelLoadError(f"--checkpoint {checkpoint}: no such file")
        return checkpoint
    if run_dir.is_file():
        raise ModelLoadError(f"{run_dir} is a file, not a run directory; to sample a checkpoint file, give its run "
                             f"directory and the file: dormouse sample {run_dir.parent.parent} --checkpoint {run_dir}")
    if not run_dir.is_dir():
        raise ModelLoadError(f"run directory {run_dir} does not exist; give the folder a `dormouse train` wrote "
                             "(runs/<run.name>)")
    if ComparisonFiles(run_dir).registration.exists():
        runs = sorted(p.name for p in run_dir.iterdir() if list_checkpoints(RunFiles(p).checkpoints))
        raise ModelLoadError(f"{run_dir} is a comparison, not one run; sample one of its runs: dormouse sample "
                             f"{run_dir / (runs[0] if runs else '<arm>-s<seed>')}"
                             + (f" (runs with a checkpoint: {', '.join(runs)})" if runs else ""))
    found = list_checkpoints(RunFiles(run_dir).checkpoints)
    if not found:
        raise ModelLoadError(f"{run_dir} has no checkpoint (checkpoints/step_*.pt): the run has not reached its "
                             "first checkpoint; wait for it, or pass --checkpoint PATH")
    return found[-1]


def load_model(path: Path, device: torch.device | str = "cpu") -> tuple[LoopedByteLM, Any, int]:
    """The model of a checkpoint in eval mode on the torch read path: ``(model, cfg, step)``."""
    try:
        state = load_checkpoint(path)
    except CheckpointError as exc:
        raise ModelLoadError(f"{exc}: not a dormouse checkpoint; give a checkpoints/step_*.pt file a run "
                             "wrote") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise ModelLoadError(f"checkpoint {path} holds no model or no config: not a dormouse checkpoint")
    cfg = OmegaConf.create(state["config"])
    if (owner := RunFiles.of_checkpoint(path)) is not None:  # a run's checkpoint: its arm's plugin, if any
        for note in load_run_plugins(owner.dir):
            print(f"warning: {note}", file=sys.stderr, flush=True)
    try:
        model_arm(cfg.model)  # an arm no loaded code defines is refused here, never built as the default arm
    except UnknownArmError as exc:
        raise ModelLoadError(f"checkpoint {path}: {exc}") from None
    model = LoopedByteLM(cfg.model, seed=int(cfg.train.seed), kernel="torch")
    model.load_state_dict(state["model"])
    model.to(device).eval()
    return model, cfg, checkpoint_step(state)


def resolve_device(device: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N``; one that this machine lacks is refused, naming it."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
        if ":" in device and int(device[5:]) >= torch.cuda.device_count():
            raise ModelLoadError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible")
        return torch.device(device)
    raise ModelLoadError(f"--device {device!r} is not cpu, cuda or cuda:N")
