"""Notices that a step cannot fit in time or memory, so a run that cannot finish is not silent (issue 24:
``data.seq_len=100000`` ran ten silent minutes before anyone knew).

* before step 0, :func:`memory_warning`: a rough upper bound on one step's attention memory against the
  memory available; a warning, never a refusal (the bound is crude, see :func:`attention_bytes`);
* after the first step, :func:`first_step_line`: that step's wall time and, at that pace, the time to the
  first eval and to the end (the step includes warm-up, so the projection is pessimistic if anything); a
  compiled run's first step is mostly compilation, so its projection comes after the second step.
"""

from __future__ import annotations

import os

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
