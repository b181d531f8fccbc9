"""DenseFormer's Depth-Weighted Average (Pagliardini et al. 2024, arXiv:2402.02622; upstream epfml/DenseFormer)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace
from dormouse.arms.specs import DenseFormerConfig, DenseFormerSpec, dwa_blocks, dwa_sources
from dormouse.ops.mup import SCALAR


class DenseFormer(DenseFormerSpec, ResidualArm):
    """DenseFormer (Pagliardini et al. 2024): iteration i's output is ``Y_i = sum_{j<=i} alpha_ij X_j``, a DWA.
    X_0 is the embedding, ``X_j = Y_{j-1} + attn + mlp``; §3, §3.2 (dilation, period), upstream
    denseformer/denseformer.py. alpha_ii = 1, others 0 at init: pre-norm."""

    plot_file = "denseformer_dwa.png"
    mup_roles = {"dwa.*": SCALAR}

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> DenseFormer:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.denseformer)

    def __init__(self, d_model: int, max_iter: int, cfg: DenseFormerConfig) -> None:
        super().__init__(d_model, max_iter)
        self.dilation, self.period = int(cfg.dilation), int(cfg.period)
        weights = {}
        for block in dwa_blocks(max_iter, self.period):
            w = torch.zeros(len(dwa_sources(block, self.dilation)))
            w[-1] = 1.0  # alpha_ii = 1 (the last source is the block's own output), every other 0
            weights[str(block)] = nn.Parameter(w)
        self.dwa = nn.ParameterDict(weights)

    def average(self, blocks: list[Tensor], block: int) -> Tensor:
        """``Y_i = sum_j alpha_ij X_j`` over the dilated sources of ``block`` (1-based), in their dtype."""
        w = self.dwa[str(block)].to(blocks[0].dtype)
        sources = dwa_sources(block, self.dilation)
        y = w[0] * blocks[sources[0]]
        for m in range(1, len(sources)):
            y = torch.addcmul(y, w[m], blocks[sources[m]])  # no product tensor kept per source
        return y

    def begin(self, embedding: Tensor) -> _DenseState:
        return _DenseState(blocks=[embedding], current=embedding)

    def sublayer_input(self, state: _DenseState, slot: int) -> Tensor:
        return state.current

    def absorb(self, state: _DenseState, slot: int, output: Tensor) -> _DenseState:
        x = state.current + output  # the pre-norm residual inside the block; fp32 state + bf16 output is fp32
        if slot % 2 == 0:
            new_state = _DenseState(state.blocks, x)
        else:  # the block (iteration) ends: X_i joins the sources, the DWA (where one follows) is what is read next
            block, blocks = slot // 2 + 1, [*state.blocks, x]
            y = self.average(blocks, block) if str(block) in self.dwa else x
            new_state = _DenseState(blocks, y)  # the sources keep X_i, not Y_i (the paper's DWA reads X_j)
        self.counters.count_ran(self.name)
        return new_state

    def readout_input(self, state: _DenseState, k: int) -> Tensor:
        return state.current

    # --- what it learned: the DWA weight matrix ------------------------------------------------------------

    @torch.no_grad()
    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``dwa_weights[i-1][j]``: alpha_ij, NaN where block i's DWA has no weight on X_j (parameters only)."""
        weights = torch.full((self.max_iter, self.max_iter + 1), float("nan"), dtype=torch.float64)
        for key, w in self.dwa.items():
            block = int(key)
            weights[block - 1, dwa_sources(block, self.dilation)] = w.double().cpu()
        return {"dwa_rows": [f"dwa{i}" for i in range(1, self.max_iter + 1)],
                "dwa_sources": ["emb"] + [f"block{j}" for j in range(1, self.max_iter + 1)],
                "dwa_weights": [[float(v) for v in row] for row in weights]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The mean |alpha_ij| off the diagonal (0 at init: how far the averages moved from pre-norm)."""
        off = [abs(w) for i, row in enumerate(fields["dwa_weights"]) for j, w in enumerate(row)
               if j != i + 1 and math.isfinite(w)]
        return "off_diag", sum(off) / len(off) if off else float("nan")

    @classmethod
    def probe_scalars(cls, row: dict[str, Any]) -> dict[str, float]:
        """``probe/dwa_weights/dwa2<-emb``: every weight the arm has."""
        rows, sources = row.get("probe/dwa_rows") or [], row.get("probe/dwa_sources") or []
        return {f"probe/dwa_weights/{r}<-{s}": float(w)
                for r, ws in zip(rows, row.get("probe/dwa_weights") or []) for s, w in zip(sources, ws)
                if math.isfinite(w)}

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The weight matrices averaged cell by cell over the seeds of one shape."""
        maps = [r for r in rows if r.get("probe/dwa_weights") is not None]
        same = [np.array(r["probe/dwa_weights"], dtype=float) for r in maps
                if len(r["probe/dwa_weights"]) == len(maps[0]["probe/dwa_weights"])]
        if not same:
            return {}
        return {"probe/dwa_rows": maps[0]["probe/dwa_rows"], "probe/dwa_sources": maps[0]["probe/dwa_sources"],
                "probe/dwa_weights": np.mean(same, axis=0).tolist()}

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.arms.plots import plot_weight_matrix

        if row.get("probe/dwa_weights") is None:
            return None
        return plot_weight_matrix(row["probe/dwa_weights"], row["probe/dwa_rows"], row["probe/dwa_sources"], out,
                                  title="DenseFormer DWA weights" + label, xlabel="source X_j",
                                  ylabel="DWA after block i")


@dataclass
class _DenseState:
    """DenseFormer's loop state: the embedding and the block outputs so far, and what the next sublayer reads."""

    blocks: list[Tensor]  # X_0 (the embedding), X_1, ..., X_i
    current: Tensor  # Y_i after a block; Y_i + attn inside the next
