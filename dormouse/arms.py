"""Residual arms: how a sublayer's output is folded into the state (docs/model.md, "The arms").

One interface, one class per arm; the loop driver (:mod:`dormouse.model`) never branches on the arm::

    state = arm.begin(embedding)
    for each iteration k, for each sublayer slot s (2 per iteration: attention, MLP):
        out = sublayer(arm.sublayer_input(state, s))
        state = arm.absorb(state, s, out)
    logits_k = head(norm(arm.readout_input(state, k)))

An arm owns everything about itself, so adding one is one class here (defining it registers it,
:mod:`dormouse.arm_registry`): its parameters and their init, its no-decay set, its options
(``options``, at ``model.<name>``) and their checks (:meth:`ResidualArm.config_problems`), its read path
(:meth:`ResidualArm.choose_kernel`), its learned-value probes and their one-number summary
(:meth:`ResidualArm.learned`, :meth:`ResidualArm.summarize`), its per-run plot and its seed average
(:meth:`ResidualArm.plot`, :meth:`ResidualArm.mean_over_seeds`), and its one-line description for reports
(:meth:`ResidualArm.describe`). Its switch ``model.use_<name>`` is derived from the name.

Every arm parameter is per *slot* (one per sublayer per iteration, plus one per readout for AttnRes): the
block's weights are shared across iterations, but each unrolled depth has its own arm parameters.
Each arm counts ``ran`` (:data:`dormouse.probes.PROBES`) at the point where its aggregation becomes the
state; the loop driver counts ``asked``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dormouse.arm_registry import arm_switch, register_arm
from dormouse.attnres import (
    BlockAttnResState,
    block_sources,
    choose_kernel,
    depth_weights,
    online_softmax_merge,
    phase1_stats,
    phase2_input,
)
from dormouse.norm import rms_norm
from dormouse.probes import PROBES, LoopTrace, slot_names

State = Any


class ResidualArm(nn.Module):
    """The residual-arm interface. ``name`` is the counter and eval-line name; a subclass that sets its own
    ``name`` is registered when it is defined (:func:`dormouse.arm_registry.arm_classes`)."""

    name: ClassVar[str] = ""
    default: ClassVar[bool] = False  # the arm no switch selects (exactly one arm)
    options: ClassVar[type | None] = None  # a dataclass of the arm's options, composed at model.<name>
    plot_file: ClassVar[str | None] = None  # the run's plot of what the arm learned (dormouse.probe_plots)
    slot_fields: ClassVar[tuple[str, ...]] = ()  # probe fields holding one number per slot

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            register_arm(cls)

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_iter = max_iter
        self.n_slots = 2 * max_iter

    # --- configuration -----------------------------------------------------------------------------------

    @classmethod
    def switch(cls) -> str | None:
        """The ModelConfig field that selects this arm (None for the default arm)."""
        return None if cls.default else arm_switch(cls.name)

    @classmethod
    def describe(cls) -> str:
        """One line for reports: the first line of the class docstring (the mechanism and its equation)."""
        return (cls.__doc__ or cls.name).strip().splitlines()[0]

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        """Problems with this arm's options in ``model_cfg`` (one line each, naming the field); ``selected``
        says whether the config selects this arm. Called for every registered arm, before any work."""
        return []

    @classmethod
    def choose_kernel(cls, model_cfg: Any, device: torch.device) -> tuple[str, str]:
        """The read path this arm takes on ``device`` and why: ``("none", ...)`` for an arm without a fused
        read (``model.kernel`` is then refused unless ``auto``). Raises RuntimeError (what, why, how to fix)
        when ``model.kernel`` asks for a path that cannot run."""
        return "none", f"the {cls.name} arm has no fused read"

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> ResidualArm:
        """The arm for a model config; ``kernel`` is the path :meth:`choose_kernel` resolved."""
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter))

    # --- the loop ----------------------------------------------------------------------------------------

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

    # --- what the arm learned ----------------------------------------------------------------------------

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """The learned-value probe fields (without the ``probe/`` prefix), averaged over every token of the
        fixed eval set; ``traces`` yields one :class:`LoopTrace` per eval batch (the model's own forward)."""
        raise NotImplementedError

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The one number of the eval line's ``learned=<name>:<value>``."""
        raise NotImplementedError

    @classmethod
    def probe_scalars(cls, row: dict[str, Any]) -> dict[str, float]:
        """The arm's probe fields in a metrics row as named scalars for wandb (``probe/<field>/<slot>``)."""
        out: dict[str, float] = {}
        for key in (f"probe/{f}" for f in cls.slot_fields):
            values = row.get(key) or []
            for slot, value in zip(slot_names(len(values) // 2), values):
                out[f"{key}/{slot}"] = float(value)
        return out

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The arm's probe fields of ``rows`` (an A/B arm's seeds) averaged; per-slot lists elementwise. A
        field only some rows have is averaged over those; empty when no row has the arm's fields."""
        import numpy as np

        out: dict[str, Any] = {}
        for key in (f"probe/{f}" for f in cls.slot_fields):
            values = [r[key] for r in rows if r.get(key) is not None]
            if values and all(len(v) == len(values[0]) for v in values):
                out[key] = np.mean(np.array(values, dtype=float), axis=0).tolist()
        return out

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        """Draw the arm's plot of ``row``'s probe fields to ``out`` (None when the row has none of them)."""
        return None


# ----------------------------------------------------------------------------------------------------------
# The plain pre-norm residual
# ----------------------------------------------------------------------------------------------------------


class PreNormResidual(ResidualArm):
    """The plain pre-norm residual of the standard transformer: ``x <- x + f(x)`` (the papers' baseline).

    The AttnRes and ReZero papers both compare against it. Each sublayer f normalises its own input
    (``RMSNorm`` inside attention and MLP, :mod:`dormouse.model`) and the head reads the final RMSNorm of the
    sum: the pre-norm transformer residual exactly, with no arm parameters. It is ReZero with every alpha
    fixed at 1. Its probe is what the updates did to the state: per slot, the mean over tokens of
    ``||f(x)|| / ||x||`` (the update-to-state norm ratio).
    """

    name = "prenorm"
    plot_file = "prenorm_update_ratio.png"
    slot_fields = ("update_ratio",)

    def begin(self, embedding: Tensor) -> Tensor:
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        return state

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        new_state = state + output
        PROBES.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        return state

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``update_ratio[s]``: the mean over tokens of ``||f(x)|| / ||x||`` at slot s, x the state the slot's
        sublayer read (its input) and f(x) the update added to it (its output), norms over channels."""
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
        from dormouse.probe_plots import plot_slot_values

        if row.get("probe/update_ratio") is None:
            return None
        return plot_slot_values(slot_names(len(row["probe/update_ratio"]) // 2), row["probe/update_ratio"], out,
                                ylabel="mean ||f(x)|| / ||x||", title="pre-norm update-to-state ratio by slot" + label)


# ----------------------------------------------------------------------------------------------------------
# ReZero
# ----------------------------------------------------------------------------------------------------------


class ReZero(ResidualArm):
    """ReZero (Bachlechner et al. 2020): ``x <- x + alpha_s f(x)``, one scalar alpha_s per slot, init 0."""

    name = "rezero"
    default = True
    plot_file = "rezero_alpha.png"
    slot_fields = ("alpha",)

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

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``alpha[s]``: the residual scale of slot s, a parameter (no forward needed)."""
        return {"alpha": [float(a) for a in self.alpha.detach().float().cpu()]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        return "alpha", sum(fields["alpha"]) / len(fields["alpha"])

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """alpha averaged as ``|alpha|`` (``probe/alpha_abs``, with its sd over seeds): its sign is not
        identifiable. Negating the shared output projection W_o and every attention slot's alpha computes the
        same function (likewise W_down and the MLP slots), so two seeds can learn the same use of a slot with
        opposite signs, and their signed mean is ~0 (the residual_cpu pilot: mlp1 at -0.363 and +0.369)."""
        import numpy as np

        out: dict[str, Any] = {}
        alphas = [r["probe/alpha"] for r in rows if r.get("probe/alpha") is not None]
        if alphas and all(len(a) == len(alphas[0]) for a in alphas):
            magnitudes = np.abs(np.array(alphas, dtype=float))
            out["probe/alpha_abs"] = magnitudes.mean(axis=0).tolist()
            if len(alphas) > 1:
                out["probe/alpha_abs_sd"] = magnitudes.std(axis=0, ddof=1).tolist()
        return out

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.probe_plots import plot_slot_values, spread_label

        if row.get("probe/alpha") is not None:
            return plot_slot_values(slot_names(len(row["probe/alpha"]) // 2), row["probe/alpha"], out,
                                    ylabel="alpha", title="ReZero alpha by slot" + label, reference=0.0)
        if row.get("probe/alpha_abs") is not None:  # several seeds: see mean_over_seeds
            spread = row.get("probe/alpha_abs_sd")
            return plot_slot_values(slot_names(len(row["probe/alpha_abs"]) // 2), row["probe/alpha_abs"], out,
                                    ylabel=spread_label("|alpha|", spread, "seeds"),
                                    title="ReZero |alpha| by slot" + label, spread=spread, reference=0.0)
        return None


# ----------------------------------------------------------------------------------------------------------
# Gated residual
# ----------------------------------------------------------------------------------------------------------

GR_BIAS_INIT = -2.0  # the gate starts at sigmoid(-2) ~ 0.12


class GatedResidual(ResidualArm):
    """Gated residual, GTrXL's output gate (Parisotto et al. 2019): ``x <- x + sigmoid(W n(x) + b_s) * f(x)``.

    W (d x d, one for attention sublayers, one for MLP sublayers, shared across iterations like the block)
    starts at 0; the bias b_s (per slot) starts at -2, so the gate starts at sigmoid(-2) ~ 0.12 everywhere: a
    sigmoid-bounded per-channel ReZero until W learns to depend on the input. GR - ReZero therefore measures
    input-dependent gating.
    """

    name = "gr"
    plot_file = "gr_gates.png"
    slot_fields = ("gate_mean", "gate_spread")

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
        PROBES.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        return state

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``gate_mean[s]``: the mean over tokens and channels of slot s's gate; ``gate_spread[s]``: the standard
        deviation over channels of the per-channel mean gate. The gate reads the state, i.e. the sublayer input."""
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
        """``gate_mean`` averaged over seeds, with its sd over seeds (``probe/gate_mean_sd``): an A/B plot's
        error bars are the spread across seeds, as ReZero's |alpha|. A run's spread over channels is a
        different quantity (within one run) and is not averaged into a comparison's plot."""
        import numpy as np

        out = {k: v for k, v in super().mean_over_seeds(rows).items() if k != "probe/gate_spread"}
        gates = [r["probe/gate_mean"] for r in rows if r.get("probe/gate_mean") is not None]
        if len(gates) > 1 and all(len(g) == len(gates[0]) for g in gates):
            out["probe/gate_mean_sd"] = np.array(gates, dtype=float).std(axis=0, ddof=1).tolist()
        return out

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        """One run: bars are the sd over channels of the per-channel mean gate; a comparison's seed mean
        (:meth:`mean_over_seeds`): the sd over seeds; no bars (and no word of them) when there is neither."""
        from dormouse.probe_plots import plot_slot_values, spread_label

        if row.get("probe/gate_mean") is None:
            return None
        spread, over = ((row["probe/gate_mean_sd"], "seeds") if row.get("probe/gate_mean_sd") is not None
                        else (row.get("probe/gate_spread"), "channels"))
        return plot_slot_values(slot_names(len(row["probe/gate_mean"]) // 2), row["probe/gate_mean"], out,
                                ylabel=spread_label("mean gate", spread, over), title="GR gate by slot" + label,
                                spread=spread, reference=1 / (1 + math.exp(-GR_BIAS_INIT)))


# ----------------------------------------------------------------------------------------------------------
# Attention Residuals
# ----------------------------------------------------------------------------------------------------------


@dataclass
class AttnResConfig:
    """Attention Residuals options (docs/attnres.md), at ``model.attnres``; read when ``model.use_attnres``."""

    block_size: int | None = None  # null = Full AttnRes; else S sublayers per block (Eq. 5-6)
    form: str = "paper"  # "paper" (Eq. 2: q . RMSNorm(k)) or "sqrt_d" (ablation: L2 key / sqrt(d))
    eps: float = 1e-6  # RMSNorm epsilon of the keys
    gain: bool = True  # learned RMSNorm gain on the keys (initialised to ones)
    query: str = "static"  # "static" pseudo-query w_l, or "input": w_l + U_l RMSNorm(v_last)


def _bad(key: str, given: Any, allowed: str) -> str:
    return f"{key}={given!r} is invalid: {allowed}"


class AttnRes(ResidualArm):
    """Attention Residuals (Kimi Team, arXiv:2603.15031): ``h_l = sum_i softmax_i(w_l . RMSNorm(v_i)) v_i``.

    Full (Eq. 1-4) or Block (Eq. 5-6).

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
    options = AttnResConfig
    plot_file = "attnres_map.png"

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        lines: list[str] = []
        a = model_cfg.attnres
        if a.form not in ("paper", "sqrt_d"):
            lines.append(_bad("model.attnres.form", a.form, "one of paper, sqrt_d"))
        if a.query not in ("static", "input"):
            lines.append(_bad("model.attnres.query", a.query, "one of static, input"))
        if not (math.isfinite(a.eps) and a.eps >= 0):
            lines.append(_bad("model.attnres.eps", a.eps, "must be a finite number >= 0"))
        if a.block_size is not None:
            if a.block_size < 1:
                lines.append(_bad("model.attnres.block_size", a.block_size, "must be >= 1 or null (Full AttnRes)"))
            if not selected:
                lines.append(f"model.attnres.block_size={a.block_size} is set but model.{cls.switch()}=false: "
                             f"set model.{cls.switch()}=true or leave block_size null")
            if a.query == "input":
                lines.append(
                    f"model.attnres.query=input with model.attnres.block_size={a.block_size}: the Block "
                    "two-phase schedule needs input-independent queries; use query=static or block_size=null"
                )
        return lines

    @classmethod
    def choose_kernel(cls, model_cfg: Any, device: torch.device) -> tuple[str, str]:
        # the one owner of the rule, dormouse.attnres.choose_kernel, told whether the queries are per token
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
        self.kernel = kernel  # the resolved path ("torch" or "triton"); see dormouse.attnres.choose_kernel
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

    # --- what it learned: the depth-attention map ----------------------------------------------------------

    def read_weights(self, index: int, sources: list[Tensor]) -> Tensor:
        """The depth-attention weights ``alpha_i`` [N, ...] read ``index`` puts on ``sources`` (Eq. 2-3 and the
        softmax: the score of :func:`dormouse.attnres.depth_weights`, with this read's query and gain)."""
        query, gain = self._query_and_gain(index, sources)
        return depth_weights(sources, query, gain=gain, eps=self.eps, form=self.form)

    def _visible(self, read: int) -> int:
        """How many sources read ``read`` sees (each sublayer slot, then each readout point)."""
        seen = read if read < self.n_slots else 2 * (read - self.n_slots + 1)
        return 1 + (math.ceil(seen / self.block_size) if self.block_size else seen)

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """For every read r (each sublayer slot, then each readout point), ``weights[r][i]`` = mean over tokens of
        the depth-attention weight on source i (Eq. 2-4), and ``entropy[r]`` = mean over tokens of
        ``-sum_i alpha_i ln alpha_i`` (nats; ln N is uniform over N sources, 0 is one source). Sources are the
        Eq. 6 sets: Full = embedding, then each sublayer output; Block = b_0 (the embedding), then block sums
        b_1, b_2, ... (a read inside block n sees the partial b_n^{i-1} in column n). Columns a read cannot see
        are NaN, not 0 (0 is a learned value)."""
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
        out: dict[str, float] = {}
        reads, sources = row.get("probe/reads") or [], row.get("probe/sources") or []
        for read, weights, entropy in zip(reads, row.get("probe/weights") or [], row.get("probe/entropy") or []):
            out[f"probe/entropy/{read}"] = float(entropy)
            for source, w in zip(sources, weights):
                if math.isfinite(w):
                    out[f"probe/weights/{read}<-{source}"] = float(w)
        return out

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from dormouse.probe_plots import mean_map

        return mean_map(rows) or {}

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.probe_plots import plot_attnres_map

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


def build_arm(model_cfg: Any, kernel: str = "torch") -> ResidualArm:
    """The arm a model config selects (validation has already refused two switches on).

    ``kernel`` is the read path the arm's :meth:`ResidualArm.choose_kernel` resolved for the device;
    an arm without a fused read ignores it.
    """
    from dormouse.arm_registry import arm_class, model_arm

    return arm_class(model_arm(model_cfg)).from_config(model_cfg, kernel)


def arm_classes() -> dict[str, type[ResidualArm]]:
    """Every arm, by name, in registry order (:func:`dormouse.arm_registry.arm_classes`)."""
    from dormouse.arm_registry import arm_classes as registered

    return registered()
