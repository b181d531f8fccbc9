"""The plain progress line a run prints every :data:`EVERY_S` seconds when its output is not a terminal (where
no bar can be drawn and evals may be minutes apart)::

    progress step 120/2000 (6%)  loss 2.345  1,234 tok/s  elapsed 30s  eta 7m50s

Time-based, not every N steps, so it reads the same on a fast GPU and a busy CPU."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

EVERY_S = 30.0  # seconds between two lines


def duration(seconds: float) -> str:
    """``45s``, ``7m50s``, ``2h05m``: short enough for a line, exact enough for an ETA."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(step: int, total: int, loss: float, tok_s: float, elapsed_s: float, steps_done: int) -> str:
    """The line at ``step`` of ``total``; the ETA is paced by this process's own steps."""
    eta = (total - step) * elapsed_s / steps_done if steps_done > 0 else float("nan")
    return (f"progress step {step}/{total} ({100 * step // max(total, 1)}%)  loss {loss:.3f}  {tok_s:,.0f} tok/s  "
            f"elapsed {duration(elapsed_s)}  eta {duration(eta) if eta == eta else '?'}")


@dataclass
class PlainProgress:
    """Says :func:`progress_line` at most every ``every_s`` seconds (the first after ``every_s``)."""

    total: int
    start: int  # the step this process started at (a resume's)
    every_s: float = EVERY_S
    clock: Callable[[], float] = time.monotonic
    began: float = field(init=False)
    last: float = field(init=False)

    def __post_init__(self) -> None:
        self.began = self.last = self.clock()

    def line(self, step: int, loss: float, tok_s: float) -> str | None:
        """The line to print after ``step``, or None when the last one is less than ``every_s`` old."""
        now = self.clock()
        if now - self.last < self.every_s:
            return None
        self.last = now
        return progress_line(step, self.total, loss, tok_s, now - self.began, step - self.start)
