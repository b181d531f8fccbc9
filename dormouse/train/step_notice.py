"""Notices that a step cannot fit in time or memory, so a run that cannot finish is not silent:
:func:`memory_refusal` before anything is created (the step's memory against the device's total),
:func:`memory_warning` before step 0 (a crude attention bound, never a refusal) and :func:`first_step_line`
after the first step (its time, projected to the next eval and the end; after the second when compiling)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from dormouse.config.eval_schedule import eval_steps

# Warn when the estimate exceeds this share of the available memory: the attention scores are not the only
# thing a step holds (activations, weights, optimizer state), so past half the memory a step is in danger.
MEMORY_WARN_FRACTION = 0.5
_GIB = 2**30


def attention_bytes(micro_batch: int, n_heads: int, seq_len: int, max_iter: int) -> int:
    """Upper bound on attention-score bytes per micro-batch step: ``B * n_heads * seq_len^2 * 4 * depth``."""
    return micro_batch * n_heads * seq_len * seq_len * 4 * max_iter


def available_memory(device: torch.device) -> int | None:
    """Free bytes on the device (GPU free memory, or available physical pages); None if unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return None


# Bytes per float the estimate counts: float32 weights, gradients and optimizer moments; activations as
# float32 too (bf16 autocast keeps some in 2 bytes, so the activations are an upper bound there).
_F32 = 4
VOCAB = 256  # byte-level: the readout's logits per token


@dataclass(frozen=True)
class StepMemory:
    """What one rank's training step holds (:func:`step_memory`), in bytes."""

    params: int  # parameter count
    state: int  # weights, gradients, AdamW's two moments (and DDP's gradient buckets)
    activations: int  # what the forward keeps for the backward, one micro-batch

    @property
    def total(self) -> int:
        return self.state + self.activations


def param_count(cfg: DictConfig) -> int:
    """The model's parameter count without building it; the arm's own parameters are counted on the meta device."""
    from dormouse.arms.registry import arm_class
    from dormouse.config.schema import arm_name
    from dormouse.model.looped import swiglu_hidden

    m = cfg.model
    d, h = int(m.d_model), swiglu_hidden(int(m.d_model), m.mlp_hidden)
    core = VOCAB * d * (1 if m.tie_head else 2) + 4 * d * d + 3 * d * h + 3 * d
    with torch.device("meta"):
        arm = arm_class(arm_name(cfg)).from_config(m, "torch")
    return core + sum(p.numel() for p in arm.parameters())


def step_memory(cfg: DictConfig, world_size: int = 1) -> StepMemory:
    """Estimated bytes of one rank's training step: 16 per parameter (weight, gradient, two AdamW moments; 4 more under
    DDP) plus float32 activations kept for the backward, about ``d + depth (13 d + 3 h) + readouts (d + 512)`` per
    token. It leaves out attention scores and allocator slack and overstates bf16, so it refuses only configs
    that miss by a wide margin."""
    from dormouse.model.looped import swiglu_hidden

    t, m = cfg.train, cfg.model
    d, h, iters = int(m.d_model), swiglu_hidden(int(m.d_model), m.mlp_hidden), int(m.max_iter)
    params = param_count(cfg)
    state = params * _F32 * (5 if world_size > 1 else 4)
    micro = max(1, int(t.batch_size) // max(1, world_size) // max(1, int(t.grad_accum)))
    readouts = iters if str(t.readout) == "all" else 1
    per_token = d + iters * (13 * d + 3 * h) + readouts * (d + 2 * VOCAB)
    return StepMemory(params, state, micro * int(cfg.data.seq_len) * per_token * _F32)


def device_memory(device: torch.device) -> int | None:
    """The device's total memory (GPU or physical RAM), so a refusal depends on config and machine only."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return None


def size(n: float) -> str:
    """Bytes in GiB (TiB past 1024 GiB), for the memory lines."""
    gib = n / _GIB
    return f"{gib / 1024:,.1f} TiB" if gib >= 1024 else f"{gib:,.1f} GiB"


def memory_refusal(cfg: DictConfig, device: torch.device, world_size: int = 1) -> str | None:
    """The refusal of a config whose step needs more than the device's total memory, else None."""
    need, have = step_memory(cfg, world_size), device_memory(device)
    if have is None or need.total <= have:
        return None
    m, t = cfg.model, cfg.train
    return (f"model.d_model={m.d_model} model.max_iter={m.max_iter} train.batch_size={t.batch_size} "
            f"data.seq_len={cfg.data.seq_len}: one training step needs about {size(need.total)} "
            f"({need.params:,} parameters with their gradients and AdamW state: {size(need.state)}; "
            f"activations: {size(need.activations)}) but {device.type} has {size(have)} in all; lower "
            "model.d_model or model.max_iter, or train.batch_size or data.seq_len (or raise train.grad_accum)")


def memory_warning(cfg: DictConfig, device: torch.device, world_size: int) -> str | None:
    """A warning when the attention bound exceeds MEMORY_WARN_FRACTION of available memory, else None."""
    t, m = cfg.train, cfg.model
    micro = max(1, int(t.batch_size) // world_size // int(t.grad_accum))
    seq_len = int(cfg.data.seq_len)
    need = attention_bytes(micro, int(m.n_heads), seq_len, int(m.max_iter))
    free = available_memory(device)
    if free is None or need <= MEMORY_WARN_FRACTION * free:
        return None
    return (f"one step's attention at data.seq_len={seq_len} may need up to {need / _GIB:,.1f} GiB "
            f"({micro} rows x {m.n_heads} heads x seq_len^2 x 4 B x {m.max_iter} iterations) and {device.type} has "
            f"{free / _GIB:,.1f} GiB available: the step may not fit or may crawl; lower data.seq_len or "
            "train.batch_size, or raise train.grad_accum")


def duration(seconds: float) -> str:
    """``0.42 s``, ``12.3 s``, ``4.5 min``, ``2.1 h``."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def first_step_line(step_s: float, step: int, eval_every: float, steps: int, *, compiling: bool = False,
                    label: str = "first step") -> str:
    """The step's time and, at that pace, the time to the next eval and the end; none while compiling."""
    if compiling:
        return f"{label}: {duration(step_s)} (it compiled the model: train.compile; the pace follows the next step)"
    next_eval = next(s for s in eval_steps(eval_every, steps) if s >= step)
    to_eval, to_end = duration((next_eval - step) * step_s), duration((steps - step) * step_s)
    return (f"{label}: {duration(step_s)}; at this pace the first eval (step {next_eval}) is in {to_eval} "
            f"and the end (step {steps}) in {to_end}")
