"""Delta Attention Residuals (Luo, Cai, Hu, arXiv:2605.18855): a depth read over the sublayer outputs, added to
the ordinary residual stream instead of replacing it (Full AttnRes, :mod:`dormouse.arms.attnres`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, depth_map_scalars, slot_names
from dormouse.arms.specs import DeltaAttnResConfig, DeltaAttnResSpec
from dormouse.ops.attnres import BlockAttnResState, depth_weights
from dormouse.ops.mup import READOUT, VECTOR

_MAP_FIELDS = ("reads", "sources", "weights", "entropy")  # the AttnRes map's fields, kept under delta_ names


class DeltaAttnRes(DeltaAttnResSpec, ResidualArm):
    """Delta AttnRes (arXiv:2605.18855): ``u_l = x + sum_i softmax_i(w_l . RMSNorm(v_i)) v_i``, ``x <- x + f(u_l)``.

    The sources are the embedding and every earlier sublayer output (the deltas); the first sublayer reads x alone
    (upstream ``delta_attn_res``, mode "delta"). Each read is Full AttnRes's (:mod:`dormouse.ops.attnres`): a
    zero-initialised pseudo-query and key gains of ones. ``gate=alpha`` scales the read by a zero-initialised
    scalar (pre-norm at init); ``readout=read`` gives each readout its own read added to x.
    """

    plot_file = "delta_attnres_map.png"
    mup_roles = {"queries": READOUT, "gains": VECTOR}

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> DeltaAttnRes:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.delta_attnres)

    def __init__(self, d_model: int, max_iter: int, cfg: DeltaAttnResConfig) -> None:
        super().__init__(d_model, max_iter)
        self.form = str(cfg.form)
        self.eps = float(cfg.eps)
        self.read_readouts = cfg.readout == "read"
        # one row per read that happens: sublayer slots 1 .. 2M-1 (slot 0 sees no source), then the readouts
        n_reads = self.n_slots - 1 + (max_iter if self.read_readouts else 0)
        self.queries = nn.Parameter(torch.zeros(n_reads, d_model))
        self.gains = nn.Parameter(torch.ones(n_reads, d_model)) if cfg.gain else None
        self.alpha = nn.Parameter(torch.zeros(n_reads)) if cfg.gate == "alpha" else None

    def begin(self, embedding: Tensor) -> _DeltaState:
        # the sources v_0 = embedding, v_i = f_i: Full AttnRes's (block size 1), scored against every row at once
        blocks = BlockAttnResState(embedding, 1, queries=self.queries, gains=self.gains, eps=self.eps, form=self.form)
        return _DeltaState(embedding, blocks)

    def _added_read(self, state: _DeltaState, row: int) -> Tensor:
        """``x + a_row * sum_i alpha_i v_i`` (``a_row = 1`` without the gate)."""
        mix = state.blocks.read_row(row)
        if self.alpha is not None:
            mix = self.alpha[row].to(mix.dtype) * mix
        return state.stream + mix

    def sublayer_input(self, state: _DeltaState, slot: int) -> Tensor:
        u = state.stream if slot == 0 else self._added_read(state, slot - 1)
        self.counters.count_ran(self.name)
        return u

    def absorb(self, state: _DeltaState, slot: int, output: Tensor) -> _DeltaState:
        # the stream and the sources in the embedding's dtype (bf16 sublayer outputs under autocast)
        out = output.to(state.stream.dtype)
        state.blocks.push(out)
        return _DeltaState(state.stream + out, state.blocks)

    def readout_input(self, state: _DeltaState, k: int) -> Tensor:
        return self._added_read(state, self.n_slots - 1 + k) if self.read_readouts else state.stream

    # --- what it learned: the depth-attention map and the size of the added read ----------------------------

    def _read_names(self) -> list[str]:
        slots = slot_names(self.max_iter)
        return slots[1:] + ([f"out{k + 1}" for k in range(self.max_iter)] if self.read_readouts else [])

    def _pushes(self, row: int) -> int:
        """How many sublayer outputs read ``row`` sees."""
        return row + 1 if row < self.n_slots - 1 else 2 * (row - self.n_slots + 2)

    def read_weights(self, row: int, sources: list[Tensor]) -> Tensor:
        """The weights ``alpha_i`` [N, ...] read ``row`` puts on ``sources``."""
        gain = self.gains[row] if self.gains is not None else None
        return depth_weights(sources, self.queries[row], gain=gain, eps=self.eps, form=self.form)

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """Per read: ``delta_weights[r][i]``, the mean weight on source i (NaN where unseen), ``delta_entropy[r]`` in
        nats, and ``delta_mix_ratio[r]``, the mean ``||u - x|| / ||x||`` (the added read against the stream)."""
        n_reads = self.queries.shape[0]
        n_cols = 1 + self._pushes(n_reads - 1)  # the last read sees the most sources
        w_sum = torch.zeros(n_reads, n_cols, dtype=torch.float64)
        h_sum = torch.zeros(n_reads, dtype=torch.float64)
        r_sum = torch.zeros(n_reads, dtype=torch.float64)
        tokens = 0
        for trace in traces:
            tokens += trace.tokens
            for r in range(n_reads):
                sources = [trace.embedding, *trace.outputs[:self._pushes(r)]]
                alpha = self.read_weights(r, sources).double()
                mix = sum(a.unsqueeze(-1) * v.double() for a, v in zip(alpha, sources))
                if self.alpha is not None:
                    mix = float(self.alpha[r]) * mix
                stream = torch.stack([s.double() for s in sources]).sum(dim=0)
                ratio = torch.linalg.vector_norm(mix, dim=-1) / torch.linalg.vector_norm(stream, dim=-1)
                w_sum[r, :alpha.shape[0]] += alpha.sum(dim=tuple(range(1, alpha.dim()))).cpu()
                h_sum[r] += torch.special.entr(alpha).sum(dim=0).sum().cpu()
                r_sum[r] += ratio.sum().cpu()
        weights = w_sum / tokens
        for r in range(n_reads):
            weights[r, 1 + self._pushes(r):] = float("nan")
        return {"delta_reads": self._read_names(), "delta_sources": ["emb", *slot_names(self.max_iter)][:n_cols],
                "delta_weights": [[float(v) for v in row] for row in weights],
                "delta_entropy": [float(v) for v in h_sum / tokens],
                "delta_mix_ratio": [float(v) for v in r_sum / tokens]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The mean ``||u - x|| / ||x||`` over every read: how large the added depth read is."""
        return "mix", sum(fields["delta_mix_ratio"]) / len(fields["delta_mix_ratio"])

    @classmethod
    def probe_scalars(cls, row: dict[str, Any]) -> dict[str, float]:
        """``probe/delta_weights/mlp2<-emb``, ``probe/delta_entropy/mlp2``, ``probe/delta_mix_ratio/mlp2``."""
        return depth_map_scalars(row, "delta_", ("entropy", "mix_ratio"))

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The map as AttnRes averages it (:func:`~dormouse.arms.plots.mean_map`), the mix ratios elementwise."""
        import numpy as np

        from dormouse.arms.plots import mean_map

        as_map = [{f"probe/{f}": r[f"probe/delta_{f}"] for f in _MAP_FIELDS} for r in rows
                  if all(r.get(f"probe/delta_{f}") is not None for f in _MAP_FIELDS)]
        averaged = mean_map(as_map)
        if averaged is None:
            return {}
        out = {f"probe/delta_{f}": averaged[f"probe/{f}"] for f in _MAP_FIELDS}
        ratios = [r["probe/delta_mix_ratio"] for r in rows if r.get("probe/delta_mix_ratio") is not None]
        if ratios and all(len(v) == len(ratios[0]) for v in ratios):
            out["probe/delta_mix_ratio"] = np.mean(np.array(ratios, dtype=float), axis=0).tolist()
        return out

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.arms.plots import plot_attnres_map

        if any(row.get(f"probe/delta_{f}") is None for f in _MAP_FIELDS):
            return None
        probe = {f"probe/{f}": row[f"probe/delta_{f}"] for f in _MAP_FIELDS}
        return plot_attnres_map(probe, out, "Delta AttnRes depth-attention map (added to x)" + label)


@dataclass
class _DeltaState:
    """The loop state: the residual stream x and the sources the reads see (embedding, then every output)."""

    stream: Tensor
    blocks: BlockAttnResState
