"""Attention Residuals (Kimi Team, arXiv:2603.15031), Full and Block: the state is a softmax mixture over depth."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, depth_map_scalars, slot_names
from dormouse.arms.specs import AttnResConfig, AttnResSpec
from dormouse.ops.attnres import (
    BlockAttnResState,
    block_sources,
    choose_kernel,
    depth_weights,
    online_softmax_merge,
    phase1_stats,
    phase2_input,
)
from dormouse.ops.mup import READOUT, VECTOR
from dormouse.ops.norm import rms_norm


class AttnRes(AttnResSpec, ResidualArm):
    """Attention Residuals (Kimi Team, arXiv:2603.15031): ``h_l = sum_i softmax_i(w_l . RMSNorm(v_i)) v_i``.

    Full (Eq. 1-4) or Block (Eq. 5-6). Per slot a zero-initialised pseudo-query (so the first reads are plain means)
    and a key gain of ones; each readout point has its own query and reads every source after its iteration
    (docs/attnres.md, "The readout"). The input-dependent query (paper §5.3, our reading) is
    ``w_l + U_l RMSNorm(v_last)`` with ``U_l`` zero-initialised. Block mode trains with Eq. 6 directly and evaluates
    with Algorithm 1, same logits.
    """

    plot_file = "attnres_map.png"
    mup_roles = {"queries": READOUT, "gains": VECTOR}

    @classmethod
    def run_name_stem(cls, model_cfg: Any) -> str:
        """Block AttnRes says its block size (``attnres_block2``), so a Full and a Block run are told apart."""
        size = model_cfg.attnres.block_size
        return cls.name if size is None else f"{cls.name}_block{size}"

    @classmethod
    def choose_kernel(cls, model_cfg: Any, device: torch.device) -> tuple[str, str]:
        # the one owner of the rule, dormouse.ops.attnres.choose_kernel, told whether the queries are per token
        return choose_kernel(str(model_cfg.kernel), device, per_token_query=model_cfg.attnres.query == "input")

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> AttnRes:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.attnres, kernel=kernel)

    def __init__(self, d_model: int, max_iter: int, cfg: AttnResConfig, kernel: str = "torch") -> None:
        super().__init__(d_model, max_iter)
        self.block_size = cfg.block_size
        self.form = str(cfg.form)
        self.eps = float(cfg.eps)
        self.input_query = cfg.query == "input"
        self.kernel = kernel  # the resolved path ("torch" or "triton"); see dormouse.ops.attnres.choose_kernel
        n_reads = self.n_slots + max_iter  # one per sublayer slot, one per readout point
        self.queries = nn.Parameter(torch.zeros(n_reads, d_model))
        self.gains = nn.Parameter(torch.ones(n_reads, d_model)) if cfg.gain else None
        self.query_proj = nn.Parameter(torch.zeros(n_reads, d_model, d_model)) if self.input_query else None

    def begin(self, embedding: Tensor) -> _AttnResState:
        if self.kernel == "torch" and self.query_proj is None:
            # every read's query is a parameter, known before the first read: the state scores each source
            # against all of them at once (BlockAttnResState.read_row)
            return _AttnResState(BlockAttnResState(embedding, self.block_size or 1, queries=self.queries,
                                                   gains=self.gains, eps=self.eps, form=self.form), table=True)
        return _AttnResState(BlockAttnResState(embedding, self.block_size or 1))

    def _query_and_gain(self, index: int, sources: list[Tensor]) -> tuple[Tensor, Tensor | None]:
        query = self.queries[index]
        if self.query_proj is not None:
            last = rms_norm(sources[-1])
            query = query + last @ self.query_proj[index].T  # per-token query [..., d]
        gain = self.gains[index] if self.gains is not None else None
        return query, gain

    def _read(self, state: _AttnResState, index: int) -> Tensor:
        """Eq. 2-4 over the sources Eq. 6 allows: the direct form (each source's inverse RMS kept by the state)."""
        blocks = state.blocks
        if state.table:
            return blocks.read_row(index)
        # the (input-dependent) query is part of the read: it leaves autocast with it
        with torch.autocast(device_type=blocks.embedding.device.type, enabled=False):
            query, gain = self._query_and_gain(index, blocks.sources())
        return blocks.read(query, gain=gain, eps=self.eps, form=self.form, kernel=self.kernel)

    def _two_phase_input(self, state: _AttnResState, slot: int) -> Tensor:
        """Algorithm 1 streamed through the loop (Phase 1 per block, Phase 2 per layer): :meth:`_read`'s mixture."""
        blocks = state.blocks
        i = blocks.layers_pushed % self.block_size  # 0-based position in the block
        if i == 0:
            completed = blocks.sources()  # no partial at a block's start: exactly [b_0 .. b_{n-1}]
            end = min(slot + self.block_size, self.n_slots)
            gains = self.gains[slot:end] if self.gains is not None else None
            state.phase1 = phase1_stats(completed, self.queries[slot:end], gains=gains, eps=self.eps,
                                        form=self.form)
            state.phase1_start = slot
        row = tuple(t[slot - state.phase1_start] for t in state.phase1)
        partial = blocks.sources()[-1] if i > 0 else None  # b_n^{i-1}
        gain = self.gains[slot] if self.gains is not None else None
        merge = online_softmax_merge
        if self.kernel == "triton":  # the fused Phase-2 merge (kernels/merge.py)
            from dormouse_kernels import merge_partials as merge
        h = phase2_input(row, partial, self.queries[slot], gain=gain, eps=self.eps, form=self.form, merge=merge)
        return h.to(blocks.embedding.dtype)

    def uses_two_phase(self) -> bool:
        """Block mode in eval runs Algorithm 1; training runs the direct Eq. 6 form."""
        return not self.training and self.block_size is not None and self.query_proj is None

    def sublayer_input(self, state: _AttnResState, slot: int) -> Tensor:
        h = self._two_phase_input(state, slot) if self.uses_two_phase() else self._read(state, slot)
        self.counters.count_ran(self.name)
        return h

    def absorb(self, state: _AttnResState, slot: int, output: Tensor) -> _AttnResState:
        # Under bf16 autocast the sublayers emit bf16 while the embedding (b_0) is fp32. Store every source
        # in the embedding's dtype once, here, as the other arms keep their fp32 running sum; otherwise each
        # later read would re-cast every bf16 source.
        state.blocks.push(output.to(state.blocks.embedding.dtype))
        return state

    def readout_input(self, state: _AttnResState, k: int) -> Tensor:
        return self._read(state, self.n_slots + k)

    # --- what it learned: the depth-attention map ----------------------------------------------------------

    def read_weights(self, index: int, sources: list[Tensor]) -> Tensor:
        """The weights ``alpha_i`` [N, ...] read ``index`` puts on ``sources`` (Eq. 2-3 and the softmax)."""
        query, gain = self._query_and_gain(index, sources)
        return depth_weights(sources, query, gain=gain, eps=self.eps, form=self.form)

    def _visible(self, read: int) -> int:
        """How many sources read ``read`` sees (each sublayer slot, then each readout point)."""
        seen = read if read < self.n_slots else 2 * (read - self.n_slots + 1)
        return 1 + (math.ceil(seen / self.block_size) if self.block_size else seen)

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """Per read: ``weights[r][i]``, the mean weight on source i (Eq. 6 sets), and ``entropy[r]`` in nats; columns a
        read cannot see are NaN."""
        n_reads = self.n_slots + self.max_iter
        n_cols = self._visible(n_reads - 1)
        w_sum = torch.zeros(n_reads, n_cols, dtype=torch.float64)
        h_sum = torch.zeros(n_reads, dtype=torch.float64)
        tokens = 0
        for trace in traces:
            tokens += trace.tokens
            for r in range(n_reads):
                seen = trace.outputs[:r] if r < self.n_slots else trace.outputs[:2 * (r - self.n_slots + 1)]
                alpha = self.read_weights(r, block_sources(trace.embedding, seen, self.block_size or 1))
                w_sum[r, :alpha.shape[0]] += alpha.double().sum(dim=tuple(range(1, alpha.dim()))).cpu()
                h_sum[r] += torch.special.entr(alpha).sum(dim=0).double().sum().cpu()
        weights = w_sum / tokens
        for r in range(n_reads):
            weights[r, self._visible(r):] = float("nan")
        slots = slot_names(self.max_iter)
        return {"reads": slots + [f"out{k + 1}" for k in range(self.max_iter)],
                "sources": ["emb"] + (slots if not self.block_size else [f"block{n}" for n in range(1, n_cols)]),
                "weights": [[float(v) for v in row] for row in weights],
                "entropy": [float(v) for v in h_sum / tokens]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The mean weight on the embedding source, over every read."""
        return "emb_w", sum(row[0] for row in fields["weights"]) / len(fields["weights"])

    @classmethod
    def probe_scalars(cls, row: dict[str, Any]) -> dict[str, float]:
        """``probe/weights/out3<-emb`` and ``probe/entropy/mlp2``; a source a read cannot see is left out."""
        return depth_map_scalars(row)

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from dormouse.arms.plots import mean_map

        return mean_map(rows) or {}

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.arms.plots import plot_attnres_map

        if row.get("probe/weights") is None:
            return None
        return plot_attnres_map(row, out, "AttnRes depth-attention map" + label)


@dataclass
class _AttnResState:
    """AttnRes's loop state: the Eq. 6 source sets, plus Algorithm 1's Phase-1 statistics in eval."""

    blocks: BlockAttnResState
    table: bool = False  # the reads go through the state's query table (torch path, static queries)
    phase1: tuple[Tensor, Tensor, Tensor] | None = None
    phase1_start: int = 0
