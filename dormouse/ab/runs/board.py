"""The comparison's progress as it runs: one table updated in place on a terminal (rich ``Live``), plain timestamped
lines otherwise. Starts and outcomes come from the launcher; a running run's step and bpb from its
``metrics.jsonl``, so the board reads the same wherever the run trains."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from dormouse.ab.launchers.base import Outcome
from dormouse.ab.runs.job import Run
from dormouse.run.loglines import read_metrics

STYLE = {"pending": "dim", "running": "bold cyan", "resuming": "bold cyan", "done": "green",
         "kept": "green", "failed": "bold red", "interrupted": "yellow", "stopped": "yellow"}


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


class RunBoard:
    """``with RunBoard(name, runs, console) as board:`` then ``board.start(key, where)`` and
    ``board.finish(outcome)`` (the launcher's callbacks)."""

    def __init__(self, name: str, runs: list[Run], console: Console, refresh_per_second: float = 2.0) -> None:
        self.name = name
        self.runs = {p.name: p for p in runs}
        self.console = console
        self.where: dict[str, str] = {}
        self.started: dict[str, float] = {}
        self.elapsed: dict[str, float] = {}
        self.live: Live | None = None
        self.refresh_per_second = refresh_per_second

    # -- the launcher's callbacks --
    def start(self, key: str, where: str) -> None:
        run = self.runs[key]
        run.status = "resuming" if run.run_dir.exists() else "running"
        self.where[key] = where
        self.started[key] = time.time()
        if self.live is None:
            self._line(f"start {key} ({where})")

    def finish(self, outcome: Outcome) -> None:
        run = self.runs.get(outcome.key)
        if run is None:
            return
        run.status, run.note = outcome.status, outcome.note
        if outcome.key in self.started:
            self.elapsed[outcome.key] = time.time() - self.started[outcome.key]
        row = self._last_row(run)
        bpb = f" bpb={row['bpb']:.4f}" if row and isinstance(row.get("bpb"), float) else ""
        took = _fmt_s(self.elapsed.get(outcome.key))  # none for a job that never started
        msg = f"{outcome.status} {outcome.key}{bpb}" + (f" ({took})" if took else "")
        if outcome.note:
            msg += f": {outcome.note}"
        if self.live is None or outcome.status in ("failed", "interrupted", "stopped"):
            self._line(msg)

    def note(self, text: str) -> None:
        self._line(text)

    # -- rendering --
    def _line(self, text: str) -> None:
        stamp = datetime.now().strftime("%H:%M:%S")
        (self.live.console if self.live else self.console).print(f"{stamp} {text}", markup=False,
                                                                  highlight=False, soft_wrap=True)

    @staticmethod
    def _last_row(run: Run) -> dict[str, Any] | None:
        rows = read_metrics(run.files.metrics)
        return rows[-1] if rows else None

    def eta_s(self, now: float | None = None) -> float | None:
        """The comparison's ETA (:func:`~dormouse.ab.comparison.status.comparison_eta`) from the running runs'
        pace (a resumed run's is unknown here), the finished runs' wall times and the pending ones."""
        from dormouse.ab.comparison.status import comparison_eta

        now = time.time() if now is None else now
        running: list[tuple[float, float | None]] = []
        for key, run in self.runs.items():
            if run.status not in ("running", "resuming") or key not in self.started:
                continue
            elapsed = now - self.started[key]
            row = self._last_row(run) if run.status == "running" else None
            step = int(row["step"]) if row else 0
            running.append((elapsed, elapsed / step * (run.steps - step) if step > 0 else None))
        done = [self.elapsed[k] for k, p in self.runs.items() if p.status == "done" and k in self.elapsed]
        return comparison_eta(running, done, sum(p.status == "pending" for p in self.runs.values()))

    def caption(self) -> str | None:
        """The ETA line under the table while runs remain; None once every run has ended."""
        at_once = sum(p.status in ("running", "resuming") for p in self.runs.values())
        if not at_once and not any(p.status == "pending" for p in self.runs.values()):
            return None
        eta = self.eta_s()
        if eta is None:
            return "ETA unknown until a run has finished or evaluated"
        return f"ETA {_fmt_s(eta)} ({max(1, at_once)} run(s) at once)"

    def table(self) -> Table:
        table = Table(title=f"ab {self.name}", title_justify="left", caption=self.caption(),
                      caption_justify="left")
        for col in ("run", "status", "step", "bpb", "elapsed", "where"):
            table.add_column(col, no_wrap=True)
        now = time.time()
        for key, run in self.runs.items():
            row = self._last_row(run) if run.status != "pending" else None
            step = f"{row['step']}/{run.steps}" if row else ""
            bpb = f"{row['bpb']:.4f}" if row and isinstance(row.get("bpb"), float) else ""
            el = self.elapsed.get(key, now - self.started[key] if key in self.started else None)
            table.add_row(key, f"[{STYLE.get(run.status, '')}]{run.status}[/]", step, bpb, _fmt_s(el),
                          self.where.get(key, ""))
        return table

    def __rich__(self) -> Table:
        return self.table()

    def __enter__(self) -> RunBoard:
        if self.console.is_terminal:
            self.live = Live(self, console=self.console, refresh_per_second=self.refresh_per_second,
                             redirect_stdout=True, redirect_stderr=True)
            self.live.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.refresh()
            self.live.stop()  # the last frame stays on screen
            self.live = None
        else:
            self.console.print(self.table())
