"""Residual arms: how a sublayer's output is folded into the state (docs/model.md, "The arms").

The loop driver (:mod:`dormouse.model.looped`) never branches on the arm::

    state = arm.begin(embedding)
    for each iteration k, for each sublayer slot s (2 per iteration: attention, MLP):
        out = sublayer(arm.sublayer_input(state, s))       # attention: q, k, v through arm.mix_attention
        state = arm.absorb(state, s, out)
    logits_k = head(norm(arm.readout_input(state, k)))

An arm is one class, registered by being defined: its per-slot parameters and init, options at
``model.<name>`` and their checks, read path, probes, plot and description; its switch ``model.use_<name>``
follows from the name. It counts ``ran`` into its own :class:`~dormouse.arms.probes.ProbeCounters`.
"""


from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from dormouse.arms.probes import LoopTrace, ProbeCounters, slot_names
from dormouse.arms.registry import register_arm
from dormouse.arms.specs import ArmSpec

State = Any

class ResidualArm(ArmSpec, nn.Module):
    """The residual-arm interface; a subclass with its own ``name`` (its counter's; in its body or from its
    :class:`~dormouse.arms.specs.ArmSpec`) registers when defined. Its name, default flag and options are its spec's.
    """

    plot_file: ClassVar[str | None] = None  # the run's plot of what the arm learned (dormouse.arms.plots)
    slot_fields: ClassVar[tuple[str, ...]] = ()  # probe fields holding one number per slot
    list_fields: ClassVar[tuple[str, ...] | None] = None  # probe lists averaged over seeds (None: slot_fields)
    # µP (model.parametrization=mup): each parameter's role by name pattern (dormouse/ops/mup.py: its lr factor);
    # under µP a parameter without one is refused. The arm's own inits stay its paper's.
    mup_roles: ClassVar[dict[str, str]] = {}
    # train.compile (regional scope, dormouse.model.looped.RegionCompiled) compiles this arm's absorb as its own
    # region: True only for an absorb that is tensor arithmetic whose slot is no more than an index (a handful of
    # graphs whatever the depth); an arm whose state is a Python structure growing per slot (AttnRes's source
    # lists) would be one graph per slot, so the default is to run it eagerly between the regions
    compiled_absorb: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._names_itself():
            register_arm(cls)

    @classmethod
    def _names_itself(cls) -> bool:
        """A name of its own: set in its body, or taken from its spec (a built-in's), not from an arm it extends."""
        if "name" in vars(cls):
            return bool(cls.name)
        arms_above = [base for base in cls.__mro__[1:] if issubclass(base, ResidualArm)]
        return bool(cls.name) and all(base.name != cls.name for base in arms_above)

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_iter = max_iter
        self.n_slots = 2 * max_iter
        # this arm's (so its model's) ran/asked counts: never shared, so two models count apart
        self.counters = ProbeCounters()

    # --- configuration -----------------------------------------------------------------------------------

    @classmethod
    def describe(cls) -> str:
        """One line for reports: the first line of the class docstring (the mechanism and its equation)."""
        return (cls.__doc__ or cls.name).strip().splitlines()[0]

    @classmethod
    def run_name_stem(cls, model_cfg: Any) -> str:
        """The stem of a default run name: the arm's name, plus what tells its variants apart."""
        return cls.name

    @classmethod
    def choose_kernel(cls, model_cfg: Any, device: torch.device) -> tuple[str, str]:
        """The read path on ``device`` and why (``"none"`` without a fused read); RuntimeError for an impossible
        ``model.kernel``."""
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

    # --- the attention seam (docs/arms.md, "The attention seam") -------------------------------------------

    def mix_attention(self, state: State, slot: int, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The attention slot ``slot``'s q, k, v [batch, heads, seq, head_dim] (q, k after RoPE) as SDPA reads them."""
        return q, k, v

    @classmethod
    def mixes_attention(cls) -> bool:
        """Whether the arm overrides :meth:`mix_attention`; the driver hands the seam only to an arm that does."""
        return cls.mix_attention is not ResidualArm.mix_attention

    def init_random(self, generator: torch.Generator) -> None:
        """Draw the arm's random parameters from the run's seeded ``generator`` (the model calls it); most arms
        start deterministic and draw nothing."""

    def no_decay_names(self) -> set[str]:
        """Parameter names (relative to the arm) excluded from weight decay: scalars, biases, queries, gains."""
        return {name for name, p in self.named_parameters() if p.ndim < 2 or not name.endswith("weight")}

    # --- what the arm learned ----------------------------------------------------------------------------

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """The probe fields (no ``probe/`` prefix) averaged over the eval set; one :class:`LoopTrace` per batch."""
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
        """The arm's probe fields of ``rows`` (its seeds) averaged, lists elementwise, over the rows having them."""
        import numpy as np

        out: dict[str, Any] = {}
        for key in (f"probe/{f}" for f in (cls.slot_fields if cls.list_fields is None else cls.list_fields)):
            values = [r[key] for r in rows if r.get(key) is not None]
            if values and all(len(v) == len(values[0]) for v in values):
                out[key] = np.mean(np.array(values, dtype=float), axis=0).tolist()
        return out

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        """Draw the arm's plot of ``row``'s probe fields to ``out`` (None when the row has none of them)."""
        return None
