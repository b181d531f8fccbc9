"""Independent views of a plain forward, by module hooks (never through the probes' own trace): the tests'
oracles for what each sublayer read and wrote, and for how far one iteration's output reaches the logits."""

from __future__ import annotations

import torch

from dormouse.model.looped import LoopedByteLM


def hooked_trace(model: LoopedByteLM, idx: torch.Tensor) -> tuple[torch.Tensor, list, list]:
    """The embedding and each sublayer call's (input, output), from hooks on a plain forward."""
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []
    emb: list[torch.Tensor] = []
    handles = [model.embed.register_forward_hook(lambda m, a, o: emb.append(o))]
    for sub in (model.attn, model.mlp):
        handles.append(sub.register_forward_hook(lambda m, a, o: calls.append((a[0], o))))
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in handles:
            h.remove()
    return emb[0], [c[0] for c in calls], [c[1] for c in calls]


def readouts_with_mlp_bumped(model: LoopedByteLM, idx: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Every readout of a forward in which only iteration k's MLP output (0-based k) is shifted by +1."""
    calls = {"n": 0}

    def bump(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return output + 1.0 if calls["n"] == k + 1 else output

    handle = model.mlp.register_forward_hook(bump)
    try:
        with torch.no_grad():
            return model(idx)
    finally:
        handle.remove()
