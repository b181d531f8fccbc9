"""The metrics component: an eval's row (a dict keyed by field name, the metrics.jsonl row) is built once and
handed whole to each sink, in torchtitan's shape: the terminal, ``train.log``, ``metrics.jsonl`` and wandb.
Sinks render fields by name, so a new field shows everywhere and moves nothing. A resume settles the
append-only files first (:func:`cut_torn_tail`, :func:`settle_metrics`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dormouse.arms import builtin  # noqa: F401  (the arm classes probe_scalars reads)
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
    """Where an eval's row goes: ``write`` rows in step order, ``train_loss`` per step, ``images`` at the end."""

    def write(self, row: Row) -> None: ...

    def train_loss(self, step: int, loss: float) -> None: ...

    def images(self, paths: list[Path], step: int) -> None: ...

    def close(self) -> None: ...


class RowSink:
    """A sink of eval rows only (the files and the terminal keep one line per eval)."""

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
    atomic: bool = False  # rewrite the file whole: a rebuilt final row is never torn by its own write

    def write(self, row: Row) -> None:
        if self.atomic:
            kept = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
            atomic_write_text(self.path, kept + format_metrics_row(row))
            return
        with self.path.open("a") as f:
            f.write(format_metrics_row(row))


def wandb_scalars(row: Row) -> dict[str, float]:
    """A row's numbers for wandb, the probe lists as named scalars; strings and lists stay in metrics.jsonl."""
    numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {**numbers, **probe_scalars(row)}


TRAIN_LOSS = "train/loss"  # wandb's key of the per-step training loss (the rows' ``loss`` is a window's mean)


def wandb_dir(run_dir: Path) -> str:
    """Where wandb writes: ``WANDB_DIR`` when set, else the run directory."""
    return os.environ.get("WANDB_DIR") or str(run_dir)


@dataclass
class WandbSink:
    """The row's numbers to wandb at its step, each step's ``train/loss`` between, and the plots at the end."""

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
    """The run's rows (the history up to a resume's step, then each eval's) and their sinks; none on ranks > 0."""

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
    """Cut (and fsync) a torn last line off an append-only file, so the next append starts a line."""
    torn = torn_tail(path)
    if torn:
        with path.open("r+b") as f:
            f.truncate(f.seek(0, 2) - torn)
            f.flush()
            os.fsync(f.fileno())
    return torn


@dataclass
class Settled:
    """What :func:`settle_metrics` found: the rows kept, the torn bytes and the rows dropped."""

    rows: list[Row] = field(default_factory=list)
    torn_bytes: int = 0
    dropped_rows: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.torn_bytes or self.dropped_rows)


def settle_metrics(path: Path, step: int, *, write: bool = True) -> Settled:
    """Rewrite metrics.jsonl atomically as a run resumed at ``step``: each step up to it once, later and torn lines
    dropped (docs/model.md, "resume"); ``write=False`` only reports."""
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
        kept = replay(kept, (row, line), lambda run: int(run[0]["step"]))
    kept = [(row, line) for row, line in kept if int(row["step"]) <= step]
    out = Settled([row for row, _ in kept], torn, len(whole.splitlines()) - len(kept))
    if out.changed and write:
        atomic_write_text(path, "".join(line + "\n" for _, line in kept))
    return out
