"""Block AttnRes two-phase merge (arXiv:2603.15031, Algorithm 1 Phase 2), fused.

Two online-softmax partials over disjoint source sets, per token: (m, l, o) = running max, normaliser
l = sum exp(s - m) and UNNORMALISED accumulator o = sum exp(s - m) v. Their union is

    m = max(m1, m2);  l = e^{m1-m} l1 + e^{m2-m} l2;  o = e^{m1-m} o1 + e^{m2-m} o2;  h = o / l

which equals the direct softmax mixture over both source sets (attnres.md, "Two-phase computation").
An empty partial is (m = -inf, l = 0, o = 0); its weight is defined as 0 (e^{-inf - (-inf)} would be
NaN when both are empty). Two empty partials merge to an empty partial; their h = 0/0 is NaN, as for
any softmax over no sources.

``merge_partials`` is differentiable: the forward is the fused kernel, the backward recomputes the merge
with the torch fallback under autograd (the merge is elementwise, so the recompute costs one read of the
inputs -- cheaper than saving the exponentials).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import depth_attend as _da
from .merge_torch import merge_partials_torch


@triton.jit
def _merge_kernel(
    m1_ptr, l1_ptr, o1_ptr, m2_ptr, l2_ptr, o2_ptr,
    m_ptr, l_ptr, o_ptr, h_ptr,
    N, D,
    WRITE_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_d = tl.program_id(1)
    rows = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    row_ok = rows < N
    mask = row_ok[:, None] & (cols < D)[None, :]
    tile = rows[:, None] * D + cols[None, :]

    a1 = tl.load(m1_ptr + rows, mask=row_ok, other=0.0).to(ACC)
    a2 = tl.load(m2_ptr + rows, mask=row_ok, other=0.0).to(ACC)
    m = tl.maximum(a1, a2)
    # An empty partial (max -inf) must weigh 0. Shifting by a finite m_safe gives exp(-inf) = 0 for it,
    # and keeps two empty partials from producing exp(-inf - (-inf)) = NaN.
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w1 = tl.exp(a1 - m_safe)
    w2 = tl.exp(a2 - m_safe)
    o1 = tl.load(o1_ptr + tile, mask=mask, other=0.0).to(ACC)
    o2 = tl.load(o2_ptr + tile, mask=mask, other=0.0).to(ACC)
    o = w1[:, None] * o1 + w2[:, None] * o2
    tl.store(o_ptr + tile, o.to(o_ptr.dtype.element_ty), mask=mask)
    # padded rows load l = 1 so that h's division stays finite there (they are never stored)
    l1 = tl.load(l1_ptr + rows, mask=row_ok, other=1.0).to(ACC)
    l2 = tl.load(l2_ptr + rows, mask=row_ok, other=1.0).to(ACC)
    l = w1 * l1 + w2 * l2
    if WRITE_H:
        tl.store(h_ptr + tile, (o / l[:, None]).to(h_ptr.dtype.element_ty), mask=mask)
    # the per-token statistics are written once, by the first column block
    stat_ok = row_ok & ((rows * 0 + pid_d) == 0)  # a [BLOCK_N] mask (the interpreter rejects a scalar one)
    tl.store(m_ptr + rows, m.to(m_ptr.dtype.element_ty), mask=stat_ok)
    tl.store(l_ptr + rows, l.to(l_ptr.dtype.element_ty), mask=stat_ok)


def _check(m1: Tensor, l1: Tensor, o1: Tensor, m2: Tensor, l2: Tensor, o2: Tensor) -> None:
    if o1.shape != o2.shape or o1.dim() < 1:
        raise ValueError(f"o1 {tuple(o1.shape)} and o2 {tuple(o2.shape)} must both be [..., d]")
    for name, t in (("m1", m1), ("l1", l1), ("m2", m2), ("l2", l2)):
        if t.shape != o1.shape[:-1]:
            raise ValueError(f"{name} is {tuple(t.shape)}; expected o's leading shape {tuple(o1.shape[:-1])}")
    if len({t.device for t in (m1, l1, o1, m2, l2, o2)}) != 1:
        raise ValueError("merge_partials: all inputs must be on one device")


def merge_forward(
    m1: Tensor, l1: Tensor, o1: Tensor, m2: Tensor, l2: Tensor, o2: Tensor,
    *, write_h: bool = False, outs: tuple[Tensor, ...] | None = None, block_n: int | None = None,
) -> tuple[Tensor, ...]:  # fmt: skip
    """Launch the fused merge. Returns (m, l, o) or (m, l, o, h); ``outs`` (same tuple, caller-supplied,
    e.g. NaN-poisoned by the tests) is written in place."""
    _check(m1, l1, o1, m2, l2, o2)
    d = o1.shape[-1]
    n = o1.numel() // d if d else 0
    acc = torch.float64 if o1.dtype == torch.float64 or m1.dtype == torch.float64 else torch.float32
    ins = [t.contiguous() for t in (m1, l1, o1, m2, l2, o2)]
    if outs is None:
        dev = o1.device
        outs = (
            _da._alloc(m1.shape, m1.dtype, dev),
            _da._alloc(l1.shape, l1.dtype, dev),
            _da._alloc(o1.shape, o1.dtype, dev),
        ) + ((_da._alloc(o1.shape, o1.dtype, dev),) if write_h else ())
    if len(outs) != 3 + write_h:
        raise ValueError(f"outs must hold {3 + write_h} tensors")
    block_d = min(triton.next_power_of_2(max(d, 1)), 1024)
    bn = block_n or max(1, min(64, 4096 // block_d))
    if n > 0:
        grid = (triton.cdiv(n, bn), triton.cdiv(d, block_d))
        h = outs[3] if write_h else outs[2]  # unused pointer when WRITE_H is off
        _merge_kernel[grid](
            *ins, outs[0], outs[1], outs[2], h, n, d,
            WRITE_H=write_h, BLOCK_N=bn, BLOCK_D=block_d,
            ACC=tl.float64 if acc == torch.float64 else tl.float32,
            num_warps=4,
        )  # fmt: skip
    return tuple(outs)


class _MergeFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, write_h: bool, m1, l1, o1, m2, l2, o2):  # type: ignore[override]
        ctx.save_for_backward(m1, l1, o1, m2, l2, o2)
        ctx.write_h = write_h
        return merge_forward(m1, l1, o1, m2, l2, o2, write_h=write_h)

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        ins = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
        with torch.enable_grad():
            m, l, o = merge_partials_torch(*ins)
            outs = [m, l, o] + ([o / l.unsqueeze(-1)] if ctx.write_h else [])
            pairs = [(y, g) for y, g in zip(outs, grads, strict=True) if g is not None]
            gin = torch.autograd.grad([y for y, _ in pairs], ins, [g for _, g in pairs], allow_unused=True)
        return (None, *gin)


def merge_partials(
    m1: Tensor, l1: Tensor, o1: Tensor, m2: Tensor, l2: Tensor, o2: Tensor, *, return_h: bool = False
) -> tuple[Tensor, ...]:
    """Fused Alg. 1 Phase 2 merge: (m, l, o), or (m, l, o, h = o / l) with ``return_h``. Differentiable
    (fused forward, torch-recompute backward). m, l: [...]; o: [..., d]."""
    return _MergeFn.apply(bool(return_h), m1, l1, o1, m2, l2, o2)
