"""The metrics component: an eval's row is built once and handed, whole, to each of its sinks.

A row is one ``dict`` keyed by field name (the metrics.jsonl row: ``step``, ``bpb``, ``bpb@k``, the
counters ``<arm>_ran``/``<arm>_asked``, the arm's ``probe/...`` fields, ...; dormouse.train.loop builds it). The
:class:`Metrics` component keeps the run's rows and writes each new one to every sink, in torchtitan's
shape (one logger, several backends):

* :class:`TerminalSink`: the eval line on the terminal (above the progress bar when there is one);
* :class:`TrainLogSink`: the same line appended to ``train.log``;
* :class:`JsonlSink`: the row, every digit, appended to ``metrics.jsonl``;
* :class:`WandbSink`: the row's numbers (and the probes as named scalars) to a wandb run; between evals each
  step's training loss (``train/loss``), and at the run's end its plots as images, so a wandb user finds the
  loss curve and the pictures where they look for them.

No sink knows a field's position: the line is rendered by name (:func:`dormouse.run.loglines.format_eval_line`),
metrics.jsonl and wandb are keyed by name, and ``dormouse logs`` selects its columns by name, so a field
added to the row appears under its own name everywhere and moves nothing else
(tests/train/test_metrics_sinks.py).

``train.log`` and ``metrics.jsonl`` are append-only, and a crash or a full disk can cut an append short. A
resume settles both before it appends (:func:`cut_torn_tail`, :func:`settle_metrics`): the torn last line is
cut, and metrics.jsonl is rewritten atomically to hold each step up to the resume's once, so the first new
row never lands on a partial line and a plain JSON-lines reader gets each step once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dormouse.arms.probes import probe_scalars
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.loglines import (
    LogLineError,
    format_eval_line,
    format_metrics_row,
    parse_metrics_row,
    replay,
    torn_tail,
)

Row = dict[str, Any]


class Sink(Protocol):
    """Where an eval's row goes. ``write`` gets every row in step order; ``train_loss`` each step's training
    loss between them; ``images`` the run's plots once, at its end; ``close`` ends a finished run."""

    def write(self, row: Row) -> None: ...

    def train_loss(self, step: int, loss: float) -> None: ...

    def images(self, paths: list[Path], step: int) -> None: ...

    def close(self) -> None: ...


class RowSink:
    """A sink of eval rows only: the per-step loss, the plots and the end are not its business (the files
    and the terminal keep one line per eval; the plots are files already)."""

    def train_loss(self, step: int, loss: float) -> None:
        pass

    def images(self, paths: list[Path], step: int) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class TerminalSink(RowSink):
    """The eval line, through ``show`` (a print that keeps a progress bar below the lines)."""

    show: Callable[[str], None]

    def write(self, row: Row) -> None:
        self.show(format_eval_line(row))


@dataclass
class TrainLogSink(RowSink):
    """The eval line appended to ``train.log``."""

    path: Path

    def write(self, row: Row) -> None:
        with self.path.open("a") as f:
            f.write(format_eval_line(row) + "\n")


@dataclass
class JsonlSink(RowSink):
    """The row appended to ``metrics.jsonl``: the one source of every number (dormouse.run.loglines)."""

    path: Path

    def write(self, row: Row) -> None:
        with self.path.open("a") as f:
            f.write(format_metrics_row(row))


def wandb_scalars(row: Row) -> dict[str, float]:
    """What wandb gets of a row: every number under its row name, and the probe lists as named scalars
    (``probe/alpha/attn1``, ...: dormouse.arms.probes.probe_scalars). Strings and lists stay in metrics.jsonl."""
    numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {**numbers, **probe_scalars(row)}


TRAIN_LOSS = "train/loss"  # wandb's key of the per-step training loss (the rows' ``loss`` is a window's mean)


def wandb_dir(run_dir: Path) -> str:
    """Where wandb writes its files: ``WANDB_DIR`` when the user set it (wandb's own setting, which a wandb
    user keeps off a small home or a synced disk), else the run directory."""
    return os.environ.get("WANDB_DIR") or str(run_dir)


@dataclass
class WandbSink:
    """The row's numbers logged to a wandb run at the row's step, each step's training loss between them
    (``train/loss``), the run's plots as ``wandb.Image`` (``plots/<file stem>``); ``close`` finishes the run.

    Every step's loss rather than every N: one small dict per step is nothing beside a step's compute, and
    a wandb user smooths the curve in the UI rather than choosing N in advance."""

    run: Any  # a wandb Run (or anything with ``log(dict, step=)`` and ``finish()``)
    image: Callable[[str], Any] | None = None  # wandb.Image (the caller's wandb); None: no plots logged

    def write(self, row: Row) -> None:
        self.run.log(wandb_scalars(row), step=int(row["step"]))

    def train_loss(self, step: int, loss: float) -> None:
        self.run.log({TRAIN_LOSS: loss}, step=step)

    def images(self, paths: list[Path], step: int) -> None:
        if self.image is not None and paths:
            self.run.log({f"plots/{p.stem}": self.image(str(p)) for p in paths}, step=step)

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

    def train_loss(self, step: int, loss: float) -> None:
        """Hand one step's training loss to every sink (wandb draws the curve between evals)."""
        for sink in self.sinks:
            sink.train_loss(step, loss)

    def images(self, paths: list[Path], step: int) -> None:
        """Hand the run's plots (written at its end) to every sink; returns nothing, keeps nothing."""
        for sink in self.sinks:
            sink.images(paths, step)

    @property
    def last(self) -> Row | None:
        return self.rows[-1] if self.rows else None

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


# --- settling the append-only files before a resume appends to them ---------------------------------------


def cut_torn_tail(path: Path) -> int:
    """Cut a torn last line off an append-only file (:func:`dormouse.run.loglines.torn_tail`: the bytes after its
    last newline) and return how many bytes went; 0 when it ends with a newline or does not exist.

    Why: the next append would otherwise extend the partial line, and the first new line would be lost to
    every line reader. ``truncate`` is one system call (the file is its whole lines before and after), and the
    file is fsynced so the cut reaches the disk before anything is appended."""
    torn = torn_tail(path)
    if torn:
        with path.open("r+b") as f:
            f.truncate(f.seek(0, 2) - torn)
            f.flush()
            os.fsync(f.fileno())
    return torn


@dataclass
class Settled:
    """What :func:`settle_metrics` found: the rows up to the resume's step (each step once), the bytes of a
    torn last line and the rows it dropped (steps past the resume's, superseded replays, unparseable lines)."""

    rows: list[Row] = field(default_factory=list)
    torn_bytes: int = 0
    dropped_rows: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.torn_bytes or self.dropped_rows)


def settle_metrics(path: Path, step: int, *, write: bool = True) -> Settled:
    """metrics.jsonl made the history of a run resumed at ``step``: each step up to ``step`` once, in order.

    The rule (docs/model.md, "resume"): a resume replays the evaluations after its checkpoint's step, so the
    rows of later steps belong to a future the resume abandons, and go; a row whose step does not advance
    supersedes the earlier ones from its step on (:func:`dormouse.run.loglines.replay`: a file written before this
    rule); a torn last line and any line that is not a row are dropped. When anything goes, the file is
    rewritten atomically (the old file or the new, never half of one), keeping each kept row's line as it
    was written; ``write=False`` only reports (``dormouse logs``)."""
    if not path.is_file():
        return Settled()
    data = path.read_bytes()
    torn = torn_tail(path)
    whole = data[:len(data) - torn].decode("utf-8", errors="replace")
    kept: list[tuple[Row, str]] = []
    for line in whole.splitlines():
        try:
            row = parse_metrics_row(line)
        except LogLineError:
            continue
        kept = replay(kept, (row, line), lambda pair: int(pair[0]["step"]))
    kept = [(row, line) for row, line in kept if int(row["step"]) <= step]
    out = Settled([row for row, _ in kept], torn, len(whole.splitlines()) - len(kept))
    if out.changed and write:
        atomic_write_text(path, "".join(line + "\n" for _, line in kept))
    return out
