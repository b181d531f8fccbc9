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


class PreNormSpec(ArmSpec):
    name = "prenorm"


class ReZeroSpec(ArmSpec):
    name = "rezero"
    default = True


class GatedResidualSpec(ArmSpec):
    name = "gr"


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


class AttnResSpec(ArmSpec):
    name = "attnres"
    options = AttnResConfig

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


# The built-in arms' specs by name (dormouse.arms.registry.BUILTIN_ARMS names the same arms).
BUILTIN_SPECS: dict[str, type[ArmSpec]] = {spec.name: spec for spec in
                                           (PreNormSpec, ReZeroSpec, GatedResidualSpec, AttnResSpec)}


def arm_specs() -> dict[str, type[ArmSpec]]:
    """Every arm's spec in registry order: a built-in's from here (its class not needed), another's its class."""
    defined = defined_arm_classes()
    return {name: BUILTIN_SPECS[name] if name in BUILTIN_SPECS else defined[name]
            for name in arm_names() if name in BUILTIN_SPECS or name in defined}
