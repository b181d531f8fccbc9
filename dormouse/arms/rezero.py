"""ReZero (Bachlechner et al. 2020): ``x <- x + alpha * f(x)``, one alpha per slot, initialised to 0."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, slot_names
from dormouse.arms.specs import ReZeroSpec
from dormouse.ops.mup import SCALAR


class ReZero(ReZeroSpec, ResidualArm):
    """ReZero (Bachlechner et al. 2020): ``x <- x + alpha_s f(x)``, one scalar alpha_s per slot, init 0."""

    plot_file = "rezero_alpha.png"
    mup_roles = {"alpha": SCALAR}
    slot_fields = ("alpha",)
    compiled_absorb = True  # tensor arithmetic, the slot an index: its own region under train.compile

    def __init__(self, d_model: int, max_iter: int) -> None:
        super().__init__(d_model, max_iter)
        self.alpha = nn.Parameter(torch.zeros(self.n_slots))

    def begin(self, embedding: Tensor) -> Tensor:
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        return state

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        new_state = torch.addcmul(state, self.alpha[slot].to(output.dtype), output)  # x + alpha_s f(x), one pass
        self.counters.count_ran(self.name)
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
        """alpha averaged as ``|alpha|`` (with its sd over seeds): negating W_o and the alphas computes the same
        function."""
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
        from dormouse.arms.plots import plot_slot_values, spread_label

        if row.get("probe/alpha") is not None:
            return plot_slot_values(slot_names(len(row["probe/alpha"]) // 2), row["probe/alpha"], out,
                                    ylabel="alpha", title="ReZero alpha by slot" + label, reference=0.0)
        if row.get("probe/alpha_abs") is not None:  # several seeds: see mean_over_seeds
            spread = row.get("probe/alpha_abs_sd")
            return plot_slot_values(slot_names(len(row["probe/alpha_abs"]) // 2), row["probe/alpha_abs"], out,
                                    ylabel=spread_label("|alpha|", spread, "seeds"),
                                    title="ReZero |alpha| by slot" + label, spread=spread, reference=0.0)
        return None
