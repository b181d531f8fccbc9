"""Probe counters: the proof that a residual arm ran (model.md, "Probe counters").

Every arm has a pair ``<arm>=<ran>/<asked>`` for the window since the last eval line:

* ``asked`` is counted by the loop driver: the sublayer aggregations the config asks that arm to do at the
  depth that actually ran (two per iteration: attention and MLP).
* ``ran`` is counted inside the arm, at the point where its result becomes the state.

The counters are the project's one piece of global mutable state, owned by :data:`PROBES`.

torch.compile: a Python side effect inside a compiled region runs once, at trace time. Two things keep the
counts right. (1) ``train.compile`` compiles the shared block's sublayers only; the loop driver and the arms
(where the counting happens) run eagerly. (2) The counting methods are wrapped in
``torch.compiler.disable``, so even a user who compiles the whole model gets a graph break at each count
and the count runs on every call rather than once.
``tests/test_arms.py::test_counters_keep_counting_under_torch_compile`` pins both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from dormouse.config import ARMS


class ProbeCounters:
    """Per-arm ``ran``/``asked`` integers for the current eval window."""

    def __init__(self) -> None:
        self.ran: dict[str, int] = dict.fromkeys(ARMS, 0)
        self.asked: dict[str, int] = dict.fromkeys(ARMS, 0)
        self._paused = 0

    @torch.compiler.disable
    def count_ran(self, arm: str, n: int = 1) -> None:
        """Called by an arm where its aggregation becomes the state."""
        if not self._paused:
            self.ran[arm] += n

    @torch.compiler.disable
    def count_asked(self, arm: str, n: int = 1) -> None:
        """Called by the loop driver for each aggregation the config asks of ``arm``."""
        if not self._paused:
            self.asked[arm] += n

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Evaluation forward passes are not part of the training window the eval line reports."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def reset(self) -> None:
        for arm in ARMS:
            self.ran[arm] = 0
            self.asked[arm] = 0

    def snapshot(self) -> dict[str, int]:
        """Flat ``{"<arm>_ran": n, "<arm>_asked": n}`` in the fixed arm order (for metrics.jsonl)."""
        out: dict[str, int] = {}
        for arm in ARMS:
            out[f"{arm}_ran"] = self.ran[arm]
            out[f"{arm}_asked"] = self.asked[arm]
        return out

    def load(self, snapshot: dict[str, int]) -> None:
        """Restore an open window (a resumed run continues the window it was interrupted in)."""
        for arm in ARMS:
            self.ran[arm] = int(snapshot.get(f"{arm}_ran", 0))
            self.asked[arm] = int(snapshot.get(f"{arm}_asked", 0))


PROBES = ProbeCounters()
