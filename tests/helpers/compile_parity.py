"""The tolerance of a compiled forward against eager when the compiler is ``aot_eager``: one owner for the tests that
compare them (the whole-forward graph, tests/arms/test_arms.py; the regions, tests/model/test_compile_regions.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

# aot_eager runs eager's aten ops, decomposed: the same float32 arithmetic up to reassociation inside a
# decomposition, ~1e-7 relative on an O(1-10) loss and O(1e-2) gradients; 1e-5 is ~100x that. A counter or read
# traced once (a constant), a dropped readout, a sublayer skipped or a region holding its own copy of the weights
# moves the loss by O(1e-2 .. 1).
AOT_EAGER_RELATIVE = 1e-5


def assert_compiled_matches_eager(losses: list[float], grads: list[torch.Tensor], where: str = "") -> None:
    """``losses``/``grads``: eager's first, the compiled forward's second (gradients flattened and concatenated)."""
    dev = abs(losses[0] - losses[1])
    bound = AOT_EAGER_RELATIVE * max(1.0, abs(losses[0]))
    assert dev <= bound, f"{where}loss deviation={dev:.3e} bound={bound:.1e}"
    gdev = (grads[0] - grads[1]).abs().max().item()
    gbound = AOT_EAGER_RELATIVE * max(1.0, grads[0].abs().max().item())
    assert gdev <= gbound, f"{where}gradient deviation={gdev:.3e} bound={gbound:.1e}"


def compiled_against_eager(model: torch.nn.Module, compiled: Callable[..., Any], counter: str,
                           batch: Callable[[int], torch.Tensor], depths: Sequence[int],
                           every_parameter: bool = False) -> list[tuple[int, int]]:
    """One backward per depth of ``depths`` (call i on ``batch(i)``), eagerly, then through ``compiled``: asserts
    equal losses and gradients (:func:`assert_compiled_matches_eager`) over the same parameters (all of them
    with ``every_parameter``); returns ``(ran, asked)`` of the arm's ``counter``, eager's then compiled's."""
    losses, grads, counts = [], [], []
    for fn in (model, compiled):
        model.counters.reset()
        model.zero_grad(set_to_none=True)
        for i, depth in enumerate(depths):
            loss = torch.stack([lg.float().logsumexp(-1).mean() for lg in fn(batch(i), depth=depth)]).mean()
            loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]))
        counts.append((model.counters.ran[counter], model.counters.asked[counter]))
    want = sum(p.numel() for p in model.parameters()) if every_parameter else grads[0].numel()
    assert grads[0].numel() == grads[1].numel() == want, (
        f"parameters with a gradient: {grads[0].numel()} eager, {grads[1].numel()} compiled, want {want}")
    assert_compiled_matches_eager(losses, grads, f"depths {list(depths)}: ")
    return counts
