"""Residual arms: how a sublayer's output is folded into the state (docs/model.md, "The arms").

One interface, three implementations; the loop driver (:mod:`dormouse.model`) never branches on the arm::

    state = arm.begin(embedding)
    for each iteration k, for each sublayer slot s (2 per iteration: attention, MLP):
        out = sublayer(arm.sublayer_input(state, s))
        state = arm.absorb(state, s, out)
    logits_k = head(norm(arm.readout_input(state, k)))

Every arm parameter is per *slot* (one per sublayer per iteration, plus one per readout for AttnRes): the
block's weights are shared across iterations, but each unrolled depth has its own arm parameters.
Each arm counts ``ran`` (:data:`dormouse.probes.PROBES`) at the point where its aggregation becomes the
state; the loop driver counts ``asked``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dormouse.attnres import BlockAttnResState, online_softmax_merge, phase1_stats, phase2_input
from dormouse.config import AttnResConfig, model_arm
from dormouse.norm import rms_norm
from dormouse.probes import PROBES

State = Any


class ResidualArm(nn.Module):
    """The residual-arm interface. ``name`` is the counter and eval-line name, one of
    :data:`dormouse.config.ARMS`; defining a subclass with a name registers it (:func:`arm_classes`)."""

    name: str = ""

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_iter = max_iter
        self.n_slots = 2 * max_iter

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> ResidualArm:
        """The arm for a model config; ``kernel`` is the resolved AttnRes read path (other arms ignore it)."""
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter))

    def begin(self, embedding: Tensor) -> State:
        raise NotImplementedError

    def sublayer_input(self, state: State, slot: int) -> Tensor:
        raise NotImplementedError

    def absorb(self, state: State, slot: int, output: Tensor) -> State:
        raise NotImplementedError

    def readout_input(self, state: State, k: int) -> Tensor:
        """What the head reads after iteration ``k`` (0-based)."""
        raise NotImplementedError

    def no_decay_names(self) -> set[str]:
        """Parameter names (relative to the arm) excluded from weight decay: scalars, biases, queries, gains."""
        return {name for name, p in self.named_parameters() if p.ndim < 2 or not name.endswith("weight")}


class ReZero(ResidualArm):
    """ReZero (Bachlechner et al. 2020): ``x <- x + alpha_s f(x)``, one scalar alpha_s per slot, init 0."""

    name = "rezero"

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__(d_model, max_iter)
        self.alpha = nn.Parameter(torch.zeros(self.n_slots))

    def begin(self, embedding: Tensor) -> Tensor:
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        return state

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        new_state = torch.addcmul(state, self.alpha[slot].to(output.dtype), output)  # x + alpha_s f(x), one pass
        PROBES.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        return state


class GatedResidual(ResidualArm):
    """Gated residual, the output gate of GTrXL (Parisotto et al. 2019, §3).

    ``x <- x + sigmoid(W RMSNorm(x) + b_s) * f(x)``. W (d x d, one for attention sublayers, one for MLP
    sublayers, shared across iterations like the block) starts at 0; the bias b_s (per slot) starts at -2,
    so the gate starts at sigmoid(-2) ~ 0.12 everywhere: a sigmoid-bounded per-channel ReZero until W
    learns to depend on the input. GR - ReZero therefore measures input-dependent gating.
    """

    name = "gr"

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__(d_model, max_iter)
        self.gate_attn = nn.Linear(d_model, d_model, bias=False)
        self.gate_mlp = nn.Linear(d_model, d_model, bias=False)
        self.bias = nn.Parameter(torch.full((self.n_slots, d_model), -2.0))
        nn.init.zeros_(self.gate_attn.weight)
        nn.init.zeros_(self.gate_mlp.weight)

    def begin(self, embedding: Tensor) -> Tensor:
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        return state

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        gate_proj = self.gate_attn if slot % 2 == 0 else self.gate_mlp
        normed = rms_norm(state)
        # W n(x) + b_s as one matmul-add, then x + gate * f(x) as one fused multiply-add
        gate = torch.sigmoid(F.linear(normed, gate_proj.weight.to(normed.dtype), self.bias[slot].to(normed.dtype)))
        new_state = torch.addcmul(state, gate, output)
        PROBES.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        return state


class AttnRes(ResidualArm):
    """Attention Residuals (Kimi Team, arXiv:2603.15031), Full (Eq. 1-4) or Block (Eq. 5-6).

    No running sum: sublayer l reads the softmax mixture of the sources so far, ``h_l = sum_i alpha_i v_i``
    with ``alpha = softmax_i(w_l . RMSNorm_l(v_i))`` (no temperature; keys normalised, values raw; one
    joint softmax), and its output becomes a new source. Per slot: a pseudo-query w_l (zero-initialised, so
    at initialisation every input is the plain mean of its sources) and a key-RMSNorm gain g_l (ones).

    Readout (docs/attnres.md, "The readout" — our resolution of a gap in the paper): each readout point k has
    its own zero-initialised query and gain and reads every source available after iteration k, so the
    readout after iteration k always contains iteration k's work.

    Input-dependent query (paper §5.3; the paper does not say what it is projected from — OUR READING):
    ``q_l = w_l + U_l RMSNorm(v_last)`` with v_last the most recent source and U_l (d x d, per slot)
    zero-initialised, so at initialisation it equals the static query.

    Block mode trains with the direct Eq. 6 form; in eval mode it runs Algorithm 1's two-phase schedule
    (:meth:`_two_phase_input`), which gives the same logits (pinned by a test).
    """

    name = "attnres"

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> AttnRes:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.attnres, kernel=kernel)

    def __init__(self, d_model: int, max_iter: int, cfg: AttnResConfig, kernel: str = "torch") -> None:
        super().__init__(d_model, max_iter)
        self.block_size = cfg.block_size
        self.form = str(cfg.form)
        self.eps = float(cfg.eps)
        self.input_query = cfg.query == "input"
        self.kernel = kernel  # the resolved path ("torch" or "triton"); see dormouse.attnres.resolve_kernel
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
        """Algorithm 1, streamed through the loop: the same mixture as :meth:`_read`, computed in two phases.

        At a block's first layer, Phase 1 scores all of the block's queries at once against the completed
        blocks ``[b_0 .. b_{n-1}]`` and keeps (m, l, o) per query; each layer then merges the one
        intra-block source ``b_n^{i-1}`` (Phase 2) by the online-softmax merge.
        """
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
        PROBES.count_ran(self.name)
        return h

    def absorb(self, state: _AttnResState, slot: int, output: Tensor) -> _AttnResState:
        # Under bf16 autocast the sublayers emit bf16 while the embedding (b_0) is fp32. Store every source
        # in the embedding's dtype once, here, as the other arms keep their fp32 running sum; otherwise each
        # later read would re-cast every bf16 source.
        state.blocks.push(output.to(state.blocks.embedding.dtype))
        return state

    def readout_input(self, state: _AttnResState, k: int) -> Tensor:
        return self._read(state, self.n_slots + k)


@dataclass
class _AttnResState:
    """AttnRes's loop state: the Eq. 6 source sets, plus Algorithm 1's Phase-1 statistics in eval."""

    blocks: BlockAttnResState
    table: bool = False  # the reads go through the state's query table (torch path, static queries)
    phase1: tuple[Tensor, Tensor, Tensor] | None = None
    phase1_start: int = 0


def build_arm(model_cfg: Any, kernel: str = "torch") -> ResidualArm:
    """The arm a model config selects (validation has already refused two switches on).

    ``kernel`` is the AttnRes read path already resolved for the device (``dormouse.attnres.resolve_kernel``):
    "torch" or "triton"; the other arms have no read to route.
    """
    return arm_classes()[model_arm(model_cfg)].from_config(model_cfg, kernel)


def arm_classes() -> dict[str, type[ResidualArm]]:
    """Every arm, by name: the direct subclasses of :class:`ResidualArm` (defining one registers it)."""
    return {cls.name: cls for cls in ResidualArm.__subclasses__() if cls.name}
