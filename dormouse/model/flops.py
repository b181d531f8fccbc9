"""Training matmul FLOPs of the looped model, a ``dormouse ab plan`` estimate: per token and iteration
``3 (2(4d^2 + 3dh) + 2Td)``, plus ``3 * 2 * 256 d`` per readout; the arms' O(L d) work left out."""

from __future__ import annotations

from typing import Any

from dormouse.model.shape import VOCAB, swiglu_hidden


def training_cost(cfg: Any) -> dict[str, float]:
    """``{"tokens", "flops"}`` of one training run of ``cfg``."""
    m, t, d = cfg.model, cfg.train, int(cfg.model.d_model)
    h = swiglu_hidden(d, m.mlp_hidden)
    seq = int(cfg.data.seq_len)
    depth = (int(m.max_iter) + 1) / 2 if m.random_depth else int(m.max_iter)
    readouts = depth if str(t.readout) == "all" else 1
    tokens = int(t.steps) * int(t.batch_size) * seq
    per_token_fwd = depth * (2 * (4 * d * d + 3 * d * h) + 2 * seq * d) + readouts * 2 * VOCAB * d
    return {"tokens": float(tokens), "flops": 3.0 * per_token_fwd * tokens}
