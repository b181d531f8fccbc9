"""Watch a real training run from outside (tests/train/test_loop.py, tests/train/test_resume_schedule.py).

Global hooks: a module forward hook sees every training forward (which model, the depth argument, how many
attention sublayers ran, how many readouts came back) and an optimizer step pre-hook sees the optimizer
object the loop built at the moment it steps (its groups, learning rates, the gradients about to be applied).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.optim.optimizer as optim_hooks

from dormouse.model.looped import CausalSelfAttention, LoopedByteLM


@dataclass
class StepView:
    """One optimizer step as the hooks saw it."""

    lrs: list[float]
    attn_calls: int  # attention sublayers run by the training forward(s) since the previous step
    readouts: int  # logits tensors the training forward returned
    depth_arg: int | None
    grads: dict[str, torch.Tensor | None]


@dataclass
class Observed:
    steps: list[StepView] = field(default_factory=list)
    optimizer: torch.optim.Optimizer | None = None
    model: LoopedByteLM | None = None


@contextmanager
def observe() -> Iterator[Observed]:
    seen = Observed()
    pending = {"attn": 0, "readouts": 0, "depth": None}

    def forward_hook(module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if isinstance(module, CausalSelfAttention) and torch.is_grad_enabled():
            pending["attn"] += 1
        elif isinstance(module, LoopedByteLM) and torch.is_grad_enabled():  # training forwards only
            seen.model = module
            pending["readouts"] += len(output)
            pending["depth"] = kwargs.get("depth", args[1] if len(args) > 1 else None)

    def step_hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        seen.optimizer = optimizer
        grads = {}
        if seen.model is not None:
            grads = {n: None if p.grad is None else p.grad.detach().clone()
                     for n, p in seen.model.named_parameters()}
        seen.steps.append(StepView([g["lr"] for g in optimizer.param_groups], pending["attn"],
                                   pending["readouts"], pending["depth"], grads))
        pending.update(attn=0, readouts=0, depth=None)

    handles = [torch.nn.modules.module.register_module_forward_hook(forward_hook, with_kwargs=True),
               optim_hooks.register_optimizer_step_pre_hook(step_hook)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()
