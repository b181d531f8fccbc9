"""Where and in what precision a run computes: the device ``train.device`` names, the compute dtype
``train.dtype`` resolves to on it, and the autocast context that applies it. One owner for the three, read by
the loop, the preflight and ``dormouse eval``."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from dormouse.train.distributed import DistInfo


def resolve_device(requested: str, info: DistInfo) -> torch.device:
    """``auto`` = CUDA when present, else CPU; under torchrun ``cuda`` is this rank's device. A device that
    does not exist was refused by :func:`dormouse.train.preflight.check_environment`."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and info.enabled:
        requested = f"cuda:{info.local_rank}"
    return torch.device(requested)


def compute_dtype(requested: str, device: torch.device) -> str:
    """``train.dtype`` resolved on ``device``: "bf16-autocast" or "fp32" (the string provenance records).
    "auto" is bf16 autocast on CUDA (its tensor cores) and fp32 on CPU (where bf16 matmuls are slow)."""
    if requested == "auto":
        return "bf16-autocast" if device.type == "cuda" else "fp32"
    return "bf16-autocast" if requested == "bf16" else "fp32"


def autocast_context(dtype: str, device: torch.device) -> Any:
    """A context running the forward in ``dtype`` (:func:`compute_dtype`): bf16 autocast on the device's own
    type (CPU autocast on CPU), or nothing for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16-autocast" else nullcontext()
