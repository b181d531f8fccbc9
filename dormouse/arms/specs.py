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
                                           (PreNormSpec, ReZeroSpec, GatedResidualSpec, AttnResSpec,
                                                            MHCSpec)}


def arm_specs() -> dict[str, type[ArmSpec]]:
    """Every arm's spec in registry order: a built-in's from here (its class not needed), another's its class."""
    defined = defined_arm_classes()
    return {name: BUILTIN_SPECS[name] if name in BUILTIN_SPECS else defined[name]
            for name in arm_names() if name in BUILTIN_SPECS or name in defined}
