"""The looped model's sizes that need no torch: the byte vocabulary, the SwiGLU hidden width and the shared weights'
parameter count. The FLOP estimate of ``dormouse ab plan`` and ``status`` reads them without loading the model."""

from __future__ import annotations

import math

VOCAB = 256


def swiglu_hidden(d_model: int, mlp_hidden: int | None) -> int:
    """8/3 d (the parameter count of a 4d GELU MLP), rounded up to a multiple of 32."""
    if mlp_hidden is not None:
        return int(mlp_hidden)
    return 32 * math.ceil(8 * d_model / 3 / 32)


def shared_params(d_model: int, mlp_hidden: int | None, tie_head: bool) -> int:
    """The parameters every arm shares at this width, the arm's own left out: the embedding (and an untied head),
    attention's 4d², SwiGLU's 3dh and the three RMSNorm gains."""
    d, h = int(d_model), swiglu_hidden(d_model, mlp_hidden)
    return VOCAB * d * (1 if tie_head else 2) + 4 * d * d + 3 * d * h + 3 * d
