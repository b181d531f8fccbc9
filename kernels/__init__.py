"""Fused Triton kernels for the AttnRes depth read (arXiv:2603.15031), installed as ``dormouse_kernels``.

Public API:
    depth_attend_fused(sources, query, gain=None, eps=1e-6, form="paper") -> Tensor   (Eq. 2-4, autograd)
    merge_partials(m1, l1, o1, m2, l2, o2, *, return_h=False) -> (m, l, o[, h])        (Alg. 1 Phase 2)
    merge_partials_torch(...)                                                          (plain-torch merge)
    triton_unavailable_reason(device) -> str | None

Triton decides at kernel-definition time whether a kernel is compiled or interpreted, and the kernels
are defined when this package is imported: set TRITON_INTERPRET=1 *before* importing it to run the
kernels on CPU tensors through Triton's interpreter (how CI tests them). The package imports without
triton installed; the kernel entry points then raise with ``triton_unavailable_reason``'s sentence.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from .merge_torch import merge_partials_torch

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import Tensor

__all__ = ["depth_attend_fused", "merge_partials", "merge_partials_torch", "triton_unavailable_reason"]

try:  # define the kernels now, so the interpreter/compiled choice is the one in force at import
    from . import depth_attend as _da
    from . import merge as _mg

    _IMPORT_ERROR: str | None = None
    # triton.jit returns an InterpretedFunction when TRITON_INTERPRET=1 was set at definition time
    INTERPRETED: bool = type(_da._depth_attend_fwd_kernel).__name__ == "InterpretedFunction"
except Exception as exc:  # triton missing or broken: the package (and dormouse, which imports its pure-torch
    # parts: forms.py, merge_torch.py) still imports; the kernels refuse with this reason
    _da = _mg = None  # type: ignore[assignment]
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
    INTERPRETED = False

_FIX = (
    "set TRITON_INTERPRET=1 before importing dormouse_kernels to run the kernels on CPU via Triton's "
    "interpreter, or use kernel=torch"
)


def triton_unavailable_reason(device: torch.device | str) -> str | None:
    """None when the fused kernels can run on ``device``: CUDA with triton importable and the kernels
    compiled, or CPU with the kernels defined under TRITON_INTERPRET=1. Otherwise one sentence saying why
    and how to fix it."""
    device = torch.device(device)
    if _IMPORT_ERROR is not None:
        return f"triton is not importable ({_IMPORT_ERROR}): install triton, or use kernel=torch"
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "a CUDA device was requested but torch.cuda.is_available() is False: use kernel=torch"
        if INTERPRETED:
            return (
                "dormouse_kernels was imported with TRITON_INTERPRET=1, so its kernels are interpreted and "
                "would copy CUDA tensors through the host: unset TRITON_INTERPRET before importing "
                "dormouse_kernels, or use kernel=torch"
            )
        return None
    if device.type == "cpu":
        if INTERPRETED:
            return None
        if os.environ.get("TRITON_INTERPRET", "0") == "1":
            return (
                "TRITON_INTERPRET=1 was set after dormouse_kernels was imported, so its kernels were "
                "compiled for GPU and cannot take CPU tensors: " + _FIX
            )
        return "the Triton kernels need a CUDA device: " + _FIX
    return f"device type {device.type!r} has no Triton kernels (CUDA, or CPU under the interpreter): use kernel=torch"


def _require(device: torch.device) -> None:
    reason = triton_unavailable_reason(device)
    if reason is not None:
        raise RuntimeError(f"dormouse_kernels cannot run on {device}: {reason}")


def depth_attend_fused(
    sources: Sequence[Tensor] | Tensor,
    query: Tensor,
    gain: Tensor | None = None,
    eps: float = 1e-6,
    form: str = "paper",
) -> Tensor:
    """Fused AttnRes depth read, Eq. 2-4: h = sum_i softmax_i((w * g) . k_i) v_i, keys RMS-normalised
    (``form="paper"``) or L2-normalised / sqrt(d) (``form="sqrt_d"``), values raw. ``sources``: a sequence of
    L tensors [..., d] (same shape, dtype, device) or a stacked [L, ..., d]; ``query``, ``gain``: [d].
    Differentiable wrt sources, query and gain. See ``dormouse_kernels.depth_attend`` for the layout."""
    if len(sources) == 0:
        raise ValueError("depth_attend_fused needs at least one source (L >= 1)")
    _require(sources[0].device)
    return _da.depth_attend_fused(sources, query, gain, eps, form)


def merge_partials(
    m1: Tensor, l1: Tensor, o1: Tensor, m2: Tensor, l2: Tensor, o2: Tensor, *, return_h: bool = False
) -> tuple[Tensor, ...]:
    """Fused Alg. 1 Phase 2 online-softmax merge of two partials: (m, l, o), plus h = o / l with
    ``return_h``. Differentiable (fused forward, torch-recompute backward)."""
    _require(o1.device)
    return _mg.merge_partials(m1, l1, o1, m2, l2, o2, return_h=return_h)
