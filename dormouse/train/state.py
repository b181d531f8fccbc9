"""The training loop's changing state, in one object that checkpoints itself (torchtitan's shape).

Everything that changes from one step to the next and is not a model or optimizer tensor lives in
:class:`LoopState`: the step, the tokens seen, the skipped steps, the open eval window, the probe counters
of the open window and the CPU RNG. ``state_dict()`` is the loop's part of a checkpoint, kept under the one
key :data:`LOOP_KEY` (torchtitan's ``train_state``), and ``load_state_dict()`` its inverse, so "nothing the
loop needs lives outside the checkpoint" holds by construction: a field added here is saved and restored
with the others. The data order, the depth sequence and the learning rate are functions of the step
(dormouse.data, dormouse.train.loop) and need no state of their own; together this makes a resumed run
bit-identical on CPU.

The metrics history is not loop state: nothing the loop computes reads an earlier eval's row, and the rows
grow with the run, so a checkpoint does not carry them; ``metrics.jsonl`` holds them (dormouse.train.metrics).

A checkpoint has this layout (dormouse.train.loop.write_checkpoint)::

    {"model": ..., "optimizer": ..., "config": {...},
     "loop": {"step", "tokens", "skipped", "window": {...}, "probes": {...}, "rng_cpu"}}

Checkpoints written before the layout (the loop's keys at the top level beside a ``metrics`` list) still
load: :func:`loop_part` reads either, and the old ``metrics`` list is ignored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from dormouse.arms.probes import ProbeCounters
from dormouse.train.distributed import DistInfo, all_reduce_sum


@dataclass(frozen=True)
class WindowTotals:
    """The per-rank sums of an eval window, summed over ranks."""

    loss_sum: float
    counters: dict[str, int]  # the probe counters, "<arm>_ran"/"<arm>_asked" in the fixed arm order


@dataclass
class Window:
    """Sums over the training steps since the last eval line; the eval line reports their means.

    ``steps``, ``tokens`` and ``depth_sum`` are the same on every rank (a skip is decided by all ranks
    together, ``tokens`` counts every rank's batch); ``loss_sum`` and the probe counters are this rank's
    own, summed over ranks by :meth:`summed`; ``time`` is this rank's wall time in training steps.
    """

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
        """A training step's forward at the depth drawn for it, run as ``passes`` micro-batches (gradient
        accumulation): each pass asks the arm at every sublayer, so the depth counts once per pass."""
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
        """The loss sum and the trained model's probe ``counters`` over all ranks: a collective, so every rank
        calls it at the same step. float64, so integer counters stay exact."""
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

    def state_dict(self, totals: WindowTotals) -> dict[str, Any]:
        """The loop's part of a checkpoint. The open window's loss sum and probe counters are per rank, so
        the checkpoint holds their sums over ranks (``totals``, from :meth:`Window.summed`); after a resume
        rank 0 carries them."""
        window = self.window.state_dict()
        window["loss_sum"] = totals.loss_sum
        return {"step": self.step, "tokens": self.tokens, "skipped": self.skipped, "window": window,
                "probes": dict(totals.counters), "rng_cpu": torch.get_rng_state()}

    def load_state_dict(self, state: dict[str, Any], counters: ProbeCounters, *, carries_sums: bool) -> None:
        """Restore from a checkpoint, the open window's probe counts into the trained model's ``counters``;
        ``carries_sums`` on rank 0 only (see :meth:`state_dict`)."""
        self.step, self.tokens, self.skipped = int(state["step"]), int(state["tokens"]), int(state["skipped"])
        self.window.load_state_dict(state["window"])
        torch.set_rng_state(state["rng_cpu"])
        if carries_sums:
            counters.load(state["probes"])
        else:
            self.window.loss_sum = 0.0
            counters.reset()


LOOP_KEY = "loop"


def loop_part(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The loop's part of a loaded checkpoint: ``checkpoint["loop"]``; a checkpoint from before that layout
    kept the loop's keys at its top level, and they are read from there."""
    return checkpoint[LOOP_KEY] if LOOP_KEY in checkpoint else checkpoint


def checkpoint_step(checkpoint: dict[str, Any]) -> int:
    """The step a loaded checkpoint was written at (either layout)."""
    return int(loop_part(checkpoint)["step"])
