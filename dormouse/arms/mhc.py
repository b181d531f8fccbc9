"""Manifold-constrained hyper-connections (mHC; Xie et al. 2026, arXiv:2512.24880), as DeepSeek-V4 ships them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, slot_names
from dormouse.arms.specs import MHCConfig, MHCSpec
from dormouse.ops.mup import READOUT, SCALAR
from dormouse.ops.norm import rms_norm

MHC_INIT_STD = 0.02  # the projections' N(0, 0.02) (DeepSeek-V4's initializer_range); biases 0, scales 1
MHC_INIT_SEED = 0  # an arm built alone draws from this; in a model, init_random redraws from the run's seed


def sinkhorn(logits: Tensor, iters: int, eps: float) -> Tensor:
    """``comb``: ``softmax_rows(logits) + eps``, a column normalisation, then ``iters - 1`` row/column pairs."""
    # computed as [n, n, tokens]: each sum is then n contiguous token vectors added, not a strided reduction over
    # a trailing axis of n (measured ~3x faster, forward and backward, at n = 4 on CPU)
    comb = torch.softmax(logits, dim=-1).movedim((-2, -1), (0, 1)).contiguous() + eps
    for step in range(2 * iters - 1):  # the source's order: columns first (the softmax did the rows), columns last
        axis = 0 if step % 2 == 0 else 1
        comb = comb / (comb.sum(dim=axis, keepdim=True) + eps)
    return comb.movedim((0, 1), (-2, -1)).contiguous()  # the mix's batched product needs it contiguous


def flat_mixes(streams: Tensor, weight: Tensor, norm_eps: float) -> Tensor:
    """``phi RMSNorm(flatten(X))``: the streams [..., n, d] read as one n·d vector per token."""
    return F.linear(rms_norm(streams.flatten(-2), None, norm_eps), weight.to(streams.dtype))


def collapse(weights: Tensor, streams: Tensor) -> Tensor:
    """``sum_k w_k X_k``: one batched [1, n] x [n, d] product per token (at the CPU preset, 4096 tokens of 4 x 128,
    measured ~2x faster forward and backward than a broadcast multiply and a sum over the n streams)."""
    return torch.matmul(weights.unsqueeze(-2), streams).squeeze(-2)


@dataclass
class MHCState:
    """The n streams [..., n, d] in the embedding's dtype, and the maps the last ``sublayer_input`` computed."""

    streams: Tensor
    post: Tensor | None = None
    comb: Tensor | None = None


class MHC(MHCSpec, ResidualArm):
    """Manifold-constrained hyper-connections: ``X <- comb^T X + post (x) f(sum_k pre_k X_k)``, comb doubly stochastic.

    n streams start as copies of the embedding (Zhu et al. 2024, arXiv:2409.19606). Per slot, from
    ``RMSNorm(flatten X)``: ``pre = sigmoid(.) + eps``, ``post = 2 sigmoid(.)``, ``comb = Sinkhorn(softmax(.))``
    (DeepSeek-V4's ``DeepseekV4HyperConnection``); each readout collapses with its own head (``DeepseekV4HyperHead``).
    """

    plot_file = "mhc_comb.png"
    mup_roles = {"weight": READOUT, "head_weight": READOUT, "bias": SCALAR, "head_bias": SCALAR,
                 "alpha": SCALAR, "head_alpha": SCALAR}
    slot_fields = ("pre_mean", "post_mean", "comb_diag", "stream_spread")

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> MHC:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.mhc)

    def __init__(self, d_model: int, max_iter: int, cfg: MHCConfig | None = None) -> None:
        super().__init__(d_model, max_iter)
        cfg = MHCConfig() if cfg is None else cfg
        n = self.n_streams = int(cfg.n_streams)
        self.sinkhorn_iters = int(cfg.sinkhorn_iters)
        self.eps, self.norm_eps = float(cfg.eps), float(cfg.norm_eps)
        gen = torch.Generator().manual_seed(MHC_INIT_SEED)
        maps = n * n + 2 * n  # pre (n), post (n), comb (n x n, row-major)
        self.weight = nn.Parameter(torch.randn(self.n_slots, maps, n * d_model, generator=gen) * MHC_INIT_STD)
        self.bias = nn.Parameter(torch.zeros(self.n_slots, maps))
        self.alpha = nn.Parameter(torch.ones(self.n_slots, 3))  # the pre, post and comb scales
        self.head_weight = nn.Parameter(torch.randn(max_iter, n, n * d_model, generator=gen) * MHC_INIT_STD)
        self.head_bias = nn.Parameter(torch.zeros(max_iter, n))
        self.head_alpha = nn.Parameter(torch.ones(max_iter))

    @torch.no_grad()
    def init_random(self, generator: torch.Generator) -> None:
        """The projections' N(0, 0.02) from the run's seed: with all-zero projections the n streams would stay
        identical (no mixing to learn)."""
        for w in (self.weight, self.head_weight):
            w.copy_(torch.randn(w.shape, generator=generator) * MHC_INIT_STD)

    def maps(self, streams: Tensor, slot: int) -> tuple[Tensor, Tensor, Tensor]:
        """Slot ``slot``'s ``(pre [..., n], post [..., n], comb [..., n, n])`` from the streams (compute dtype)."""
        n = self.n_streams
        mixes = flat_mixes(streams, self.weight[slot], self.norm_eps)
        pre_w, post_w, comb_w = mixes.split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = self.bias[slot].to(mixes.dtype).split([n, n, n * n])
        a_pre, a_post, a_comb = self.alpha[slot].to(mixes.dtype).unbind(0)
        pre = torch.sigmoid(pre_w * a_pre + pre_b) + self.eps
        post = 2 * torch.sigmoid(post_w * a_post + post_b)
        comb = sinkhorn((comb_w * a_comb + comb_b).unflatten(-1, (n, n)), self.sinkhorn_iters, self.eps)
        return pre, post, comb

    @staticmethod
    def mix(streams: Tensor, post: Tensor, comb: Tensor, output: Tensor) -> Tensor:
        """``comb^T X + post (x) f``: one [n, n] x [n, d] product per token, the output spread by one multiply-add."""
        return torch.addcmul(torch.matmul(comb.transpose(-1, -2), streams), post.unsqueeze(-1), output.unsqueeze(-2))

    def _cdtype(self, x: Tensor) -> torch.dtype:
        # the maps, the Sinkhorn and the mixes in float32 at least, outside autocast (DeepSeek-V4 keeps them fp32)
        return torch.promote_types(x.dtype, torch.float32)

    def begin(self, embedding: Tensor) -> MHCState:
        # one copy per forward: a batched product over an expanded (stride-0) operand runs token by token on CPU
        streams = embedding.unsqueeze(-2).expand(*embedding.shape[:-1], self.n_streams, embedding.shape[-1])
        return MHCState(streams.contiguous())

    def sublayer_input(self, state: MHCState, slot: int) -> Tensor:
        streams = state.streams
        with torch.autocast(device_type=streams.device.type, enabled=False):
            x = streams.to(self._cdtype(streams))
            pre, state.post, state.comb = self.maps(x, slot)
            return collapse(pre, x).to(streams.dtype)

    def absorb(self, state: MHCState, slot: int, output: Tensor) -> MHCState:
        if state.post is None or state.comb is None:
            raise RuntimeError(f"mhc: absorb at slot {slot} without its sublayer_input (no maps in the state)")
        streams = state.streams
        with torch.autocast(device_type=streams.device.type, enabled=False):
            cdtype = self._cdtype(streams)
            new = self.mix(streams.to(cdtype), state.post, state.comb, output.to(cdtype)).to(streams.dtype)
        self.counters.count_ran(self.name)
        return MHCState(new)

    def head_weights(self, streams: Tensor, k: int) -> Tensor:
        """Readout ``k``'s collapse weights ``sigmoid(a_k phi_k RMSNorm(flatten X) + b_k) + eps`` [..., n]."""
        mixes = flat_mixes(streams, self.head_weight[k], self.norm_eps)
        alpha, bias = self.head_alpha[k].to(mixes.dtype), self.head_bias[k].to(mixes.dtype)
        return torch.sigmoid(mixes * alpha + bias) + self.eps

    def readout_input(self, state: MHCState, k: int) -> Tensor:
        streams = state.streams
        with torch.autocast(device_type=streams.device.type, enabled=False):
            x = streams.to(self._cdtype(streams))
            return collapse(self.head_weights(x, k), x).to(streams.dtype)

    # --- what it learned ---------------------------------------------------------------------------------

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """Per slot, token means: ``pre_mean``, ``post_mean``, ``comb_diag`` (1/n: streams fully mixed, 1: kept apart)
        and ``stream_spread`` after the slot (``rms_k ||X_k - mean X|| / ||mean X||``, 0 while the streams are one)."""
        sums = torch.zeros(4, self.n_slots, dtype=torch.float64)
        tokens = 0
        for trace in traces:  # the streams replayed from the recorded sublayer outputs, as the forward built them
            tokens += trace.tokens
            x = self.begin(trace.embedding).streams
            x = x.to(self._cdtype(x))
            for s, out in enumerate(trace.outputs):
                pre, post, comb = self.maps(x, s)
                x = self.mix(x, post, comb, out.to(x.dtype))
                mean = x.mean(dim=-2, keepdim=True)
                spread = (x - mean).square().sum(-1).mean(-1).sqrt() / torch.linalg.vector_norm(mean, dim=-1)[..., 0]
                for i, v in enumerate((pre.mean(-1), post.mean(-1), comb.diagonal(dim1=-2, dim2=-1).mean(-1), spread)):
                    sums[i, s] += v.double().sum().cpu()
        means = sums / tokens
        return {field: [float(v) for v in row] for field, row in zip(self.slot_fields, means)} | {
            "n_streams": self.n_streams}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The mean diagonal of comb over the slots: 1/n fully mixing, 1 the streams kept apart."""
        return "comb_diag", sum(fields["comb_diag"]) / len(fields["comb_diag"])

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.arms.plots import plot_slot_values

        if row.get("probe/comb_diag") is None:
            return None
        n = row.get("probe/n_streams")
        return plot_slot_values(slot_names(len(row["probe/comb_diag"]) // 2), row["probe/comb_diag"], out,
                                ylabel="mean diagonal of comb", title="mHC stream mixing by slot" + label,
                                reference=1.0 / n if n else None)
