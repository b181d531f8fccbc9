"""One (arm, seed) run of a comparison as the runner and the report read it back from its directory, so a report
after a resume sees what one in a single sitting would."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dormouse.run.checks import checked_run
from dormouse.run.files import RunFiles
from dormouse.run.loglines import read_metrics
from dormouse.run.reader import Finding


def is_finite_number(x: Any) -> bool:
    """A real number that is neither NaN nor infinite (metrics rows hold NaN for an undefined value)."""
    return isinstance(x, (int, float)) and math.isfinite(x)


def final_row(rows: list[dict[str, Any]], steps: int) -> dict[str, Any] | None:
    """The registered final eval (step == train.steps) with a finite bpb, else None. The last row, never the best:
    the lowest bpb over evals is early stopping chosen after the fact, and favours the noisier arm."""
    if rows and int(rows[-1]["step"]) == steps and is_finite_number(rows[-1].get("bpb")):
        return rows[-1]
    return None


@dataclass
class RunRecord:
    """One (arm, replicate) run as the report sees it (``seed`` is the replicate's init seed)."""

    arm: str
    seed: int
    run_dir: Path
    kind: str  # rezero | gr | attnres (what the arm's config selects)
    steps: int  # the registered final step
    error: str | None = None  # why the runner could not finish it
    rows: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    replicate: int = 1

    @property
    def complete(self) -> bool:
        return self.final is not None


def load_record(arm: str, seed: int, run_dir: Path, kind: str, steps: int,
                error: str | None = None, replicate: int = 1) -> RunRecord:
    """Read one run's metrics, provenance and log findings (the `dormouse logs --check` checks)."""
    files = RunFiles(run_dir)
    rec = RunRecord(arm, seed, run_dir, kind, steps, error, replicate=replicate)
    rec.rows = read_metrics(files.metrics)
    rec.final = final_row(rec.rows, steps)
    rec.findings = checked_run(run_dir).findings
    try:
        rec.provenance = json.loads(files.provenance.read_text())
    except (OSError, ValueError):
        rec.provenance = {}
    return rec
