"""The value residual (ResFormer, arXiv:2410.17897): attention's values mixed with the first attention slot's."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dormouse.arms.prenorm import PreNormResidual
from dormouse.arms.probes import LoopTrace
from dormouse.arms.specs import ValueResidualConfig, ValueResidualSpec
from dormouse.ops.mup import SCALAR


@dataclass
class ValueResidualState:
    """The residual stream ``x`` and ``V_first``, the first attention slot's values before its own mix."""

    x: Tensor
    v_first: Tensor | None = None


class ValueResidual(ValueResidualSpec, PreNormResidual):
    """Value residual (ResFormer, arXiv:2410.17897): attention's ``V_s <- l1_s V_first + l2_s V_s``, then x <- x + f(x).
    V_first: slot 0's values before its mix. Lambdas learned (modded-nanogpt's untied pair) or fixed (ResFormer's
    ``0.5 V_1 + 0.5 V_n``, modeling_llama_resformer.py); docs/arms.md, "Value residual"."""

    plot_file = None
    mup_roles = {"lambda1": SCALAR, "lambda2": SCALAR}
    slot_fields = ()  # lambda_1, lambda_2 are per attention slot, not per slot: see probe_scalars
    list_fields = ("lambda1", "lambda2")  # averaged over seeds elementwise, one value per attention slot
    compiled_absorb = False  # the state is a Python object holding V_first: the absorb runs eagerly

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> ValueResidual:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.value_residual)

    def __init__(self, d_model: int, max_iter: int, cfg: ValueResidualConfig | None = None) -> None:
        super().__init__(d_model, max_iter)
        cfg = cfg or ValueResidualConfig()
        self.learnable = bool(cfg.learnable)
        init1, init2 = float(cfg.lambda_init), 1.0 - float(cfg.lambda_init)
        lambda1, lambda2 = torch.full((max_iter,), init1), torch.full((max_iter,), init2)
        if self.learnable:
            self.lambda1, self.lambda2 = nn.Parameter(lambda1), nn.Parameter(lambda2)
        else:  # ResFormer's constants: buffers follow .to(device) and stay out of the optimiser
            self.register_buffer("lambda1", lambda1, persistent=False)
            self.register_buffer("lambda2", lambda2, persistent=False)

    def begin(self, embedding: Tensor) -> ValueResidualState:
        return ValueResidualState(embedding)

    def sublayer_input(self, state: ValueResidualState, slot: int) -> Tensor:
        return state.x

    def mix_attention(self, state: ValueResidualState, slot: int, q: Tensor, k: Tensor,
                      v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``V_s <- lambda_1 V_first + lambda_2 V_s``; slot 0 keeps its values as V_first first. Counts ``ran``."""
        if state.v_first is None:
            state.v_first = v
        i = slot // 2
        mixed = self.lambda1[i].to(v.dtype) * state.v_first + self.lambda2[i].to(v.dtype) * v
        self.counters.count_ran(self.name)  # the attention slot's aggregation: the values' mix
        return q, k, mixed

    def absorb(self, state: ValueResidualState, slot: int, output: Tensor) -> ValueResidualState:
        state.x = state.x + output
        if slot % 2 == 1:  # the MLP slot's aggregation is the residual alone (attention's counted at its mix)
            self.counters.count_ran(self.name)
        return state

    def readout_input(self, state: ValueResidualState, k: int) -> Tensor:
        return state.x

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``lambda1[i]``, ``lambda2[i]``: the weights on V_first and on its own values of attention slot i."""
        return {"lambda1": [float(v) for v in self.lambda1.detach().double().cpu()],
                "lambda2": [float(v) for v in self.lambda2.detach().double().cpu()]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The mean weight on V_first over the attention slots after the first (slot 0's V_first is its own)."""
        later = fields["lambda1"][1:] or fields["lambda1"]
        return "lambda1", sum(later) / len(later)

    @classmethod
    def probe_scalars(cls, row: dict[str, Any]) -> dict[str, float]:
        """``probe/lambda1/attn2``: one scalar per attention slot."""
        return {f"probe/{field}/attn{i + 1}": float(value) for field in ("lambda1", "lambda2")
                for i, value in enumerate(row.get(f"probe/{field}") or [])}

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        return None
