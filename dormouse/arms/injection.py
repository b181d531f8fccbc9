"""Stable input injection for looped models (Parcae, arXiv:2604.12946): a contracting re-injection of the input."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace
from dormouse.arms.specs import InjectionConfig, InjectionSpec
from dormouse.ops.mup import HIDDEN, VECTOR
from dormouse.ops.norm import rms_norm

INJECTION_EPS = 1e-5  # the source's norm_eps, for the RMS norm of e


@dataclass
class _InjectionState:
    """The loop state: x, plus what every iteration re-injects (``A-bar`` [d] and ``B-bar e`` [..., d])."""

    x: Tensor
    decay: Tensor
    inject: Tensor


class Injection(InjectionSpec, ResidualArm):
    """Stable input injection (Parcae): ``x <- A * x + Delta B e`` before each iteration, ``A = exp(-exp(delta + a))``.

    Per channel a log-step delta (``Delta = exp(delta)``) and a log-decay a, so 0 < A-bar < 1 whatever they learn;
    B is d x d, identity at init; inside an iteration ``x <- x + f(x)``. Source: Parcae's DiagonalInjection
    (sandyresearch/parcae, ``parcae_lm/modules/injection.py``, applied at the start of each recurrence).
    """

    mup_roles = {"log_step": VECTOR, "log_decay": VECTOR, "B": HIDDEN}

    @classmethod
    def from_config(cls, model_cfg: Any, kernel: str) -> Injection:
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), model_cfg.injection)

    def __init__(self, d_model: int, max_iter: int, cfg: InjectionConfig | None = None) -> None:
        super().__init__(d_model, max_iter)
        cfg = InjectionConfig() if cfg is None else cfg
        self.state_init = str(cfg.state_init)
        self.normalize = bool(cfg.normalize)
        # the source's init: A_log = 0 and Delta = -log(decay_init), so A-bar = decay_init and B-bar = Delta I
        self.log_step = nn.Parameter(torch.full((d_model,), math.log(-math.log(float(cfg.decay_init)))))
        self.log_decay = nn.Parameter(torch.zeros(d_model))
        self.B = nn.Parameter(torch.eye(d_model))

    def no_decay_names(self) -> set[str]:
        """The source exempts all three from weight decay (decay would pull B to 0, not to its identity init)."""
        return {"log_step", "log_decay", "B"}

    def decay(self) -> Tensor:
        """``A-bar = exp(-exp(delta + a))`` per channel, in (0, 1)."""
        return torch.exp(-torch.exp(self.log_step + self.log_decay))

    def injected_input(self, embedding: Tensor) -> Tensor:
        """e: the embedding, RMS-normalised (no gain: B absorbs one) when ``normalize``."""
        return rms_norm(embedding, eps=INJECTION_EPS) if self.normalize else embedding

    def injected(self, e: Tensor) -> Tensor:
        """``B-bar e = exp(delta) * (B e)`` in e's dtype: outside autocast, as the state it enters."""
        with torch.autocast(device_type=e.device.type, enabled=False):
            return torch.exp(self.log_step).to(e.dtype) * (e @ self.B.to(e.dtype).T)

    def begin(self, embedding: Tensor) -> _InjectionState:
        e = self.injected_input(embedding)
        # e does not change over depth: B-bar e is made once per forward and re-injected at every iteration
        x = torch.zeros_like(embedding) if self.state_init == "zeros" else e
        return _InjectionState(x, self.decay().to(embedding.dtype), self.injected(e))

    def sublayer_input(self, state: _InjectionState, slot: int) -> Tensor:
        if slot % 2 == 0:  # the attention slot opens an iteration: the injection comes first
            state.x = torch.addcmul(state.inject, state.decay, state.x)
        return state.x

    def absorb(self, state: _InjectionState, slot: int, output: Tensor) -> _InjectionState:
        # every slot: the plain pre-norm residual; ran counts here, once per slot, as the driver's asked does
        state.x = state.x + output
        self.counters.count_ran(self.name)
        return state

    def readout_input(self, state: _InjectionState, k: int) -> Tensor:
        return state.x

    def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
        """``decay_mean/min/max``: A-bar over channels; ``inject_ratio[k]``: mean ``||B-bar e|| / ||x||`` at iteration
        k, x the state the attention slot reads (after the injection)."""
        ratio_sum = torch.zeros(self.max_iter, dtype=torch.float64)
        tokens = 0
        for trace in traces:
            assert trace.embedding is not None
            tokens += trace.tokens
            inject = self.injected(self.injected_input(trace.embedding))
            norm_in = torch.linalg.vector_norm(inject.double(), dim=-1)
            for k, x in enumerate(trace.inputs[0::2]):
                ratio_sum[k] += (norm_in / torch.linalg.vector_norm(x.double(), dim=-1)).sum().cpu()
        decay = self.decay().detach().double().cpu()
        return {"decay_mean": float(decay.mean()), "decay_min": float(decay.min()), "decay_max": float(decay.max()),
                "inject_ratio": [float(v) for v in ratio_sum / max(tokens, 1)]}

    @classmethod
    def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
        return "decay", float(fields["decay_mean"])

    @classmethod
    def probe_scalars(cls, row: dict[str, Any]) -> dict[str, float]:
        """``probe/decay_mean`` (min, max) and ``probe/inject_ratio/iter<k>``."""
        out = {f"probe/{f}": float(row[f"probe/{f}"]) for f in ("decay_mean", "decay_min", "decay_max")
               if row.get(f"probe/{f}") is not None}
        for k, value in enumerate(row.get("probe/inject_ratio") or [], start=1):
            out[f"probe/inject_ratio/iter{k}"] = float(value)
        return out

    @classmethod
    def mean_over_seeds(cls, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Each probe field averaged over the rows having it (``inject_ratio`` elementwise)."""
        import numpy as np

        out: dict[str, Any] = {}
        for key in ("probe/decay_mean", "probe/decay_min", "probe/decay_max", "probe/inject_ratio"):
            values = [r[key] for r in rows if r.get(key) is not None]
            if values and len({np.shape(v) for v in values}) == 1:
                out[key] = np.mean(np.array(values, dtype=float), axis=0).tolist()
        return out
