"""The looped model's sizes that need no torch: the byte vocabulary and the SwiGLU hidden width. The FLOP
estimate of ``dormouse ab plan`` and ``status`` reads them without loading the model."""

from __future__ import annotations

import math

VOCAB = 256


def swiglu_hidden(d_model: int, mlp_hidden: int | None) -> int:
    """8/3 d (the parameter count of a 4d GELU MLP), rounded up to a multiple of 32."""
    if mlp_hidden is not None:
        return int(mlp_hidden)
    return 32 * math.ceil(8 * d_model / 3 / 32)
