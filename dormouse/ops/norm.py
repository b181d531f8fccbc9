"""RMSNorm (Zhang & Sennrich 2019, Eq. 4): ``y = x / sqrt(mean(x^2) + eps) * g``, the model's one RMS norm.

CUDA and ``torch.compile`` use ``F.rms_norm``; CPU eager uses :class:`_RMSNormFunction`, because torch's CPU
composite (~6 ops, ~15 in backward) took ~13 % of a step at nanoGPT's baby shape (scripts/BENCHMARKS.md).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


class _RMSNormFunction(torch.autograd.Function):
    """``y = x r g``, ``r = (mean x^2 + eps)^(-1/2)``; backward ``dx = r (u - x_hat mean(u x_hat))`` with ``u = dy g``,
    ``dg = sum dy x_hat``. Computed in float32 (float64 for float64), returned in x's dtype."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
        xc = x if x.dtype in (torch.float32, torch.float64) else x.float()
        # ||x||^2 / d: one pass over x (x.pow(2).mean() is two)
        r = torch.linalg.vector_norm(xc, dim=-1, keepdim=True).square_().div_(x.shape[-1]).add_(eps).rsqrt_()
        x_hat = xc * r
        ctx.save_for_backward(x_hat, r, weight)
        y = x_hat if weight is None else x_hat * weight.to(xc.dtype)
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x_hat, r, weight = ctx.saved_tensors
        g = grad_y.to(x_hat.dtype)
        grad_x = grad_weight = None
        if ctx.needs_input_grad[0]:
            u = g if weight is None else g * weight.to(x_hat.dtype)
            mean_u_x_hat = torch.linalg.vecdot(u, x_hat).unsqueeze_(-1).div_(x_hat.shape[-1])
            # autograd hands grad_y over in the output's dtype, which is x's
            grad_x = torch.addcmul(u, x_hat, mean_u_x_hat, value=-1.0).mul_(r).to(grad_y.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (g * x_hat).flatten(0, -2).sum(0).to(weight.dtype)
        return grad_x, grad_weight, None


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """RMSNorm over the last dim in x's dtype; ``eps=None`` is ``F.rms_norm``'s default (machine epsilon)."""
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return F.rms_norm(x, (x.shape[-1],), None if weight is None else weight.to(x.dtype), eps)
    return _RMSNormFunction.apply(x, weight, eps)


class RMSNorm(nn.Module):
    """Zhang & Sennrich (2019): ``x / sqrt(mean(x^2) + eps) * g``, g initialised to ones."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)
