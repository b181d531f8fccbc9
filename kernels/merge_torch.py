"""The plain-torch Block AttnRes merge (arXiv:2603.15031, Algorithm 1 Phase 2), no triton needed: the fused
merge's reference and the recompute its backward differentiates. One definition in the project (the kernels
package depends on nothing in dormouse; ``dormouse.ops.attnres.online_softmax_merge`` is this function)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["merge_partials_torch"]


def merge_partials_torch(
    m1: Tensor, l1: Tensor, o1: Tensor, m2: Tensor, l2: Tensor, o2: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Merge two online-softmax states over disjoint source sets (Alg. 1, Phase 2).

    A state is ``m = max s``, ``l = sum exp(s - m)`` and the UNNORMALISED ``o = sum exp(s - m) v``
    (``m``, ``l``: ``[...]``; ``o``: ``[..., d]``). With ``m = max(m1, m2)`` the merged state is
    ``l = e^{m1-m} l1 + e^{m2-m} l2`` and ``o = e^{m1-m} o1 + e^{m2-m} o2``; ``o / l`` is then the
    softmax mixture over the union of the two sets.

    An empty state (``m = -inf``, ``l = 0``, ``o = 0``) weighs 0: the exponentials are shifted by a finite
    max, so two empty states merge to an empty state instead of ``exp(-inf - (-inf)) = NaN``, with zero
    (not NaN) gradients. The one merge of the project: the fused kernel's backward recomputes through it, and
    ``dormouse.ops.attnres`` re-exports it as ``online_softmax_merge`` (the torch Block path's Phase 2).
    """
    m = torch.maximum(m1, m2)
    # a torch.where over exp(m1 - m) would still back-propagate 0 * NaN when both states are empty
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w1 = torch.exp(m1 - m_safe)
    w2 = torch.exp(m2 - m_safe)
    return m, w1 * l1 + w2 * l2, w1.unsqueeze(-1) * o1 + w2.unsqueeze(-1) * o2
