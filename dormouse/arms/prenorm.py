"""The plain pre-norm residual, ``x <- x + f(x)``: the baseline every comparison is made against."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, slot_names
from dormouse.arms.specs import PreNormSpec


class PreNormResidual(PreNormSpec, ResidualArm):
    """The plain pre-norm residual of the standard transformer: ``x <- x + f(x)`` (the papers' baseline).
    ReZero with every alpha fixed at 1; its probe is the per-slot mean ``||f(x)|| / ||x||``."""

    plot_file = "prenorm_update_ratio.png"
    slot_fields = ("update_ratio",)
    compiled_absorb = True  # tensor arithmetic, the slot an index: its own region under train.compile

    def begin(self, embedding: Tensor) -> Tensor:
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        return state

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        new_state = state + output
        self.counters.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        return state

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``update_ratio[s]``: the mean over tokens of ``||f(x)|| / ||x||`` at slot s (norms over channels)."""
        ratio_sum = torch.zeros(self.n_slots, dtype=torch.float64)
        tokens = 0
        for trace in traces:
            tokens += trace.tokens
            for s, (x, fx) in enumerate(zip(trace.inputs, trace.outputs)):
                ratio = torch.linalg.vector_norm(fx.double(), dim=-1) / torch.linalg.vector_norm(x.double(), dim=-1)
                ratio_sum[s] += ratio.sum().cpu()
        return {"update_ratio": [float(v) for v in ratio_sum / tokens]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        return "ratio", sum(fields["update_ratio"]) / len(fields["update_ratio"])

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.arms.plots import plot_slot_values

        if row.get("probe/update_ratio") is None:
            return None
        return plot_slot_values(slot_names(len(row["probe/update_ratio"]) // 2), row["probe/update_ratio"], out,
                                ylabel="mean ||f(x)|| / ||x||", title="pre-norm update-to-state ratio by slot" + label)
