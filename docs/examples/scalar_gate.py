"""A plugin arm for dormouse: the scalar gate, ``x <- x + sigmoid(g_s) * f(x)`` (docs/arms.md walks through it).

This file is a whole plugin: importing it defines :class:`ScalarGate`, and defining a
:class:`dormouse.arms.base.ResidualArm` subclass with its own ``name`` registers it. Load it with any of::

    dormouse --plugin docs/examples/scalar_gate.py train model.use_sgate=true
    DORMOUSE_PLUGINS=docs/examples/scalar_gate.py dormouse train model.use_sgate=true
    [project.entry-points."dormouse.arms"] sgate = "my_pkg.scalar_gate"   # an installed package's pyproject

From the class alone dormouse derives the arm's switch ``model.use_sgate``, its option ``model.sgate.init``,
its counter ``sgate=ran/asked`` on the eval line, its ``learned=gate:...`` summary and its plot.

The mechanism: for one sublayer f (which normalises its own input) and the state x at slot s (two slots per
iteration of the loop: attention, then MLP), the update is scaled by a learned scalar in (0, 1)::

    x <- x + sigmoid(g_s) * f(x)        one g_s per slot, g_s = model.sgate.init at the start

It is ReZero (``x <- x + alpha_s f(x)``) with its scale squashed into (0, 1): it can shut a slot, never
reverse or amplify it, and it starts half open (sigmoid(0) = 0.5) where ReZero starts shut.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, slot_names

# |g_s| beyond this starts the gate saturated: sigmoid'(10) ~ 4.5e-5, so g_s would barely learn.
INIT_LIMIT = 10.0


@dataclass
class ScalarGateOptions:
    """The scalar gate's options, composed into the config at ``model.sgate`` (``model.sgate.init=-2``)."""

    init: float = 0.0  # every g_s at the start: the gate starts at sigmoid(init), 0.5 at 0


class ScalarGate(ResidualArm):
    """Scalar gate: ``x <- x + sigmoid(g_s) f(x)``, one scalar g_s per slot, starting at ``model.sgate.init``."""

    name = "sgate"  # the counter, the eval line's arm=, and the switch model.use_sgate
    options = ScalarGateOptions
    plot_file = "sgate_gate.png"  # drawn into the run directory at the end of a run (:meth:`plot`)
    slot_fields = ("gate",)  # probe/gate holds one number per slot (wandb gets probe/gate/<slot>)

    # --- configuration ---------------------------------------------------------------------------------

    @classmethod
    def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
        """``model.sgate.init`` must be a finite number within +-INIT_LIMIT: a gate that starts saturated has
        almost no gradient. Checked for every config (the option is in every config, selected or not), one
        line naming the field, before any work."""
        init = model_cfg.sgate.init
        if math.isfinite(init) and abs(init) <= INIT_LIMIT:
            return []
        return [f"model.sgate.init={init!r} is invalid: must be a finite number between -{INIT_LIMIT:g} and "
                f"{INIT_LIMIT:g} (sigmoid saturates beyond, and g_s would barely learn)"]

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> ScalarGate:
        """The arm for a model config; the scalar gate has no fused read, so ``kernel`` is ``none``."""
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), float(model_cfg.sgate.init))

    def __init__(self, d_model: int, max_iter: int, init: float = 0.0) -> None:
        super().__init__(d_model, max_iter)
        # one g_s per slot (2 per iteration); a deterministic init, so every arm of a seed starts from the same
        # shared weights (this draws nothing from the generator). A 1-d parameter: no weight decay.
        self.g = nn.Parameter(torch.full((self.n_slots,), float(init)))

    # --- the loop: state = begin(e); per slot: state = absorb(state, s, f(sublayer_input(state, s))) ------

    def begin(self, embedding: Tensor) -> Tensor:
        """The state is one tensor, starting at the embedding."""
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        """Each sublayer reads the state itself (it normalises its own input)."""
        return state

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        """``x + sigmoid(g_s) * f(x)``; ``ran`` is counted here, where the aggregation becomes the state."""
        new_state = torch.addcmul(state, torch.sigmoid(self.g[slot]).to(output.dtype), output)
        self.counters.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        """The head reads the state after iteration ``k`` (it applies its own final norm)."""
        return state

    # --- what it learned -------------------------------------------------------------------------------

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``gate[s] = sigmoid(g_s)``: the share of slot s's update that reaches the state. A parameter, so
        no forward is needed and ``traces`` is not read."""
        return {"gate": [float(v) for v in torch.sigmoid(self.g.detach().float()).cpu()]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The eval line's ``learned=gate:<mean over slots of sigmoid(g_s)>``."""
        return "gate", sum(fields["gate"]) / len(fields["gate"])

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        """sigmoid(g_s) per slot as bars. No initial-value line: the row does not hold ``model.sgate.init``."""
        from dormouse.arms.plots import plot_slot_values  # matplotlib: only when a plot is drawn

        gates = row.get("probe/gate")
        if gates is None:
            return None
        return plot_slot_values(slot_names(len(gates) // 2), gates, out, ylabel="sigmoid(g)",
                                title="scalar gate by slot" + label)
