"""A comparison in ``dormouse logs runs/ab/NAME``: one row per arm (lr, replicates, mean final bpb, Δ against the
baseline, verdict). Arms and baseline come from ``registration.json``, numbers from ``results.json`` (else the
finished runs' last evals, paired by replicate); it shows, never decides."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

import yaml
from rich.table import Table
from rich.text import Text

from dormouse.run.files import ComparisonFiles, RunFiles
from dormouse.run.reader import RunReading


def is_comparison(folder: Path) -> bool:
    """``folder`` is a comparison's (``dormouse ab`` registered it there)."""
    return ComparisonFiles(Path(folder)).registration.is_file()


@dataclass
class ArmRow:
    """One arm's row: role, lr, replicate runs, mean final bpb, mean paired Δ (arm − baseline, bits), verdict."""

    arm: str
    role: str  # baseline | aa | arm
    lr: str
    done: int
    found: int
    bpb_mean: float | None
    delta: float | None
    verdict: str


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _registered(folder: Path) -> dict[str, Any]:
    """The registration as registered (the YAML text ``registration.json`` keeps); {} when unreadable."""
    doc = _read_json(ComparisonFiles(folder).registration) or {}
    try:
        spec = yaml.safe_load(doc.get("registered") or "")
    except yaml.YAMLError:
        return {}
    return spec if isinstance(spec, dict) else {}


def replicate_runs(folder: Path, arm: str, runs: list[RunReading]) -> dict[int, RunReading]:
    """``arm``'s replicate runs ``<arm>-s<k>`` in ``folder`` by replicate (tune runs are not)."""
    pattern = re.compile(rf"{re.escape(arm)}-s(\d+)")
    where = Path(folder).resolve()
    found = {}
    for run in runs:
        m = pattern.fullmatch(run.name)
        if m and run.run_dir.resolve().parent == where:
            found[int(m.group(1))] = run
    return found


def _final_bpb(run: RunReading) -> float | None:
    """A finished run's last eval bpb (an unfinished run has no final bpb)."""
    bpb = run.evals[-1].values.get("bpb") if run.finished and run.evals else None
    return bpb if isinstance(bpb, float) else None


def _lr(runs: dict[int, RunReading], chosen: Any) -> str:
    """The lr the arm's runs trained with (their config.yaml), else the tune stage's choice, else "-"."""
    lrs = []
    for run in runs.values():
        try:
            cfg = yaml.safe_load(RunFiles(run.run_dir).config.read_text(encoding="utf-8")) or {}
            lrs.append(float(cfg["train"]["lr"]))
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
            continue
    if not lrs and isinstance(chosen, (int, float)):
        lrs = [float(chosen)]
    return ", ".join(f"{x:g}" for x in sorted(set(lrs))) or "-"


def arm_rows(folder: Path, runs: list[RunReading]) -> list[ArmRow]:
    """A row per registered arm, in the registration's order."""
    spec, results = _registered(folder), _read_json(ComparisonFiles(folder).results)
    baseline, aa = spec.get("baseline"), spec.get("aa_arm")
    chosen = ((results or {}).get("tune") or {}).get("chosen") or {}
    base_bpb = {k: _final_bpb(r) for k, r in replicate_runs(folder, str(baseline), runs).items()}
    rows = []
    for arm in spec.get("arms") or {}:
        mine = replicate_runs(folder, arm, runs)
        finals = {k: b for k, b in ((k, _final_bpb(r)) for k, r in mine.items()) if b is not None}
        role = "baseline" if arm == baseline else "aa" if arm == aa else "arm"
        paired = [b - base_bpb[k] for k, b in finals.items() if base_bpb.get(k) is not None]
        said = ((results or {}).get("arms") or {}).get(arm)
        if said is not None:  # the analysis' numbers: it owns which runs count (bad runs, looks)
            bpb, delta, verdict = said.get("bpb_mean"), said.get("diff_mean"), str(said.get("verdict") or "-")
        else:
            bpb = mean(finals.values()) if finals else None
            delta, verdict = (mean(paired) if paired else None), "-"
        rows.append(ArmRow(arm, role, _lr(mine, chosen.get(arm)), len(finals), len(mine), bpb,
                           None if role == "baseline" else delta, verdict))
    return rows


def _runs_cell(row: ArmRow) -> str:
    return str(row.done) + (f" (+{row.found - row.done} not finished)" if row.found > row.done else "")


def comparison_table(folder: Path, runs: list[RunReading]) -> Table:
    """The comparison as one table: a row per arm; the caption says where the numbers come from."""
    folder = Path(folder)
    spec, results = _registered(folder), _read_json(ComparisonFiles(folder).results)
    baseline = spec.get("baseline", "?")
    state = ("no results.json yet" if results is None
             else "complete" if results.get("complete") else "in progress")
    table = Table(title=Text(f"comparison {spec.get('name', folder.name)}  ({folder}, {state})", style="bold"),
                  title_justify="left", caption_justify="left")
    for head in ("arm", "role", "lr", "replicates\n(finished)", "mean final\nbpb (bits)", f"Δ vs {baseline}\n(bits)",
                 "verdict"):
        table.add_column(head, justify="left" if head in ("arm", "role", "verdict") else "right")
    for row in arm_rows(folder, runs):
        table.add_row(row.arm, row.role, row.lr, _runs_cell(row),
                      "-" if row.bpb_mean is None else f"{row.bpb_mean:.4f}",
                      "-" if row.delta is None else f"{row.delta:+.4f}", row.verdict)
    table.caption = f"Δ = arm − {baseline}, paired by replicate (negative: lower bpb)"
    return table


def comparison_tsv(folder: Path, runs: list[RunReading]) -> list[str]:
    """The comparison's table as tab-separated rows for a file or a pipe: the same row per arm, every digit."""
    folder = Path(folder)
    baseline = _registered(folder).get("baseline", "?")
    out = ["\t".join(["comparison", "arm", "role", "lr", "replicates", "runs", "bpb_mean", f"delta_vs_{baseline}",
                      "verdict"])]
    for row in arm_rows(folder, runs):
        out.append("\t".join([str(folder), row.arm, row.role, row.lr, str(row.done), str(row.found),
                              "" if row.bpb_mean is None else repr(row.bpb_mean),
                              "" if row.delta is None else repr(row.delta), row.verdict]))
    return out


def comparison_notes(folder: Path, runs: list[RunReading]) -> list[str]:
    """What the table leaves out: where its numbers come from, the tune runs, how to see every run."""
    folder = Path(folder)
    results = _read_json(ComparisonFiles(folder).results)
    notes = ["mean, Δ and verdict from results.json" if results is not None
             else "mean and Δ from the finished runs' last evals; no verdict before results.json"]
    below = [r for r in runs if r.run_dir.resolve().parent == folder.resolve()]
    others = len(below) - sum(row.found for row in arm_rows(folder, runs))  # tune-<arm>-lr... runs
    if others:
        notes.append(f"{others} other run(s) (the lr tune stage) are not in the rows")
    notes.append(f"each run's table: dormouse logs {folder} --runs")
    return notes
