"""The device ``train.device`` names, the compute dtype ``train.dtype`` resolves to on it, and its autocast
context: one owner for the loop, the preflight and ``dormouse eval``."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from dormouse.train.dist_info import DistInfo


def resolve_device(requested: str, info: DistInfo) -> torch.device:
    """``auto`` is CUDA when present, else CPU; under torchrun ``cuda`` is this rank's device."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and info.enabled:
        requested = f"cuda:{info.local_rank}"
    return torch.device(requested)


def compute_dtype(requested: str, device: torch.device) -> str:
    """``train.dtype`` on ``device``: ``auto`` is bf16-autocast on CUDA, fp32 on CPU (slow bf16 matmuls)."""
    if requested == "auto":
        return "bf16-autocast" if device.type == "cuda" else "fp32"
    return "bf16-autocast" if requested == "bf16" else "fp32"


def autocast_context(dtype: str, device: torch.device) -> Any:
    """bf16 autocast on the device's type for ``dtype`` bf16-autocast, else nothing."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16-autocast" else nullcontext()
