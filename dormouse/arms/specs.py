"""What the config needs of an arm, without torch: its name, whether it is the default, its options dataclass at
``model.<name>`` and their checks. The schema is built from these (:func:`arm_specs`), so composing and validating
a config (``dormouse ab plan``) imports no torch; each built-in arm class derives from its spec here and adds the
nn.Module (:class:`~dormouse.arms.base.ResidualArm`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from dormouse.arms.registry import arm_names, arm_switch, defined_arm_classes


class ArmSpec:
    """An arm's configuration side: what the schema and :func:`~dormouse.config.schema.validate` read."""

    name: ClassVar[str] = ""
    default: ClassVar[bool] = False  # the arm no switch selects (exactly one arm)
    options: ClassVar[type | None] = None  # a dataclass of the arm's options, composed at model.<name>

    @classmethod
    def switch(cls) -> str | None:
        """The ModelConfig field that selects this arm (None for the default arm)."""
        return None if cls.default else arm_switch(cls.name)

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        """Problems with this arm's options, one line each; called for every arm, selected or not."""
        return []

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float | None:
        """The arm's own forward matmul FLOPs per token over ``depth`` iterations read out after ``readouts``
        (:mod:`dormouse.model.flops`); None: no count declared, its work left out and said so."""
        return None


class PreNormSpec(ArmSpec):
    name = "prenorm"

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        return 0.0  # x + f(x): one addition per channel


class ReZeroSpec(ArmSpec):
    name = "rezero"
    default = True

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        return 0.0  # x + alpha_s f(x): a scalar multiply-add per channel


class GatedResidualSpec(ArmSpec):
    name = "gr"

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        """Each of the 2 slots per iteration computes its gate ``W n(x) + b_s``: one d x d product, 2d^2."""
        d = int(model_cfg.d_model)
        return 2 * depth * 2.0 * d * d


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


def sources_seen(pushes: int, block_size: int | None) -> int:
    """The sources a read after ``pushes`` sublayer outputs sees (Eq. 6): the embedding, the completed blocks, and
    the partial block if non-empty; Full AttnRes (``block_size`` None) sees every output."""
    size = block_size or 1
    return 1 + pushes // size + (1 if pushes % size else 0)


class AttnResSpec(ArmSpec):
    name = "attnres"
    options = AttnResConfig

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        """A read over m sources scores each (``q . k_i``, 2d) and mixes them (``sum_i alpha_i v_i``, 2d): 4dm. The
        2·depth sublayer reads see the sources before their slot, each readout those after its iteration; an
        input-dependent query adds ``U_l RMSNorm(v_last)``, 2d^2 per read."""
        d, size = int(model_cfg.d_model), model_cfg.attnres.block_size
        pushes = [*range(2 * depth), *(2 * (k + 1) for k in readouts)]
        per_read_query = 2.0 * d * d if model_cfg.attnres.query == "input" else 0.0
        return sum(4.0 * d * sources_seen(p, size) + per_read_query for p in pushes)

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


INJECTION_STATE_INITS = ("zeros", "embedding")


@dataclass
class InjectionConfig:
    """Stable input injection options (docs/arms.md), at ``model.injection``; read when ``model.use_injection``."""

    state_init: str = "zeros"  # the state before the first injection: "zeros" or "embedding" (the injected e)
    normalize: bool = True  # RMS-normalise the embedding before B (the source's released configs: prelude_norm)
    decay_init: float = 0.2**0.5  # every channel's decay A-bar at init (the source's ssm_decay, sqrt(1/5))


class InjectionSpec(ArmSpec):
    name = "injection"
    options = InjectionConfig

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        """``B-bar e`` is one d x d product per token, made once per forward (e does not change over depth): 2d^2;
        the decay ``A-bar * x`` is elementwise."""
        d = int(model_cfg.d_model)
        return 2.0 * d * d

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        lines: list[str] = []
        o = model_cfg.injection
        if o.state_init not in INJECTION_STATE_INITS:
            lines.append(_bad("model.injection.state_init", o.state_init, "one of " + ", ".join(INJECTION_STATE_INITS)))
        if not (math.isfinite(o.decay_init) and 0.0 < o.decay_init < 1.0):
            lines.append(_bad("model.injection.decay_init", o.decay_init,
                              "must be in (0, 1): the decay contracts the state"))
        return lines


@dataclass
class DeltaAttnResConfig:
    """Delta AttnRes options (docs/arms.md, "Delta AttnRes"), at ``model.delta_attnres``."""

    form: str = "paper"  # the key score, as model.attnres.form: "paper" (q . RMSNorm(v)) or "sqrt_d"
    eps: float = 1e-6  # RMSNorm epsilon of the keys
    gain: bool = True  # learned RMSNorm gain on the keys (initialised to ones)
    readout: str = "stream"  # the head reads the stream x ("stream") or x + its own depth read ("read")
    gate: str = "none"  # "none": u = x + read; "alpha": u = x + a_l read, a_l zero-initialised (pre-norm at init)


class DeltaAttnResSpec(ArmSpec):
    name = "delta_attnres"
    options = DeltaAttnResConfig

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        """AttnResSpec's 4dm per read over m sources: sublayer slots 1 .. 2·depth - 1 (slot 0 reads the stream
        alone) see the embedding and the outputs before them; with readout=read each readout sees those after its
        iteration. Adding the read to x and the scalar gate are not matmuls."""
        d = int(model_cfg.d_model)
        pushes = list(range(1, 2 * depth))
        if model_cfg.delta_attnres.readout == "read":
            pushes += [2 * (k + 1) for k in readouts]
        return sum(4.0 * d * sources_seen(p, None) for p in pushes)

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        lines: list[str] = []
        a = model_cfg.delta_attnres
        if a.form not in ("paper", "sqrt_d"):
            lines.append(_bad("model.delta_attnres.form", a.form, "one of paper, sqrt_d"))
        if not (math.isfinite(a.eps) and a.eps >= 0):
            lines.append(_bad("model.delta_attnres.eps", a.eps, "must be a finite number >= 0"))
        if a.readout not in ("stream", "read"):
            lines.append(_bad("model.delta_attnres.readout", a.readout, "one of stream, read"))
        if a.gate not in ("none", "alpha"):
            lines.append(_bad("model.delta_attnres.gate", a.gate, "one of none, alpha"))
        return lines


LAUREL_VARIANTS = ("rw", "lr", "rw_lr")
LAUREL_RW_NORMS = ("none", "softmax", "sigmoid")
LAUREL_A_INITS = ("orthogonal", "xavier")


@dataclass
class LaurelConfig:
    """LAuReL options (docs/arms.md, "LAuReL"), at ``model.laurel``; read when ``model.use_laurel``."""

    variant: str = "rw_lr"  # "rw" (Eq. 5 without B A), "lr" (Eq. 3), "rw_lr" (Eq. 5): the paper's LLM runs
    rank: int = 16  # r of B_s A_s; the paper's best ResNet ranks are 16-32 (its LLMs: 4 and 64)
    rw_norm: str = "none"  # alpha, beta: "none" (raw, init 1), "softmax" over (a, b), "sigmoid" (alpha, 1 - alpha)
    a_init: str = "orthogonal"  # A_s: "orthogonal" (the paper's LLM init, 1/sqrt(r d) on i mod r = j) or "xavier"


def laurel_uses(variant: str) -> tuple[bool, bool]:
    """``(rw, lr)``: whether a LAuReL variant has the learned residual weights and the low-rank term."""
    return variant in ("rw", "rw_lr"), variant in ("lr", "rw_lr")


class LaurelSpec(ArmSpec):
    name = "laurel"
    options = LaurelConfig

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        """Each of the 2 slots per iteration computes ``B_s (A_s x)``: r x d then d x r, 4 r d (LR variants only)."""
        _, lr = laurel_uses(model_cfg.laurel.variant)
        return 2 * depth * 4.0 * int(model_cfg.d_model) * int(model_cfg.laurel.rank) if lr else 0.0

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        lines: list[str] = []
        o = model_cfg.laurel
        for key, allowed in (("variant", LAUREL_VARIANTS), ("rw_norm", LAUREL_RW_NORMS), ("a_init", LAUREL_A_INITS)):
            if getattr(o, key) not in allowed:
                lines.append(_bad(f"model.laurel.{key}", getattr(o, key), "one of " + ", ".join(allowed)))
        if not 1 <= o.rank <= model_cfg.d_model:
            lines.append(_bad("model.laurel.rank", o.rank, f"must be in 1..model.d_model={model_cfg.d_model}"))
        return lines


@dataclass
class DenseFormerConfig:
    """DenseFormer options (docs/arms.md, "DenseFormer"), at ``model.denseformer``; read with its switch on."""

    dilation: int = 1  # k: DWA after block i averages the X_j with j = i (mod k) (paper §3.2; 1 = every X_j)
    period: int = 1  # p: a DWA after block i only where p divides i, else Y_i = X_i (paper §3.2)


def dwa_sources(block: int, dilation: int) -> list[int]:
    """The X_j a DWA after ``block`` (1-based; X_0 the embedding) averages: j <= block, j = block (mod k)."""
    return [j for j in range(block + 1) if (block - j) % dilation == 0]


def dwa_blocks(n_blocks: int, period: int) -> list[int]:
    """The blocks (1-based) followed by a DWA: every ``period``-th."""
    return [i for i in range(1, n_blocks + 1) if i % period == 0]


class DenseFormerSpec(ArmSpec):
    name = "denseformer"
    options = DenseFormerConfig

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        """A DWA over m sources is one multiply-add per source and channel: 2 d m, after each block that has one."""
        o, d = model_cfg.denseformer, int(model_cfg.d_model)
        return sum(2.0 * d * len(dwa_sources(i, o.dilation)) for i in dwa_blocks(depth, o.period))

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        lines: list[str] = []
        o, n = model_cfg.denseformer, int(model_cfg.max_iter)
        for key in ("dilation", "period"):
            if not 1 <= getattr(o, key) <= max(n, 1):
                lines.append(_bad(f"model.denseformer.{key}", getattr(o, key), f"must be in 1..model.max_iter={n}"))
        if not lines and selected and not any(len(dwa_sources(i, o.dilation)) > 1 for i in dwa_blocks(n, o.period)):
            lines.append(f"model.denseformer.dilation={o.dilation} with model.denseformer.period={o.period} and "
                         f"model.max_iter={n}: no DWA averages more than its own block's output; lower either")
        return lines


@dataclass
class ValueResidualConfig:
    """Value residual options (docs/arms.md, "Value residual"), at ``model.value_residual``."""

    learnable: bool = True  # per-attention-slot lambda_1, lambda_2 learned (modded-nanogpt); false: fixed (ResFormer)
    lambda_init: float = 0.5  # lambda_1 at the start (the weight on V_first); lambda_2 starts at 1 - lambda_init


class ValueResidualSpec(ArmSpec):
    name = "value_residual"
    options = ValueResidualConfig

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        return 0.0  # lambda_1 V_first + lambda_2 V_s: two scalar multiply-adds per value channel, no matmul

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        lines: list[str] = []
        o = model_cfg.value_residual
        if not (math.isfinite(o.lambda_init) and 0.0 <= o.lambda_init <= 1.0):
            lines.append(_bad("model.value_residual.lambda_init", o.lambda_init,
                              "must be a finite number in [0, 1] (the initial weight on V_first; lambda_2 starts at "
                              "1 - lambda_init)"))
        changed = [f"model.value_residual.{key}={getattr(o, key)!r}"
                   for key, default in (("learnable", True), ("lambda_init", 0.5)) if getattr(o, key) != default]
        if changed and not selected:
            lines.append(f"{' and '.join(changed)} set but model.{cls.switch()}=false: set "
                         f"model.{cls.switch()}=true or leave the value residual's options at their defaults")
        return lines


@dataclass
class MHCConfig:
    """Manifold-constrained hyper-connections options (docs/arms.md), at ``model.mhc``; read when ``model.use_mhc``."""

    n_streams: int = 4  # parallel residual streams n (DeepSeek-V4's hc_mult)
    sinkhorn_iters: int = 20  # row/column normalisation pairs, the softmax counting as the first row step
    eps: float = 1e-6  # added to pre, to the softmax and to every Sinkhorn denominator (hc_eps)
    norm_eps: float = 1e-6  # the RMSNorm epsilon of the flattened streams (rms_norm_eps)


class MHCSpec(ArmSpec):
    name = "mhc"
    options = MHCConfig

    @classmethod
    def flops_per_token(cls, model_cfg: Any, depth: int, readouts: tuple[int, ...]) -> float:
        """Per slot the projection ``n d -> n^2 + 2n`` (2nd(n^2 + 2n)), the collapse ``sum_k pre_k X_k`` (2nd) and the
        mix ``comb^T X`` (2n^2 d); per readout the head's ``n d -> n`` (2n^2 d) and its collapse (2nd). Elementwise
        work is left out, as for the other arms: ``post (x) F`` (nd multiply-adds, ReZero's ``alpha f``), the
        norms, sigmoids and the Sinkhorn iterations (about 4 n^2 sinkhorn_iters per slot)."""
        n, d = int(model_cfg.mhc.n_streams), int(model_cfg.d_model)
        per_slot = 2.0 * n * d * (n * n + 2 * n) + 2.0 * n * d + 2.0 * n * n * d
        per_readout = 2.0 * n * n * d + 2.0 * n * d
        return 2 * depth * per_slot + len(readouts) * per_readout

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        m = model_cfg.mhc
        lines: list[str] = []
        if isinstance(m.n_streams, bool) or not isinstance(m.n_streams, int) or m.n_streams < 1:
            lines.append(_bad("model.mhc.n_streams", m.n_streams, "must be an int >= 1"))
        if isinstance(m.sinkhorn_iters, bool) or not isinstance(m.sinkhorn_iters, int) or m.sinkhorn_iters < 1:
            lines.append(_bad("model.mhc.sinkhorn_iters", m.sinkhorn_iters,
                              "must be an int >= 1 (the softmax and one column normalisation)"))
        for key in ("eps", "norm_eps"):
            value = getattr(m, key)
            if not (math.isfinite(value) and value >= 0):
                lines.append(_bad(f"model.mhc.{key}", value, "must be a finite number >= 0"))
        return lines


# The built-in arms' specs by name (dormouse.arms.registry.BUILTIN_ARMS names the same arms).
BUILTIN_SPECS: dict[str, type[ArmSpec]] = {spec.name: spec for spec in
                                           (PreNormSpec, ReZeroSpec, GatedResidualSpec, ValueResidualSpec, LaurelSpec,
                                            DenseFormerSpec, InjectionSpec, AttnResSpec, DeltaAttnResSpec, MHCSpec)}


def arm_specs() -> dict[str, type[ArmSpec]]:
    """Every arm's spec in registry order: a built-in's from here (its class not needed), another's its class."""
    defined = defined_arm_classes()
    return {name: BUILTIN_SPECS[name] if name in BUILTIN_SPECS else defined[name]
            for name in arm_names() if name in BUILTIN_SPECS or name in defined}
