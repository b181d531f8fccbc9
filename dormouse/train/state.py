"""The training loop's changing state in one object that checkpoints itself (torchtitan's ``train_state``):
:class:`LoopState` (step, tokens, skips, the open eval window and its counters, the CPU RNG) under
:data:`LOOP_KEY`, so a field added here is saved with the rest. Checkpoint layout::

    {"model": ..., "optimizer": ..., "config": {...},
     "loop": {"step", "tokens", "skipped", "window": {...}, "probes": {...}, "rng_cpu", "last_eval": {...}}}

:func:`loop_part` also reads checkpoints with the loop's keys at the top level."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from dormouse.arms.probes import ProbeCounters
from dormouse.train.dist_info import DistInfo
from dormouse.train.distributed import all_reduce_sum


@dataclass(frozen=True)
class WindowTotals:
    """The per-rank sums of an eval window, summed over ranks."""

    loss_sum: float
    counters: dict[str, int]  # the probe counters, "<arm>_ran"/"<arm>_asked" in the fixed arm order


@dataclass
class Window:
    """Sums since the last eval line; ``loss_sum`` and the counters are per rank (:meth:`summed`), the rest shared."""

    loss_sum: float = 0.0  # losses of the steps that updated the weights (skipped steps have none)
    steps: int = 0  # steps that updated the weights
    tokens: int = 0
    depth_sum: float = 0.0
    time: float = 0.0
    # Every training forward (skipped updates included) and the depth the schedule drew for it: what the
    # probe counters' `asked` must equal, 2 per iteration (dormouse.run.loglines.WINDOW_COLUMNS).
    forwards: int = 0
    forward_depth_sum: int = 0

    def add_forward(self, depth: int, passes: int = 1) -> None:
        """A step's forward at its depth, run as ``passes`` micro-batches (each asks every sublayer)."""
        self.forwards += 1
        self.forward_depth_sum += depth * passes

    def add_update(self, loss: float, depth: int) -> None:
        """A step whose update was applied."""
        self.loss_sum += loss
        self.steps += 1
        self.depth_sum += depth

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    def summed(self, counters: ProbeCounters, info: DistInfo, device: torch.device) -> WindowTotals:
        """The loss sum and ``counters`` over all ranks in float64 (exact counts); a collective."""
        snapshot = counters.snapshot()
        sums = all_reduce_sum([self.loss_sum, *snapshot.values()], info, device)
        return WindowTotals(sums[0], {k: int(v) for k, v in zip(snapshot, sums[1:], strict=True)})

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for f in fields(self):
            setattr(self, f.name, state[f.name])


@dataclass
class LoopState:
    """Where the loop is: see the module docstring."""

    step: int = 0  # optimizer steps taken (skipped ones included)
    tokens: int = 0  # training tokens (bytes) seen, over all ranks
    skipped: int = 0  # steps whose update was skipped for a non-finite loss or gradient
    window: Window = field(default_factory=Window)
    # The last eval row's fields only the training process measured (its window's means and counters, its cost):
    # a final row lost after the final checkpoint is rebuilt from them (dormouse.train.loop.rebuild_final_row).
    last_eval: dict[str, Any] | None = None

    def state_dict(self, totals: WindowTotals) -> dict[str, Any]:
        """The loop's part of a checkpoint, per-rank sums stored summed over ranks (rank 0 carries them)."""
        window = self.window.state_dict()
        window["loss_sum"] = totals.loss_sum
        return {"step": self.step, "tokens": self.tokens, "skipped": self.skipped, "window": window,
                "probes": dict(totals.counters), "rng_cpu": torch.get_rng_state(), "last_eval": self.last_eval}

    def load_state_dict(self, state: dict[str, Any], counters: ProbeCounters, *, carries_sums: bool) -> None:
        """Restore from a checkpoint, the window's counts into the model's ``counters``."""
        self.step, self.tokens, self.skipped = int(state["step"]), int(state["tokens"]), int(state["skipped"])
        self.window.load_state_dict(state["window"])
        torch.set_rng_state(state["rng_cpu"])
        self.last_eval = state.get("last_eval")  # a checkpoint may lack it: its final row cannot be rebuilt
        if carries_sums:
            counters.load(state["probes"])
        else:
            self.window.loss_sum = 0.0
            counters.reset()


LOOP_KEY = "loop"


def loop_part(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """``checkpoint['loop']``, or the top level of a checkpoint that kept the loop's keys there."""
    return checkpoint[LOOP_KEY] if LOOP_KEY in checkpoint else checkpoint


def checkpoint_step(checkpoint: dict[str, Any]) -> int:
    """The step a loaded checkpoint was written at (either layout)."""
    return int(loop_part(checkpoint)["step"])
