"""The looped byte-level LM (docs/model.md): byte embedding -> one shared pre-norm block (RoPE attention, SwiGLU)
run ``depth`` times -> a readout per iteration. How a sublayer's output enters the state is the residual
arm's (:mod:`dormouse.arms`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from dormouse.arms import builtin  # noqa: F401  (the arm classes build_arm builds)
from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, ProbeCounters
from dormouse.arms.registry import build_arm
from dormouse.errors import StartRefused
from dormouse.model.shape import VOCAB, swiglu_hidden
from dormouse.ops import mup
from dormouse.ops.norm import RMSNorm


def rope_tables(seq_len: int, head_dim: int, base: float, device: torch.device) -> tuple[Tensor, Tensor]:
    """cos/sin tables of rotary position embeddings (Su et al. 2021), shape [seq_len, head_dim/2]."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def _rotate_into(x: Tensor, cos: Tensor, sin: Tensor, out: Tensor, sign: float = 1.0) -> None:
    """Write x's halves rotated by the tables' angles into ``out`` (``sign = -1`` the other way), rounded once."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    out1, out2 = out[..., :half], out[..., half:]
    if out.dtype == cos.dtype and not torch.compiler.is_compiling():
        torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=-sign)
        torch.mul(x2, cos, out=out2).addcmul_(x1, sin, value=sign)
    else:  # bf16 q/k under autocast: the maths in float32, then one rounding; and what Dynamo traces (it
        # refuses out= views, and fuses this form anyway)
        out1.copy_(torch.addcmul(x1 * cos, x2, sin, value=-sign))
        out2.copy_(torch.addcmul(x2 * cos, x1, sin, value=sign))


class _RopeQKV(torch.autograd.Function):
    """q, k, v from the fused projection ``[B, T, 3, H, hd]``, q and k rotated by RoPE (Su et al. 2021, halves layout).
    Returns ``(qk [B, T, 2, H, hd], v)``; the backward writes one ``[B, T, 3, H, hd]`` gradient (no concatenation)."""

    @staticmethod
    def forward(ctx: Any, qkv: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(cos, sin)
        qk = qkv.new_empty((*qkv.shape[:2], 2, *qkv.shape[3:]))
        _rotate_into(qkv[:, :, :2], cos, sin, qk)
        # v is a copy, not a view of the input: a Function's output that views its input cannot be modified in
        # place downstream; returning the view was measured no faster (bench_commits.py --base 4f1381a)
        return qk, qkv[:, :, 2].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_qk: Tensor, g_v: Tensor) -> tuple[Tensor | None, ...]:
        # an output the loss does not use arrives as zeros (autograd materialises them), never as None
        cos, sin = ctx.saved_tensors
        grad = g_qk.new_empty((*g_qk.shape[:2], 3, *g_qk.shape[3:]))
        _rotate_into(g_qk, cos, sin, grad[:, :, :2], sign=-1.0)
        grad[:, :, 2].copy_(g_v)
        return grad, None, None


def rope_qkv(qkv: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """:class:`_RopeQKV`: ``qkv`` [B, T, 3, H, hd] -> rotated ``qk`` [B, T, 2, H, hd] and ``v`` [B, T, H, hd]."""
    return _RopeQKV.apply(qkv, cos, sin)


# The attention seam as the driver hands it to the attention sublayer: q, k, v -> q, k, v (ResidualArm.mix_attention
# with the state and slot bound)
AttentionMix = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]

ARM_SEED_OFFSET = 2**32  # the arm's stream is seed + this: no run's shared stream is another's arm stream

# RoPE tables are built once, for this many positions, and sliced per forward; a longer sequence builds its
# own tables on the fly (same values, more work).
ROPE_CACHE_LEN = 2048


class CausalSelfAttention(nn.Module):
    """Pre-norm causal self-attention with RoPE: ``f(x) = W_o SDPA(RoPE(W_q n(x)), RoPE(W_k n(x)), W_v n(x))``."""

    def __init__(self, d_model: int, n_heads: int, rope_base: float, scale: float | None = None) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.rope_base = rope_base
        self.scale = scale  # the logits' scale; None: SDPA's 1/sqrt(head_dim) (µP's differs: dormouse/ops/mup.py)
        self.norm = RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        cos, sin = rope_tables(ROPE_CACHE_LEN, self.head_dim, rope_base, torch.device("cpu"))
        # buffers: they follow .to(device); not persistent: they are a function of the config, not state
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v [batch, heads, seq, head_dim] of ``n(x)``: q and k rotated by RoPE, v not (SDPA's layout)."""
        batch, seq, d = x.shape
        qkv = self.qkv(self.norm(x)).view(batch, seq, 3, self.n_heads, self.head_dim)
        if seq <= self.rope_cos.shape[0]:
            cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        else:
            cos, sin = rope_tables(seq, self.head_dim, self.rope_base, x.device)
        # q and k rotated in one pass: [batch, seq, 2, heads, head_dim/2] halves against [seq, 1, 1, head_dim/2]
        qk, v = rope_qkv(qkv, cos[:, None, None, :], sin[:, None, None, :])
        q, k = (t.transpose(1, 2) for t in qk.unbind(2))
        return q, k, v.transpose(1, 2)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Causal SDPA of q, k, v [batch, heads, seq, head_dim], heads concatenated, then ``W_o``: [batch, seq, d]."""
        batch, heads, seq, head_dim = q.shape
        if self.scale is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, heads * head_dim))

    def forward(self, x: Tensor, mix: AttentionMix | None = None) -> Tensor:
        """``mix``: the arm's attention seam (``ResidualArm.mix_attention``), between the projections and SDPA."""
        q, k, v = self.project(x)
        if mix is not None:
            q, k, v = mix(q, k, v)
        return self.attend(q, k, v)


class SwiGLU(nn.Module):
    """Pre-norm SwiGLU MLP (Shazeer 2020): ``f(x) = W_down (silu(W_gate n(x)) * W_up n(x))``."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.norm = RMSNorm(d_model)
        self.gate_up = nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(_SwiGLUGate.apply(self.gate_up(self.norm(x))))


class _SwiGLUGate(torch.autograd.Function):
    """SwiGLU gate (Shazeer 2020): ``silu(a) * b`` of the last dim's halves, backward into one tensor."""

    @staticmethod
    def forward(ctx: Any, h: Tensor) -> Tensor:
        a, b = h.chunk(2, dim=-1)
        silu_a = F.silu(a)
        ctx.save_for_backward(h, silu_a)
        return silu_a * b

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Tensor) -> Tensor:
        h, silu_a = ctx.saved_tensors
        a, b = h.chunk(2, dim=-1)
        if torch.compiler.is_compiling():  # Dynamo refuses out= views; the compiler fuses the concatenation
            return torch.cat((torch.ops.aten.silu_backward(g * b, a), g * silu_a), dim=-1)
        grad = torch.empty_like(h)
        grad_a, grad_b = grad.chunk(2, dim=-1)
        torch.ops.aten.silu_backward.grad_input(g * b, a, grad_input=grad_a)
        torch.mul(g, silu_a, out=grad_b)
        return grad


class LoopedByteLM(nn.Module):
    """Embedding -> shared block x depth (arm residuals) -> readouts [batch, seq, 256], all or last."""

    def __init__(self, cfg: Any, *, seed: int = 0, kernel: str = "torch") -> None:
        super().__init__()
        self.d_model = int(cfg.d_model)
        self.max_iter = int(cfg.max_iter)
        self.width_mult = mup.width_mult(cfg)  # µP's m = d_model / base width; 1 under the standard parametrisation
        self.embed = nn.Embedding(VOCAB, self.d_model)
        self.attn = CausalSelfAttention(self.d_model, int(cfg.n_heads), float(cfg.rope_base),
                                        mup.attention_scale(cfg, self.d_model // int(cfg.n_heads)))
        self.mlp = SwiGLU(self.d_model, swiglu_hidden(self.d_model, cfg.mlp_hidden))
        self.final_norm = RMSNorm(self.d_model)
        self.head = None if cfg.tie_head else nn.Linear(self.d_model, VOCAB, bias=False)
        self.arm: ResidualArm = build_arm(cfg, kernel)
        # the sublayers in the order the loop calls them (a list, so a test can plant its own)
        self.sublayers: list[nn.Module] = [self.attn, self.mlp]
        self.init_weights(seed)

    @property
    def counters(self) -> ProbeCounters:
        """This model's probe counters (its arm's): the one place every count is read or reset."""
        return self.arm.counters

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """The shared weights from one RNG stream keyed on ``seed``, equal for every arm."""
        shared = torch.Generator().manual_seed(seed)
        for name, module in self.named_modules():
            if name.startswith("arm"):
                continue
            if isinstance(module, nn.Linear):
                std = 0.02
                if module is self.attn.proj or module is self.mlp.down:
                    std = 0.02 / math.sqrt(2 * self.max_iter)  # GPT-2's residual-projection scaling
                if self.width_mult != 1.0 and module is not self.head:  # µP's hidden weights: std x m^-1/2
                    std *= mup.init_scale(mup.HIDDEN, self.width_mult)
                module.weight.copy_(torch.randn(module.weight.shape, generator=shared) * std)
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=shared) * 0.02)
        # the arm's random draws from a stream of their own, keyed on the seed too: replicates vary them, and
        # the shared weights stay every arm's
        self.arm.init_random(torch.Generator().manual_seed(seed + ARM_SEED_OFFSET))

    def compile_whole(self, backend: str = "inductor", mode: str | None = None) -> nn.Module:
        """``train.compile_scope=whole``: the forward as one ``fullgraph`` graph per depth and mode."""
        self.counters.sync()  # every registered arm has its counter before the graph is traced
        return torch.compile(self, fullgraph=True, backend=backend, mode=mode)

    def compile_regions(self, backend: str = "inductor", mode: str | None = None) -> nn.Module:
        """``train.compile_scope=regional``: each sublayer, the final norm and (where the arm allows) the absorb
        compiled once and reused by every iteration, so compile time does not grow with ``model.max_iter``. The slot is
        a symbol, not a constant (one graph per slot otherwise); this module stays eager."""
        return RegionCompiled(self, backend=backend, mode=mode)

    def readout(self, x: Tensor, final_norm: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        x = (self.final_norm if final_norm is None else final_norm)(x)
        weight = self.embed.weight if self.head is None else self.head.weight
        if self.width_mult != 1.0:  # µP's output multiplier 1/m (the readout weight stays a vector-like one)
            x = x / self.width_mult
        return F.linear(x, weight.to(x.dtype))

    def eager_regions(self) -> LoopRegions:
        """The loop's repeated work as this module's own (eager) modules and its arm's own absorb."""
        return LoopRegions(tuple(self.sublayers), self.final_norm, self.arm.absorb)

    def forward(self, idx: Tensor, depth: int | None = None, readouts: str = "all",
                trace: LoopTrace | None = None, regions: LoopRegions | None = None) -> list[Tensor]:
        """The loop driver. ``trace`` receives the embedding and every sublayer's input and output (the learned-value
        probes); ``regions`` runs sublayers, final norm and absorb (:meth:`compile_regions`)."""
        depth = self.max_iter if depth is None else int(depth)
        if not 1 <= depth <= self.max_iter:
            raise ValueError(f"depth={depth} is outside 1..model.max_iter={self.max_iter}")
        regions = self.eager_regions() if regions is None else regions
        embedding = self.embed(idx)
        state = self.arm.begin(embedding)
        if trace is not None:
            trace.embedding = embedding
        logits: list[Tensor] = []
        mixes = self.arm.mixes_attention()  # an arm without the seam is handed nothing: today's attention
        for k in range(depth):
            for j, sublayer in enumerate(regions.sublayers):
                slot = 2 * k + j
                h = self.arm.sublayer_input(state, slot)
                if mixes and j == 0:  # the attention slot: the arm may mix its q, k, v
                    out = sublayer(h, mix=functools.partial(self.arm.mix_attention, state, slot))
                else:
                    out = sublayer(h)
                self.counters.count_asked(self.arm.name)
                if trace is not None:
                    trace.inputs.append(h)
                    trace.outputs.append(out)
                state = regions.absorb(state, slot, out)
            if readouts == "all" or k == depth - 1:
                logits.append(self.readout(self.arm.readout_input(state, k), regions.final_norm))
        return logits

    def param_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """AdamW groups: decay the matrices; no decay on gains, biases, arm scalars and queries. Under µP each group
        also holds one ``lr_scale``, its weights' role's (dormouse/ops/mup.py); the loop multiplies the rate by it."""
        arm_no_decay = {f"arm.{n}" for n in self.arm.no_decay_names()}
        groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
        for name, p in self.named_parameters():
            decay = not (p.ndim < 2 or name in arm_no_decay)
            scale = mup.lr_scale(self._mup_role(name), self.width_mult) if self.width_mult != 1.0 else 1.0
            groups.setdefault((decay, scale), []).append(p)
        if self.width_mult == 1.0:  # the standard parametrisation's two groups, in their order
            return [{"params": groups.get((True, 1.0), []), "weight_decay": weight_decay},
                    {"params": groups.get((False, 1.0), []), "weight_decay": 0.0}]
        return [{"params": ps, "weight_decay": weight_decay if decay else 0.0, "lr_scale": scale}
                for (decay, scale), ps in sorted(groups.items(), key=lambda kv: (not kv[0][0], kv[0][1]))]

    def _mup_role(self, name: str) -> str:
        """A weight's µP role: the block's by kind, the arm's as it declares them (an undeclared one is refused)."""
        if name.startswith("arm."):
            role = mup.role_of(name[len("arm."):], self.arm.mup_roles)
            if role is None:
                raise StartRefused(f"model.parametrization=mup: arm {self.arm.name!r} declares no µP role for its "
                                 f"parameter {name[len('arm.'):]!r}; add it to the arm's mup_roles "
                                 f"({', '.join(mup.ROLES)}; dormouse/ops/mup.py)")
            return role
        hidden = name.startswith(("attn.qkv", "attn.proj", "mlp.gate_up", "mlp.down"))
        return mup.HIDDEN if hidden else mup.VECTOR  # the embedding, the norms' gains, an untied head

    def param_counts(self) -> dict[str, int]:
        arm = sum(p.numel() for p in self.arm.parameters())
        total = sum(p.numel() for p in self.parameters())
        return {"params": total, "arm_params": arm}


@dataclass(frozen=True)
class LoopRegions:
    """What the loop calls for repeated work: sublayers, the readouts' final norm, the arm's absorb."""

    sublayers: tuple[Callable[[Tensor], Tensor], ...]
    final_norm: Callable[[Tensor], Tensor]
    absorb: Callable[[Any, int, Tensor], Any]


class RegionCompiled(nn.Module):
    """A :class:`LoopedByteLM` with compiled regions, its one child, so its state dict is under ``model.``."""

    def __init__(self, model: LoopedByteLM, *, backend: str = "inductor", mode: str | None = None) -> None:
        super().__init__()
        self.model = model
        compiled = {"fullgraph": True, "dynamic": False, "backend": backend, "mode": mode}
        # torch.compile of a module wraps it (an OptimizedModule sharing its parameters); the model keeps its own
        # eager modules, so evaluation, sampling and the probes never trace or recompile anything
        sublayers = tuple(torch.compile(m, **compiled) for m in model.sublayers)
        if model.arm.mixes_attention():
            # the seam is the arm's Python (its state, its slot): attention compiles as two regions around it,
            # the projections and SDPA + W_o, each once for every slot; the arm's mix runs eagerly between them
            sublayers = (_SeamedAttention(*(torch.compile(f, **compiled) for f in (model.attn.project,
                                                                                   model.attn.attend))),
                         *sublayers[1:])
        absorb = model.arm.absorb
        if model.arm.compiled_absorb:
            # the slot is an int argument: Dynamo's automatic dynamic turns it into a symbol at its second value
            # (dynamic=None), so the whole loop is 1-3 graphs (one per branch the arm takes on it), not one per slot
            model.counters.sync()  # the arm's counter exists before the region that adds to it is traced
            absorb = torch.compile(absorb, fullgraph=True, dynamic=None, backend=backend, mode=mode)
        self.regions = LoopRegions(sublayers, torch.compile(model.final_norm, **compiled), absorb)

    def forward(self, idx: Tensor, depth: int | None = None, readouts: str = "all",
                trace: LoopTrace | None = None) -> list[Tensor]:
        return self.model(idx, depth, readouts, trace, regions=self.regions)


class _SeamedAttention:
    """Attention as two compiled regions with the arm's seam between them (``CausalSelfAttention.forward``, split)."""

    def __init__(self, project: Callable[..., tuple[Tensor, Tensor, Tensor]], attend: Callable[..., Tensor]) -> None:
        self.project, self.attend = project, attend

    def __call__(self, x: Tensor, mix: AttentionMix | None = None) -> Tensor:
        qkv = self.project(x)
        return self.attend(*(qkv if mix is None else mix(*qkv)))
