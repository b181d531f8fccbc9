"""Probe counters, the proof that an arm ran (docs/model.md, "Probe counters"): ``<arm>=<ran>/<asked>`` per eval
window, ``asked`` from the loop driver and ``ran`` from inside the arm. Each model owns its counters, int64 device
tensors bumped inside the graph, so a ``fullgraph`` compiled model counts every call without a host sync."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from dormouse.arms.registry import ARMS


class ProbeCounters:
    """One model's per-arm ``ran``/``asked`` counts for the eval window, int64, one element per arm in registry order.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._arms: tuple[str, ...] = ()
        self._index: dict[str, int] = {}
        self._ran = torch.zeros(0, dtype=torch.int64, device=device)
        self._asked = torch.zeros(0, dtype=torch.int64, device=device)
        self._paused = 0

    def sync(self) -> None:
        """Follow the registry: one element per registered arm, each open count kept under its arm's name."""
        arms = tuple(ARMS)
        if arms == self._arms:
            return
        ran, asked = (dict(zip(self._arms, t.tolist())) for t in (self._ran, self._asked))
        device = self._ran.device
        self._ran = torch.tensor([ran.get(a, 0) for a in arms], dtype=torch.int64, device=device)
        self._asked = torch.tensor([asked.get(a, 0) for a in arms], dtype=torch.int64, device=device)
        self._arms, self._index = arms, {a: i for i, a in enumerate(arms)}

    def _slot(self, arm: str) -> int:
        if arm not in self._index:  # an arm registered after the last sync (eager; compiled code syncs first)
            self.sync()
        return self._index[arm]

    @property
    def device(self) -> torch.device:
        return self._ran.device

    def to(self, device: torch.device | str) -> ProbeCounters:
        """Keep the counters on ``device`` (the model's), carrying the open window's counts over."""
        self.sync()
        self._ran = self._ran.to(device)
        self._asked = self._asked.to(device)
        return self

    def count_ran(self, arm: str, n: int = 1) -> None:
        """Called by an arm where its aggregation becomes the state (an in-graph add, no host sync)."""
        if not self._paused:
            slot = self._slot(arm)  # first: a sync replaces the tensor
            self._ran[slot] += n

    def count_asked(self, arm: str, n: int = 1) -> None:
        """Called by the loop driver for each aggregation the config asks of ``arm``."""
        if not self._paused:
            slot = self._slot(arm)
            self._asked[slot] += n

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Evaluation forward passes are not part of the training window the eval line reports."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def reset(self) -> None:
        self.sync()
        self._ran.zero_()
        self._asked.zero_()

    @property
    def ran(self) -> dict[str, int]:
        """``{arm: ran}`` read on the host (a device sync on CUDA: for eval lines and tests)."""
        self.sync()
        return dict(zip(self._arms, self._ran.tolist()))

    @property
    def asked(self) -> dict[str, int]:
        """``{arm: asked}`` read on the host."""
        self.sync()
        return dict(zip(self._arms, self._asked.tolist()))

    def snapshot(self) -> dict[str, int]:
        """Flat ``{"<arm>_ran": n, "<arm>_asked": n}`` in the fixed arm order (for metrics.jsonl)."""
        ran, asked = self.ran, self.asked
        out: dict[str, int] = {}
        for arm in ran:
            out[f"{arm}_ran"] = ran[arm]
            out[f"{arm}_asked"] = asked[arm]
        return out

    def load(self, snapshot: dict[str, int]) -> None:
        """Restore an open window (a resumed run continues the window it was interrupted in)."""
        self.sync()
        ran = [int(snapshot.get(f"{arm}_ran", 0)) for arm in self._arms]
        asked = [int(snapshot.get(f"{arm}_asked", 0)) for arm in self._arms]
        self._ran.copy_(torch.tensor(ran, dtype=torch.int64))
        self._asked.copy_(torch.tensor(asked, dtype=torch.int64))



# ----------------------------------------------------------------------------------------------------
# Learned-value probes: what each arm learned, measured on the fixed eval set
# ----------------------------------------------------------------------------------------------------
#
# Generic: the model's own forward hands out what a probe needs (a LoopTrace: the embedding and every
# sublayer's input and output), and the arm computes its values from them with its own formulas
# (dormouse.arms: ResidualArm.learned). No copy of the loop or of an arm's arithmetic lives here. They are
# statistics, not the training forward: no randomness, no gradients, counters paused.


@dataclass
class LoopTrace:
    """What one forward's loop driver handed out: the embedding, then each sublayer's input and output."""

    embedding: torch.Tensor | None = None
    inputs: list[torch.Tensor] = field(default_factory=list)
    outputs: list[torch.Tensor] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """Tokens in the batch (every position of every sequence)."""
        assert self.embedding is not None, "the trace was never filled by a forward"
        return self.embedding.shape[:-1].numel()


@dataclass
class LearnedValues:
    """What one arm learned over the eval set: its probe ``fields`` (also attributes) and a summary."""

    arm: str
    slots: list[str]  # "attn1", "mlp1", "attn2", ...
    fields: dict[str, Any]
    summary_name: str
    summary_value: float

    def __getattr__(self, key: str) -> Any:
        fields = self.__dict__.get("fields")
        if fields is None or key not in fields:
            raise AttributeError(key)
        return fields[key]

    def to_row(self) -> dict[str, Any]:
        """The metrics.jsonl fields (prefix ``probe/``); only the arm's own fields."""
        return {f"probe/{k}": v for k, v in self.fields.items()}

    def summary(self) -> tuple[str, float]:
        """``(name, value)`` for the eval line's ``learned=<name>:<value>``."""
        return self.summary_name, self.summary_value


def slot_names(max_iter: int) -> list[str]:
    return [f"{'attn' if s % 2 == 0 else 'mlp'}{s // 2 + 1}" for s in range(2 * max_iter)]


@torch.no_grad()
def learned_values(model: Any, x_eval: torch.Tensor, batch_size: int) -> LearnedValues:
    """The arm's learned values over every token of ``x_eval`` [N, seq], through the model's own forward."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device

    def traces() -> Iterator[LoopTrace]:
        for i in range(0, x_eval.shape[0], batch_size):
            trace = LoopTrace()
            model(x_eval[i:i + batch_size].to(device), readouts="last", trace=trace)
            yield trace

    try:
        with model.counters.paused():
            fields = model.arm.learned(traces())
    finally:
        model.train(was_training)
    name, value = model.arm.summarize(fields)
    return LearnedValues(arm=model.arm.name, slots=slot_names(model.max_iter), fields=fields, summary_name=name,
                         summary_value=value)


def depth_map_scalars(row: dict[str, Any], prefix: str = "", per_read: tuple[str, ...] = ("entropy",)
                      ) -> dict[str, float]:
    """A depth-attention map's probe fields as scalars: ``probe/<prefix>weights/out3<-emb`` per read and source (a
    source the read cannot see, NaN, left out) and ``probe/<prefix><field>/mlp2`` per read for ``per_read``."""
    out: dict[str, float] = {}
    reads, sources = row.get(f"probe/{prefix}reads") or [], row.get(f"probe/{prefix}sources") or []
    columns = [row.get(f"probe/{prefix}{name}") or [] for name in per_read]
    for read, weights, *values in zip(reads, row.get(f"probe/{prefix}weights") or [], *columns):
        for name, value in zip(per_read, values):
            out[f"probe/{prefix}{name}/{read}"] = float(value)
        for source, w in zip(sources, weights):
            if math.isfinite(w):
                out[f"probe/{prefix}weights/{read}<-{source}"] = float(w)
    return out


def probe_scalars(row: dict[str, Any]) -> dict[str, float]:
    """A row's probe fields as named scalars for wandb (``probe/alpha/attn1``, ``probe/entropy/mlp2``)."""
    from dormouse.arms.registry import arm_classes

    out: dict[str, float] = {}
    for cls in arm_classes().values():
        out.update(cls.probe_scalars(row))
    return out
