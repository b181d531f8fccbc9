"""Probe counters: the proof that a residual arm ran (model.md, "Probe counters").

Every arm has a pair ``<arm>=<ran>/<asked>`` for the window since the last eval line:

* ``asked`` is counted by the loop driver: the sublayer aggregations the config asks that arm to do at the
  depth that actually ran (two per iteration: attention and MLP).
* ``ran`` is counted inside the arm, at the point where its result becomes the state.

The counters are the project's one piece of global mutable state, owned by :data:`PROBES`.

**Counters inside the graph.** Each counter is an int64 element of a device tensor, incremented by an
in-place add in the same graph that computes the output. So a compiled model (``torch.compile`` of the
whole forward, ``fullgraph=True``; CUDA graphs under ``mode="reduce-overhead"``) counts every call, not
once at trace time, with no graph break and no host synchronisation: the counts are read on the host
only when an eval line is written (:meth:`ProbeCounters.snapshot`). ``PROBES.to(device)`` puts the
counters on the model's device. ``tests/test_arms.py`` pins "N calls -> N counts" eager, compiled per
call and for the whole-model ``fullgraph`` path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from dormouse.config import ARMS

_INDEX = {arm: i for i, arm in enumerate(ARMS)}


class ProbeCounters:
    """Per-arm ``ran``/``asked`` counts for the current eval window, as two int64 tensors ``[len(ARMS)]``."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._ran = torch.zeros(len(ARMS), dtype=torch.int64, device=device)
        self._asked = torch.zeros(len(ARMS), dtype=torch.int64, device=device)
        self._paused = 0

    @property
    def device(self) -> torch.device:
        return self._ran.device

    def to(self, device: torch.device | str) -> ProbeCounters:
        """Keep the counters on ``device`` (the model's), carrying the open window's counts over."""
        self._ran = self._ran.to(device)
        self._asked = self._asked.to(device)
        return self

    def count_ran(self, arm: str, n: int = 1) -> None:
        """Called by an arm where its aggregation becomes the state (an in-graph add, no host sync)."""
        if not self._paused:
            self._ran[_INDEX[arm]] += n

    def count_asked(self, arm: str, n: int = 1) -> None:
        """Called by the loop driver for each aggregation the config asks of ``arm``."""
        if not self._paused:
            self._asked[_INDEX[arm]] += n

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Evaluation forward passes are not part of the training window the eval line reports."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def reset(self) -> None:
        self._ran.zero_()
        self._asked.zero_()

    @property
    def ran(self) -> dict[str, int]:
        """``{arm: ran}`` read on the host (a device sync on CUDA: for eval lines and tests)."""
        return dict(zip(ARMS, self._ran.tolist()))

    @property
    def asked(self) -> dict[str, int]:
        """``{arm: asked}`` read on the host."""
        return dict(zip(ARMS, self._asked.tolist()))

    def snapshot(self) -> dict[str, int]:
        """Flat ``{"<arm>_ran": n, "<arm>_asked": n}`` in the fixed arm order (for metrics.jsonl)."""
        ran, asked = self.ran, self.asked
        out: dict[str, int] = {}
        for arm in ARMS:
            out[f"{arm}_ran"] = ran[arm]
            out[f"{arm}_asked"] = asked[arm]
        return out

    def load(self, snapshot: dict[str, int]) -> None:
        """Restore an open window (a resumed run continues the window it was interrupted in)."""
        ran = [int(snapshot.get(f"{arm}_ran", 0)) for arm in ARMS]
        asked = [int(snapshot.get(f"{arm}_asked", 0)) for arm in ARMS]
        self._ran.copy_(torch.tensor(ran, dtype=torch.int64))
        self._asked.copy_(torch.tensor(asked, dtype=torch.int64))


PROBES = ProbeCounters()


# ----------------------------------------------------------------------------------------------------
# Learned-value probes: what each arm learned, measured on the fixed eval set
# ----------------------------------------------------------------------------------------------------
#
# Self-contained on purpose: these functions drive the model through the arm interface the loop driver
# uses (begin / sublayer_input / absorb, dormouse.arms) and recompute every quantity from the arm's saved
# parameters and the sources, never by hooking the internals of the AttnRes read (which change with its
# kernels). They are statistics, not the forward pass: no randomness, no gradients, counters paused.


@dataclass
class LearnedValues:
    """What one arm learned, averaged over every token of the fixed eval set.

    * ``rezero``: ``alpha[s]``, the residual scale of slot s (Bachlechner et al. 2020).
    * ``gr``: ``gate_mean[s]`` = mean over tokens and channels of ``sigmoid(W RMSNorm(x) + b_s)``, and
      ``gate_spread[s]`` = the standard deviation over channels of the per-channel mean gate.
    * ``attnres``: for every read r (each sublayer slot, then each readout point), ``weights[r][i]`` = mean
      over tokens of the depth-attention weight ``alpha_{i->r}`` on source i (Eq. 2-4), and ``entropy[r]`` =
      mean over tokens of ``-sum_i alpha_i ln alpha_i`` (nats; ln N is uniform over N sources, 0 is one
      source). Sources are the Eq. 6 sets: Full = embedding, then each sublayer output; Block = b_0 (the
      embedding), then block sums b_1, b_2, ... (a read inside block n sees the partial b_n^{i-1} in column n).
    """

    arm: str
    slots: list[str]  # "attn1", "mlp1", "attn2", ...
    alpha: list[float] | None = None
    gate_mean: list[float] | None = None
    gate_spread: list[float] | None = None
    reads: list[str] | None = None  # slots, then "out1", "out2", ...
    sources: list[str] | None = None  # column labels of the map
    weights: list[list[float]] | None = None  # [read][source], NaN where a read cannot see the source
    entropy: list[float] | None = None

    def to_row(self) -> dict[str, Any]:
        """The metrics.jsonl fields (prefix ``probe/``); only the arm's own fields."""
        keys = {"rezero": ("alpha",), "gr": ("gate_mean", "gate_spread"),
                "attnres": ("reads", "sources", "weights", "entropy")}[self.arm]
        return {f"probe/{k}": getattr(self, k) for k in keys}

    def summary(self) -> tuple[str, float]:
        """One number per arm for the eval line: ReZero's mean alpha, GR's mean gate, AttnRes's mean
        weight on the embedding source (over every read)."""
        if self.arm == "rezero":
            return "alpha", sum(self.alpha) / len(self.alpha)
        if self.arm == "gr":
            return "gate", sum(self.gate_mean) / len(self.gate_mean)
        return "emb_w", sum(row[0] for row in self.weights) / len(self.weights)


def slot_names(max_iter: int) -> list[str]:
    return [f"{'attn' if s % 2 == 0 else 'mlp'}{s // 2 + 1}" for s in range(2 * max_iter)]


def _trace(model: Any, idx: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Run the loop as the loop driver does; return the embedding, each sublayer's input and output."""
    arm = model.arm
    embedding = model.embed(idx)
    state = arm.begin(embedding)
    inputs, outputs = [], []
    for k in range(model.max_iter):
        for j, sublayer in enumerate((model.attn, model.mlp)):  # the eager modules, never compiled copies
            slot = 2 * k + j
            h = arm.sublayer_input(state, slot)
            out = sublayer(h)
            inputs.append(h)
            outputs.append(out)
            state = arm.absorb(state, slot, out)
    return embedding, inputs, outputs


def depth_weights(sources: list[torch.Tensor], query: torch.Tensor, gain: torch.Tensor | None, eps: float,
                  form: str, query_proj: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 2-3 and the softmax over depth: ``alpha_i = softmax_i(q . RMSNorm(v_i))`` -> [N, ...].

    ``q = w`` (static pseudo-query) or ``w + U RMSNorm(v_last)`` (input query); the RMSNorm gain ``g``
    multiplies the normalised key, and ``form="sqrt_d"`` divides the score by d (L2 key / sqrt(d)).
    """
    v = torch.stack(sources).float()
    d = v.shape[-1]
    q = query.float()
    if query_proj is not None:
        q = q + F.rms_norm(v[-1], (d,)) @ query_proj.float().T
    keys = v * torch.rsqrt(v.pow(2).mean(dim=-1, keepdim=True) + eps)
    if gain is not None:
        keys = keys * gain.float()
    scores = (keys * q).sum(dim=-1)
    if form == "sqrt_d":
        scores = scores / d
    return torch.softmax(scores, dim=0)


def _read_sources(embedding: torch.Tensor, outputs: list[torch.Tensor], block_size: int | None) -> list[torch.Tensor]:
    from dormouse.attnres import block_sources

    return block_sources(embedding, outputs, block_size or 1)


@torch.no_grad()
def learned_values(model: Any, x_eval: torch.Tensor, batch_size: int) -> LearnedValues:
    """The arm's learned values on the fixed eval set ``x_eval`` [N, seq] (read in batches, every token)."""
    was_training = model.training
    model.eval()
    arm = model.arm
    device = next(model.parameters()).device
    n_slots, max_iter = 2 * model.max_iter, model.max_iter
    out = LearnedValues(arm=arm.name, slots=slot_names(max_iter))
    if arm.name == "rezero":
        out.alpha = [float(a) for a in arm.alpha.detach().float().cpu()]
        model.train(was_training)
        return out
    d = model.d_model
    gate_sum = torch.zeros(n_slots, d, dtype=torch.float64)
    block = getattr(arm, "block_size", None)
    n_cols = 1 + (math.ceil(n_slots / block) if block else n_slots)
    w_sum = torch.zeros(n_slots + max_iter, n_cols, dtype=torch.float64)
    h_sum = torch.zeros(n_slots + max_iter, dtype=torch.float64)
    tokens = 0
    with PROBES.paused():
        for i in range(0, x_eval.shape[0], batch_size):
            xb = x_eval[i:i + batch_size].to(device)
            embedding, inputs, outputs = _trace(model, xb)
            tokens += xb.numel()
            if arm.name == "gr":
                for s, h in enumerate(inputs):  # GR's sublayer input is the state x its gate reads
                    proj = arm.gate_attn if s % 2 == 0 else arm.gate_mlp
                    gate = torch.sigmoid(proj(F.rms_norm(h, (d,))) + arm.bias[s])
                    gate_sum[s] += gate.double().sum(dim=tuple(range(gate.dim() - 1))).cpu()
                continue
            for r in range(n_slots + max_iter):
                seen = outputs[:r] if r < n_slots else outputs[:2 * (r - n_slots + 1)]
                srcs = _read_sources(embedding, seen, block)
                proj = arm.query_proj[r] if arm.query_proj is not None else None
                gain = arm.gains[r] if arm.gains is not None else None
                alpha = depth_weights(srcs, arm.queries[r], gain, arm.eps, arm.form, proj)
                w_sum[r, :alpha.shape[0]] += alpha.double().sum(dim=tuple(range(1, alpha.dim()))).cpu()
                h_sum[r] += torch.special.entr(alpha).sum(dim=0).double().sum().cpu()
    model.train(was_training)
    if arm.name == "gr":
        per_channel = gate_sum / tokens
        out.gate_mean = [float(v) for v in per_channel.mean(dim=1)]
        out.gate_spread = [float(v) for v in per_channel.std(dim=1, unbiased=False)]
        return out
    out.reads = out.slots + [f"out{k + 1}" for k in range(max_iter)]
    out.sources = ["emb"] + (out.slots if not block else [f"block{n}" for n in range(1, n_cols)])
    weights = w_sum / tokens
    for r in range(n_slots + max_iter):  # columns a read cannot see are NaN, not 0 (0 is a learned value)
        seen = r if r < n_slots else 2 * (r - n_slots + 1)
        visible = 1 + (math.ceil(seen / block) if block else seen)
        weights[r, visible:] = float("nan")
    out.weights = [[float(v) for v in row] for row in weights]
    out.entropy = [float(v) for v in h_sum / tokens]
    return out


def probe_scalars(row: dict[str, Any]) -> dict[str, float]:
    """A metrics row's probe lists as named scalars (for wandb): ``probe/alpha/attn1``,
    ``probe/weights/out3<-emb``, ``probe/entropy/mlp2``; a source a read cannot see is left out."""
    out: dict[str, float] = {}
    n = len(row.get("probe/alpha") or row.get("probe/gate_mean") or [])
    for key in ("probe/alpha", "probe/gate_mean", "probe/gate_spread"):
        for slot, value in zip(slot_names(n // 2), row.get(key) or []):
            out[f"{key}/{slot}"] = float(value)
    reads, sources = row.get("probe/reads") or [], row.get("probe/sources") or []
    for read, weights, entropy in zip(reads, row.get("probe/weights") or [], row.get("probe/entropy") or []):
        out[f"probe/entropy/{read}"] = float(entropy)
        for source, w in zip(sources, weights):
            if math.isfinite(w):
                out[f"probe/weights/{read}<-{source}"] = float(w)
    return out
