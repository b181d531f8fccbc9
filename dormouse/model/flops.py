"""Training FLOPs of the looped model: matmul FLOPs (a multiply-add is 2), the backward twice the forward. Per token
and iteration the block costs ``2(4d^2 + 3dh) + 2Td`` (causal attention over T/2 keys on average), each readout
``2·256·d``, and the arm its own (:meth:`~dormouse.arms.specs.ArmSpec.flops_per_token`); random depth: the mean."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dormouse.arms.registry import model_arm
from dormouse.arms.specs import arm_specs
from dormouse.model.shape import VOCAB, swiglu_hidden


@dataclass(frozen=True)
class FlopCount:
    """Forward FLOPs per token of one config: the block's (readouts included) and the arm's own."""

    block: float
    arm: float
    arm_counted: bool  # False: the arm declares no count (ArmSpec.flops_per_token is None); its work is left out

    @property
    def training_per_token(self) -> float:
        return 3.0 * (self.block + self.arm)


def flop_count(cfg: Any) -> FlopCount:
    """The forward FLOPs per token of a training step of ``cfg``."""
    m, d = cfg.model, int(cfg.model.d_model)
    h, seq = swiglu_hidden(d, m.mlp_hidden), int(cfg.data.seq_len)
    spec = arm_specs()[model_arm(m)]
    depths = range(1, int(m.max_iter) + 1) if m.random_depth else [int(m.max_iter)]
    block = arm = 0.0
    counted = True
    for depth in depths:
        readouts = tuple(range(depth)) if str(cfg.train.readout) == "all" else (depth - 1,)
        block += depth * (2 * (4 * d * d + 3 * d * h) + 2 * seq * d) + len(readouts) * 2 * VOCAB * d
        own = spec.flops_per_token(m, depth, readouts)
        counted = counted and own is not None
        arm += own or 0.0
    return FlopCount(block / len(depths), arm / len(depths), counted)


def step_tokens(cfg: Any) -> int:
    """Tokens (bytes) one optimizer step trains on: the global batch times the sequence length."""
    return int(cfg.train.batch_size) * int(cfg.data.seq_len)


def training_cost(cfg: Any) -> dict[str, float]:
    """``{"tokens", "flops", "flops_per_step"}`` of one training run of ``cfg``."""
    per_step = flop_count(cfg).training_per_token * step_tokens(cfg)
    return {"tokens": float(int(cfg.train.steps) * step_tokens(cfg)), "flops": per_step * int(cfg.train.steps),
            "flops_per_step": per_step}
