"""LAuReL, the Learned Augmented Residual Layer (Menghani et al., ICML 2025, arXiv:2411.07501)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, slot_names
from dormouse.arms.specs import LaurelConfig, LaurelSpec, laurel_uses
from dormouse.ops.mup import READOUT, SCALAR, VECTOR

XAVIER_SEED = 0  # A_s's Xavier draw of an arm built alone; in a model, init_random redraws from the run's seed


class Laurel(LaurelSpec, ResidualArm):
    """LAuReL (Menghani et al. 2025), Eq. 5: ``x <- alpha_s f(x) + beta_s (x + B_s A_s x)`` per slot (RW, LR or both).
    §2.1-2.4, §3.3: alpha, beta init 1, B_s init 0, A_s column-orthogonal, so every variant starts as pre-norm."""

    plot_file = "laurel_weights.png"
    mup_roles = {"alpha": SCALAR, "beta": SCALAR, "lr_down_weight": READOUT, "lr_up_weight": VECTOR}
    slot_fields = ("laurel_alpha", "laurel_beta", "laurel_lr_norm")
    compiled_absorb = True  # tensor arithmetic, the slot an index: its own region under train.compile

    @classmethod
    def run_name_stem(cls, model_cfg: Any) -> str:
        """The variant in the name (``laurel_rw_lr``), so the variants' runs are told apart."""
        return f"{cls.name}_{model_cfg.laurel.variant}"

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> Laurel:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.laurel)

    def __init__(self, d_model: int, max_iter: int, cfg: LaurelConfig) -> None:
        super().__init__(d_model, max_iter)
        self.variant, self.rw_norm, self.rank = str(cfg.variant), str(cfg.rw_norm), int(cfg.rank)
        self.rw, self.lr = laurel_uses(self.variant)
        if self.rw:
            # raw alpha, beta start at 1 (pre-norm); the logits of softmax/sigmoid start at 0
            start = 1.0 if self.rw_norm == "none" else 0.0
            self.alpha = nn.Parameter(torch.full((self.n_slots,), start))
            # sigmoid: one parameter per slot, beta = 1 - alpha (§2.1)
            self.beta = nn.Parameter(torch.full((self.n_slots,), start)) if self.rw_norm != "sigmoid" else None
        if self.lr:
            self.a_init = str(cfg.a_init)
            self.lr_down_weight = nn.Parameter(self._a_init(self.a_init))  # A_s [S, r, d]
            self.lr_up_weight = nn.Parameter(torch.zeros(self.n_slots, d_model, self.rank))  # B_s [S, d, r], zero

    @torch.no_grad()
    def init_random(self, generator: torch.Generator) -> None:
        """Xavier's A_s from the run's seed (the orthogonal init draws nothing)."""
        if self.lr and self.a_init == "xavier":
            self.lr_down_weight.copy_(self._a_init("xavier", generator))

    def _a_init(self, how: str, generator: torch.Generator | None = None) -> Tensor:
        """A_s [S, r, d]: §3.3's column-orthogonal init (``1/sqrt(r d)`` where ``i mod r = j``) or Xavier's."""
        r, d = self.rank, self.d_model
        if how == "xavier":
            gen = torch.Generator().manual_seed(XAVIER_SEED) if generator is None else generator
            bound = math.sqrt(6.0 / (r + d))
            return (torch.rand(self.n_slots, r, d, generator=gen) * 2 - 1) * bound
        a = torch.zeros(r, d)
        a[torch.arange(d) % r, torch.arange(d)] = 1.0 / math.sqrt(r * d)
        return a.expand(self.n_slots, r, d).clone()

    def residual_weights(self, slot: int, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """``(alpha_s, beta_s)`` after the normalisation ``model.laurel.rw_norm`` names, computed in ``dtype``."""
        a = self.alpha[slot].to(dtype or self.alpha.dtype)
        if self.rw_norm == "sigmoid":
            return torch.sigmoid(a), torch.sigmoid(-a)  # beta = 1 - alpha, without the cancellation
        b = self.beta[slot].to(a.dtype)
        if self.rw_norm == "softmax":
            both = torch.softmax(torch.stack((a, b)), dim=0)
            return both[0], both[1]
        return a, b

    def low_rank(self, state: Tensor, slot: int) -> Tensor:
        """``B_s A_s x``: down to r, then up to d."""
        down = F.linear(state, self.lr_down_weight[slot].to(state.dtype))
        return F.linear(down, self.lr_up_weight[slot].to(down.dtype))

    def begin(self, embedding: Tensor) -> Tensor:
        return embedding

    def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
        return state

    def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
        carried = state + self.low_rank(state, slot) if self.lr else state
        if self.rw:
            alpha, beta = self.residual_weights(slot)
            new_state = torch.addcmul(beta.to(state.dtype) * carried, alpha.to(output.dtype), output)
        else:
            new_state = carried + output
        self.counters.count_ran(self.name)
        return new_state

    def readout_input(self, state: Tensor, k: int) -> Tensor:
        return state

    @torch.no_grad()
    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """Per slot, from the parameters: ``laurel_alpha``, ``laurel_beta`` and ``laurel_lr_norm`` (||B_s A_s||_F)."""
        out: dict[str, Any] = {}
        if self.rw:
            pairs = [self.residual_weights(s, torch.float64) for s in range(self.n_slots)]
            out["laurel_alpha"] = [float(a) for a, _ in pairs]
            out["laurel_beta"] = [float(b) for _, b in pairs]
        if self.lr:
            product = self.lr_up_weight.double() @ self.lr_down_weight.double()  # [S, d, d]
            out["laurel_lr_norm"] = [float(v) for v in torch.linalg.matrix_norm(product)]
        return out

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        """The mean alpha_s / beta_s (pre-norm sublayers are blind to the state's scale), or of ||B_s A_s|| (LR)."""
        if "laurel_alpha" in fields:
            ratios = [a / b for a, b in zip(fields["laurel_alpha"], fields["laurel_beta"])]
            return "alpha_over_beta", sum(ratios) / len(ratios)
        return "lr_norm", sum(fields["laurel_lr_norm"]) / len(fields["laurel_lr_norm"])

    @classmethod
    def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
        from dormouse.arms.plots import plot_slot_values

        alpha, beta = row.get("probe/laurel_alpha"), row.get("probe/laurel_beta")
        if alpha is not None and beta is not None:
            return plot_slot_values(slot_names(len(alpha) // 2), [a / b for a, b in zip(alpha, beta)], out,
                                    ylabel="alpha_s / beta_s", title="LAuReL alpha_s / beta_s by slot" + label,
                                    reference=1.0)
        if row.get("probe/laurel_lr_norm") is not None:
            norms = row["probe/laurel_lr_norm"]
            return plot_slot_values(slot_names(len(norms) // 2), norms, out, ylabel="||B_s A_s||_F",
                                    title="LAuReL low-rank term by slot" + label, reference=0.0)
        return None
