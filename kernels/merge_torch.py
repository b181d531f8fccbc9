"""Plain-torch Block AttnRes merge (arXiv:2603.15031, Algorithm 1 Phase 2) -- no triton needed.

The fallback for ``merge_partials`` and the recompute its backward differentiates."""

from __future__ import annotations

import torch
from torch import Tensor


def merge_partials_torch(
    m1: Tensor, l1: Tensor, o1: Tensor, m2: Tensor, l2: Tensor, o2: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Online-softmax union of two partials (m = running max, l = sum exp(s - m), o = sum exp(s - m) v):
    m = max(m1, m2); l = e^{m1-m} l1 + e^{m2-m} l2; o = e^{m1-m} o1 + e^{m2-m} o2. m, l: [...]; o: [..., d].
    An empty partial (m = -inf) weighs 0, so two empty partials stay empty instead of turning NaN."""
    m = torch.maximum(m1, m2)
    # shift by a finite max: an empty partial then weighs exp(-inf) = 0, with a zero (not NaN) gradient --
    # a torch.where over exp(m1 - m) would back-propagate 0 * NaN when both partials are empty
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w1 = torch.exp(m1 - m_safe)
    w2 = torch.exp(m2 - m_safe)
    return m, w1 * l1 + w2 * l2, w1.unsqueeze(-1) * o1 + w2.unsqueeze(-1) * o2
