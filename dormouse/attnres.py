"""Attention Residuals (Kimi Team, arXiv:2603.15031), functional form.

(Minimal first version; the full public API — block_sources, BlockAttnResState, two_phase_block,
kernel routing — is being written.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def depth_attend(
    sources: Sequence[Tensor] | Tensor,
    query: Tensor,
    *,
    gain: Tensor | None = None,
    eps: float = 1e-6,
    form: str = "paper",
    kernel: str = "torch",
) -> Tensor:
    """Eq. 2-4: h = sum_i alpha_i v_i, alpha = softmax_i(w . RMSNorm(v_i)), keys normalised, values raw."""
    stacked = sources if isinstance(sources, Tensor) else torch.stack(list(sources))
    d = stacked.shape[-1]
    if form == "paper":
        keys = stacked * torch.rsqrt(stacked.pow(2).mean(-1, keepdim=True) + eps)
    else:
        keys = stacked * torch.rsqrt(stacked.pow(2).sum(-1, keepdim=True) + eps) / d**0.5
    if gain is not None:
        keys = keys * gain
    scores = keys.matmul(query.to(keys.dtype))
    alpha = torch.softmax(scores.float(), dim=0).to(stacked.dtype)
    return (alpha.unsqueeze(-1) * stacked).sum(0)
