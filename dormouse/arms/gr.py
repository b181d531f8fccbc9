"""The gated residual: ``x <- x + sigmoid(g . x + b) * f(x)``, one gate per slot."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, slot_names
from dormouse.arms.specs import GatedResidualSpec
from dormouse.ops.mup import HIDDEN, VECTOR
from dormouse.ops.norm import rms_norm

GR_BIAS_INIT = -2.0  # the gate starts at sigmoid(-2) ~ 0.12


class GatedResidual(GatedResidualSpec, ResidualArm):
    """Gated residual, GTrXL's output gate (Parisotto et al. 2019): ``x <- x + sigmoid(W n(x) + b_s) * f(x)``.

    W (d x d, one per sublayer kind, shared across iterations) starts at 0 and the per-slot bias at -2, so the gate
    starts at sigmoid(-2) ~ 0.12: a bounded per-channel ReZero, and GR - ReZero measures input-dependent gating.
    """

    plot_file = "gr_gates.png"
    mup_roles = {"bias": VECTOR, "gate_*.weight": HIDDEN}
    slot_fields = ("gate_mean", "gate_spread")
    compiled_absorb = True  # tensor arithmetic, the slot an index: its own region under train.compile

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__(d_model, max_iter)
        self.gate_attn = nn.Linear(d_model, d_model, bias=False)
        self.gate_mlp = nn.Linear(d_model, d_model, bias=False)
        self.bias = nn.Parameter(torch.full((self.n_slots, d_model), GR_BIAS_INIT))
        nn.init.zeros_(self.gate_attn.weight)
        nn.init.zeros_(self.gate_mlp.weight)

    def begin(self, embedding: Tensor) -> Tensor:
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        return state

    def gate(self, state: Tensor, slot: int) -> Tensor:
        """``sigmoid(W RMSNorm(x) + b_s)``: W n(x) + b_s as one matmul-add."""
        gate_proj = self.gate_attn if slot % 2 == 0 else self.gate_mlp
        normed = rms_norm(state)
        return torch.sigmoid(F.linear(normed, gate_proj.weight.to(normed.dtype), self.bias[slot].to(normed.dtype)))

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        new_state = torch.addcmul(state, self.gate(state, slot), output)  # x + gate * f(x), one fused multiply-add
        self.counters.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        return state

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """Per slot: ``gate_mean``, the mean gate, and ``gate_spread``, its sd over channels."""
        gate_sum = torch.zeros(self.n_slots, self.d_model, dtype=torch.float64)
        tokens = 0
        for trace in traces:
            tokens += trace.tokens
            for s, h in enumerate(trace.inputs):
                gate = self.gate(h, s)
                gate_sum[s] += gate.double().sum(dim=tuple(range(gate.dim() - 1))).cpu()
        per_channel = gate_sum / tokens
        return {"gate_mean": [float(v) for v in per_channel.mean(dim=1)],
                "gate_spread": [float(v) for v in per_channel.std(dim=1, unbiased=False)]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        return "gate", sum(fields["gate_mean"]) / len(fields["gate_mean"])

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """``gate_mean`` averaged over seeds, with its sd over seeds (``probe/gate_mean_sd``)."""
        import numpy as np

        out = {k: v for k, v in super().mean_over_seeds(rows).items() if k != "probe/gate_spread"}
        gates = [r["probe/gate_mean"] for r in rows if r.get("probe/gate_mean") is not None]
        if len(gates) > 1 and all(len(g) == len(gates[0]) for g in gates):
            out["probe/gate_mean_sd"] = np.array(gates, dtype=float).std(axis=0, ddof=1).tolist()
        return out

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        """Bars: sd over channels (one run) or over seeds (a comparison's mean); none when neither."""
        from dormouse.arms.plots import plot_slot_values, spread_label

        if row.get("probe/gate_mean") is None:
            return None
        spread, over = ((row["probe/gate_mean_sd"], "seeds") if row.get("probe/gate_mean_sd") is not None
                        else (row.get("probe/gate_spread"), "channels"))
        return plot_slot_values(slot_names(len(row["probe/gate_mean"]) // 2), row["probe/gate_mean"], out,
                                ylabel=spread_label("mean gate", spread, over), title="GR gate by slot" + label,
                                spread=spread, reference=1 / (1 + math.exp(-GR_BIAS_INIT)))
