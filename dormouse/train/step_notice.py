"""Notices that a step cannot fit in time or memory, so a run that cannot finish is not silent (issue 24:
``data.seq_len=100000`` ran ten silent minutes before anyone knew).

* before anything is created, :func:`memory_refusal`: the memory a training step needs
  (:func:`step_memory`: parameters, gradients, AdamW state and the activations kept for the backward) against
  the memory the device has in all; a config that cannot fit is refused in one line, by ``validate`` and by
  ``train`` alike (issue 31: ``model.d_model=100000`` gave a traceback at allocation);
* before step 0, :func:`memory_warning`: a rough upper bound on one step's attention memory against the
  memory available; a warning, never a refusal (the bound is crude, see :func:`attention_bytes`);
* after the first step, :func:`first_step_line`: that step's wall time and, at that pace, the time to the
  first eval and to the end (the step includes warm-up, so the projection is pessimistic if anything); a
  compiled run's first step is mostly compilation, so its projection comes after the second step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

# Warn when the estimate exceeds this share of the available memory: the attention scores are not the only
# thing a step holds (activations, weights, optimizer state), so past half the memory a step is in danger.
MEMORY_WARN_FRACTION = 0.5
_GIB = 2**30


def attention_bytes(micro_batch: int, n_heads: int, seq_len: int, max_iter: int) -> int:
    """Bytes of attention scores one micro-batch's step may hold: micro_batch x n_heads x seq_len^2 scores,
    4 bytes each (float32; autocast's bf16 halves the matmul's output but the softmax runs in float32), one
    matrix per iteration of the shared block (each is saved for the backward). PyTorch's math attention path
    materialises them; the flash and memory-efficient kernels do not, so this is an upper bound, which is why
    it only warns."""
    return micro_batch * n_heads * seq_len * seq_len * 4 * max_iter


def available_memory(device: torch.device) -> int | None:
    """Free bytes where the step runs: the GPU's free memory on CUDA, the machine's available physical pages
    on CPU (os.sysconf; None where the platform does not say)."""
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
    """The model's parameters without building it: the embedding (and the untied head), the shared block's
    attention (qkv and proj, 4 d^2) and SwiGLU (gate_up and down, 3 d h), the norms, and the arm's own
    parameters counted on PyTorch's meta device (no memory; an AttnRes input query alone is
    (3 max_iter) d^2)."""
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
    """The memory one rank's training step needs, an estimate (issue 31, item 10).

    * state: 16 bytes per parameter, the float32 weight, its gradient and AdamW's two moments (exp_avg,
      exp_avg_sq); under DDP (``world_size > 1``) 4 more, its gradient buckets;
    * activations, for one micro-batch (train.batch_size / ranks / train.grad_accum rows of data.seq_len
      tokens), 4 bytes per value kept for the backward, per token: the embedding (d); per iteration of the
      shared block, the attention sublayer's norm input and output, q, k, v, the rotated q and k, the
      attention output and the projection (about 10 d) and the SwiGLU's norm input and output, its gate and
      up halves, their product and the down projection (3 d + 3 h); per readout (every iteration with
      train.readout=all, the last with last) the final norm (d) and the logits with their log-softmax
      (2 x 256).

    Left out: the attention scores, which the flash and memory-efficient kernels never materialise (the
    math path's are :func:`attention_bytes`, a warning), the eval's forward (no gradients, smaller), and the
    allocator's slack. The activations are counted in float32 where autocast keeps some in bf16, so what is
    counted is overstated at most twofold; what is left out keeps it from being a bound of the step's peak.
    It is compared with the device's whole memory (:func:`memory_refusal`), so it refuses a config only when
    the step cannot fit by a wide margin (model.d_model=100000: 1.8 TiB), never a shipped preset."""
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
    """All the memory the device has (not what is free now): the GPU's total on CUDA, the machine's physical
    memory on CPU (os.sysconf); None where the platform does not say. A refusal compares with this, so it is
    a property of the config and the machine, the same in ``validate`` and ``train`` whatever else runs."""
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
    """The one-line refusal of a config whose training step (:func:`step_memory`) needs more memory than the
    device has in all (:func:`device_memory`); None when it fits or the device's memory is unknown."""
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
    """The warning line when :func:`attention_bytes` of one rank's micro-batch exceeds MEMORY_WARN_FRACTION
    of :func:`available_memory`; None when it fits or the available memory is unknown."""
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


def first_step_line(step_s: float, step: int, eval_every: int, steps: int, *, compiling: bool = False,
                    label: str = "first step") -> str:
    """After the first step this process ran (``step`` = the step just finished): its wall time and, at that
    pace, the time to the next eval (the next multiple of ``eval_every``, or the last step) and to ``steps``.

    ``compiling``: the step included ``torch.compile``'s compilation (``train.compile=true``), which can take a
    hundred times a step: no projection from it (the loop says the pace after the next step, ``label``)."""
    if compiling:
        return f"{label}: {duration(step_s)} (it compiled the model: train.compile; the pace follows the next step)"
    next_eval = min(steps, -(-step // eval_every) * eval_every)  # the loop evaluates after steps k*eval_every
    to_eval, to_end = duration((next_eval - step) * step_s), duration((steps - step) * step_s)
    return (f"{label}: {duration(step_s)}; at this pace the first eval (step {next_eval}) is in {to_eval} "
            f"and the end (step {steps}) in {to_end}")
