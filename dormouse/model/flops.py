"""What training the looped model costs in matmul FLOPs: an estimate for planning (``dormouse ab --plan``),
not a measurement.

It counts the matmul FLOPs of training only (no eval), ×3 for forward + backward: per token and per
iteration of the shared block, 2·(4d² + 3dh) for the attention projections and the SwiGLU, 2·T·d for
causal attention scores and mixing (half of the 4·T·d of full attention), and 2·256·d per readout (the
byte vocabulary). The arms' own work (a gate, a depth softmax) is left out: it is O(d) or O(L·d) per token
against O(d²). Expected depth is (max_iter + 1)/2 under random depth.
"""

from __future__ import annotations

from typing import Any

from dormouse.model.looped import VOCAB, swiglu_hidden


def training_cost(cfg: Any) -> dict[str, float]:
    """Training tokens and the estimated training FLOPs of one run of config ``cfg`` (see the module
    docstring): ``{"tokens", "flops"}``."""
    m, t, d = cfg.model, cfg.train, int(cfg.model.d_model)
    h = swiglu_hidden(d, m.mlp_hidden)
    seq = int(cfg.data.seq_len)
    depth = (int(m.max_iter) + 1) / 2 if m.random_depth else int(m.max_iter)
    readouts = depth if str(t.readout) == "all" else 1
    tokens = int(t.steps) * int(t.batch_size) * seq
    per_token_fwd = depth * (2 * (4 * d * d + 3 * d * h) + 2 * seq * d) + readouts * 2 * VOCAB * d
    return {"tokens": float(tokens), "flops": 3.0 * per_token_fwd * tokens}
