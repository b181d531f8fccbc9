"""The metrics component: an eval's row is built once and handed, whole, to each of its sinks.

A row is one ``dict`` keyed by field name (the metrics.jsonl row: ``step``, ``bpb``, ``bpb@k``, the
counters ``<arm>_ran``/``<arm>_asked``, the arm's ``probe/...`` fields, ...; dormouse.train builds it). The
:class:`Metrics` component keeps the run's rows and writes each new one to every sink, in torchtitan's
shape (one logger, several backends):

* :class:`TerminalSink`: the eval line on the terminal (above the progress bar when there is one);
* :class:`TrainLogSink`: the same line appended to ``train.log``;
* :class:`JsonlSink`: the row, every digit, appended to ``metrics.jsonl``;
* :class:`WandbSink`: the row's numbers (and the probes as named scalars) to a wandb run.

No sink knows a field's position: the line is rendered by name (:func:`dormouse.loglines.format_eval_line`),
metrics.jsonl and wandb are keyed by name, and ``dormouse logs`` selects its columns by name, so a field
added to the row appears under its own name everywhere and moves nothing else
(tests/test_metrics_sinks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dormouse.loglines import format_eval_line, format_metrics_row
from dormouse.probes import probe_scalars

Row = dict[str, Any]


class Sink(Protocol):
    """Where an eval's row goes. ``write`` gets every row in step order; ``close`` ends a finished run."""

    def write(self, row: Row) -> None: ...

    def close(self) -> None: ...


@dataclass
class TerminalSink:
    """The eval line, through ``show`` (a print that keeps a progress bar below the lines)."""

    show: Callable[[str], None]

    def write(self, row: Row) -> None:
        self.show(format_eval_line(row))

    def close(self) -> None:
        pass


@dataclass
class TrainLogSink:
    """The eval line appended to ``train.log``."""

    path: Path

    def write(self, row: Row) -> None:
        with self.path.open("a") as f:
            f.write(format_eval_line(row) + "\n")

    def close(self) -> None:
        pass


@dataclass
class JsonlSink:
    """The row appended to ``metrics.jsonl``: the one source of every number (dormouse.loglines)."""

    path: Path

    def write(self, row: Row) -> None:
        with self.path.open("a") as f:
            f.write(format_metrics_row(row))

    def close(self) -> None:
        pass


def wandb_scalars(row: Row) -> dict[str, float]:
    """What wandb gets of a row: every number under its row name, and the probe lists as named scalars
    (``probe/alpha/attn1``, ...: dormouse.probes.probe_scalars). Strings and lists stay in metrics.jsonl."""
    numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {**numbers, **probe_scalars(row)}


@dataclass
class WandbSink:
    """The row's numbers logged to a wandb run at the row's step; ``close`` finishes the run."""

    run: Any  # a wandb Run (or anything with ``log(dict, step=)`` and ``finish()``)

    def write(self, row: Row) -> None:
        self.run.log(wandb_scalars(row), step=int(row["step"]))

    def close(self) -> None:
        self.run.finish()


@dataclass
class Metrics:
    """The run's rows (``rows``: the history up to a resume's step, then each eval's) and their sinks.

    A process that writes nothing (a rank other than 0) has no sinks; its rows stay empty."""

    sinks: list[Sink] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)

    def log(self, row: Row) -> None:
        """Keep ``row`` and hand it to every sink, in the order they were given."""
        self.rows.append(row)
        for sink in self.sinks:
            sink.write(row)

    @property
    def last(self) -> Row | None:
        return self.rows[-1] if self.rows else None

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
