"""Residual arms: how a sublayer's output is folded into the state (docs/model.md, "The arms").

The interface; one module per arm beside it; the loop driver (:mod:`dormouse.model.looped`) never branches on the arm::

    state = arm.begin(embedding)
    for each iteration k, for each sublayer slot s (2 per iteration: attention, MLP):
        out = sublayer(arm.sublayer_input(state, s))
        state = arm.absorb(state, s, out)
    logits_k = head(norm(arm.readout_input(state, k)))

An arm owns everything about itself, so adding one is one class here (defining it registers it,
:mod:`dormouse.arms.registry`): its parameters and their init, its no-decay set, its options
(``options``, at ``model.<name>``) and their checks (:meth:`ResidualArm.config_problems`), its read path
(:meth:`ResidualArm.choose_kernel`), its learned-value probes and their one-number summary
(:meth:`ResidualArm.learned`, :meth:`ResidualArm.summarize`), its per-run plot and its seed average
(:meth:`ResidualArm.plot`, :meth:`ResidualArm.mean_over_seeds`), and its one-line description for reports
(:meth:`ResidualArm.describe`). Its switch ``model.use_<name>`` is derived from the name.

Every arm parameter is per *slot* (one per sublayer per iteration, plus one per readout for AttnRes): the
block's weights are shared across iterations, but each unrolled depth has its own arm parameters.
Each arm counts ``ran`` into its own counters (``self.counters``, a :class:`dormouse.arms.probes.ProbeCounters`
built with the arm, so each model has its own) at the point where its aggregation becomes the state; the
model's loop driver counts ``asked`` into the same object (``model.counters``).
"""


from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from dormouse.arms.probes import LoopTrace, ProbeCounters, slot_names
from dormouse.arms.registry import arm_switch, register_arm

State = Any

class ResidualArm(nn.Module):
    """The residual-arm interface. ``name`` is the counter and eval-line name; a subclass that sets its own
    ``name`` is registered when it is defined (:func:`dormouse.arms.registry.arm_classes`)."""

    name: ClassVar[str] = ""
    default: ClassVar[bool] = False  # the arm no switch selects (exactly one arm)
    options: ClassVar[type | None] = None  # a dataclass of the arm's options, composed at model.<name>
    plot_file: ClassVar[str | None] = None  # the run's plot of what the arm learned (dormouse.arms.plots)
    slot_fields: ClassVar[tuple[str, ...]] = ()  # probe fields holding one number per slot
    # train.compile (regional scope, dormouse.model.looped.RegionCompiled) compiles this arm's absorb as its own
    # region: True only for an absorb that is tensor arithmetic whose slot is no more than an index (a handful of
    # graphs whatever the depth); an arm whose state is a Python structure growing per slot (AttnRes's source
    # lists) would be one graph per slot, so the default is to run it eagerly between the regions
    compiled_absorb: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            register_arm(cls)

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_iter = max_iter
        self.n_slots = 2 * max_iter
        # this arm's (so its model's) ran/asked counts: never shared, so two models count apart
        self.counters = ProbeCounters()

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
    def run_name_stem(cls, model_cfg: Any) -> str:
        """How a run of this arm is named when ``run.name`` is not given (``<stem>-<start time>``): the arm's
        name, plus whatever tells two of its variants apart."""
        return cls.name

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
