"""torch.distributed under torchrun (RANK, WORLD_SIZE, LOCAL_RANK; without them every helper is a no-op):
process-group set-up, NCCL on CUDA and gloo on CPU, and the few collectives the loop needs (the rank itself:
:mod:`dormouse.train.dist_info`)."""

from __future__ import annotations

import gc
from typing import Any

import torch
import torch.distributed as dist

from dormouse.train.dist_info import DistInfo


def init_distributed(info: DistInfo, device: torch.device) -> None:
    if info.enabled and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)


def shutdown_distributed(info: DistInfo, *, barrier: bool = False) -> None:
    """Destroy the process group; with ``barrier`` (every rank finished its run) the ranks meet first: a gloo rank
    torn down while a peer still holds the connection can abort ("terminate called without an active exception").
    A rank that failed alone skips it, so that it never waits for peers that will not come. The DDP wrapper sits
    in reference cycles (its hooks close over it) and holds the group: collected here, its reducer lets go of the
    group while the interpreter is whole, not during its teardown, where a gloo worker thread can abort the rank."""
    if info.enabled and dist.is_initialized():
        if barrier:
            dist.barrier()
        gc.collect()
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few numbers across ranks (float64, so integer counters stay exact)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast_flag(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """Any rank's flag (e.g. a signal arrived) becomes every rank's, so all ranks stop at the same step."""
    if not info.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's ``obj`` on every rank (a run name, a decision, a checkpoint path)."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
