"""µP, the maximal-update parametrisation (Yang et al. 2021, "Tensor Programs V", Table 3, Adam column), relative to a
base width b (``model.mup_base_width``) at width-multiplier m = d_model / b, so that a learning rate tuned at b
transfers across widths (docs/model.md, "µP"). Every weight has a role: its init std and its Adam learning rate are
multiplied by the role's factors below, and the logits by 1/m. At m = 1 every factor is 1: µP is the standard
parametrisation at its base width."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping

STANDARD, MUP = "standard", "mup"
PARAMETRIZATIONS = (STANDARD, MUP)

# The roles (what a weight's dimensions do as the width grows):
SCALAR = "scalar"  # no width dimension (a per-slot scalar, a gate over a fixed count)
VECTOR = "vector"  # width along one dimension, read elementwise or fed from a fixed fan-in (embedding, gains,
#                    biases, an up-projection from a fixed rank): init and lr unchanged
HIDDEN = "hidden"  # width x width (fan-in grows): init std x m^-1/2, lr x 1/m
READOUT = "readout"  # contracts the width into a fixed size (a query, a map to a fixed count): init std and lr x 1/m
ROLES = (SCALAR, VECTOR, HIDDEN, READOUT)

_INIT = {SCALAR: lambda m: 1.0, VECTOR: lambda m: 1.0, HIDDEN: lambda m: m ** -0.5, READOUT: lambda m: 1.0 / m}
_LR = {SCALAR: lambda m: 1.0, VECTOR: lambda m: 1.0, HIDDEN: lambda m: 1.0 / m, READOUT: lambda m: 1.0 / m}


def width_mult(model_cfg: object) -> float:
    """m = d_model / base width under µP; 1 under the standard parametrisation."""
    if str(getattr(model_cfg, "parametrization", STANDARD)) != MUP:
        return 1.0
    return int(model_cfg.d_model) / int(model_cfg.mup_base_width)  # type: ignore[attr-defined]


def init_scale(role: str, m: float) -> float:
    return _INIT[role](m)


def lr_scale(role: str, m: float) -> float:
    return _LR[role](m)


def attention_scale(model_cfg: object, head_dim: int) -> float | None:
    """The attention logits' scale: µP's 1/d_head, equal to 1/√d_head at the base head dimension (None there, and under
    the standard parametrisation: SDPA's own 1/√d_head)."""
    if str(getattr(model_cfg, "parametrization", STANDARD)) != MUP:
        return None
    base = int(model_cfg.mup_base_head_dim)  # type: ignore[attr-defined]
    return None if head_dim == base else math.sqrt(base) / head_dim


def role_of(name: str, roles: Mapping[str, str]) -> str | None:
    """The role declared for parameter ``name`` (patterns as fnmatch's, ``dwa.*``), or None if none is."""
    for pattern, role in roles.items():
        if fnmatch.fnmatchcase(name, pattern):
            return role
    return None
