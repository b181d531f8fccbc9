"""A comparison's verdict as one wandb run in the comparison's group (job type ``verdict``), beside its runs: the
``verdicts`` table (the console's rows), ``<arm>/verdict``, ``<arm>/bpb_mean`` and ``<arm>/diff_mean`` for the run
table, and the plots. Only when the runs log to wandb, in their mode (offline by default); its id is kept in the
comparison directory so each look updates the same run."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dormouse.ab.reporting.report import verdict_rows
from dormouse.ab.reporting.results import ComparisonResults
from dormouse.config.schema import wandb_on
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import WANDB_ID
from dormouse.train.metrics import wandb_dir

COLUMNS = ["arm", "role", "runs", "bpb_mean", "diff_mean", "interval_low", "interval_high", "look", "verdict"]


def verdict_data(results: ComparisonResults) -> list[list[Any]]:
    """The rows of the ``verdicts`` table, in :data:`COLUMNS` order: one per arm."""
    out = []
    for row, (name, arm) in zip(verdict_rows(results), results.arms.items(), strict=True):
        low, high = row["interval"] if row["interval"] else (None, None)
        out.append([name, arm.role, len(arm.final_bpb), row["bpb_mean"], row["diff_mean"], low, high, row["look"],
                    row["verdict"]])
    return out


def summary_fields(results: ComparisonResults) -> dict[str, Any]:
    """``<arm>/verdict``, ``<arm>/bpb_mean`` and ``<arm>/diff_mean`` of every arm (wandb's run-table columns)."""
    fields: dict[str, Any] = {}
    for name, arm in results.arms.items():
        fields.update({f"{name}/verdict": arm.outcome.verdict, f"{name}/bpb_mean": arm.bpb_mean,
                       f"{name}/diff_mean": arm.diff_mean})
    return fields


def log_verdict(logging: Any, comp_dir: Path, results: ComparisonResults, wandb: Any = None) -> bool:
    """Send ``results`` to wandb as the summary run when ``logging`` (the runs' section) has wandb on; returns
    whether it did. ``wandb``: the module (tests give a stand-in)."""
    if not wandb_on(logging):
        return False
    if wandb is None:
        import wandb  # lazy: wandb is heavy and usually disabled

    run = wandb.init(mode=str(logging.wandb), entity=logging.wandb_entity, project=logging.wandb_project,
                     group=str(results.name), job_type="verdict", name=f"{results.name}-verdict",
                     tags=[str(tag) for tag in logging.wandb_tags], dir=wandb_dir(comp_dir),
                     id=_summary_id(comp_dir), resume="allow", config=_config(results),
                     settings=wandb.Settings(silent=True))
    run.log({"verdicts": wandb.Table(columns=COLUMNS, data=verdict_data(results)),
             **_images(wandb.Image, comp_dir, results.plots or [])})
    run.summary.update(summary_fields(results))
    run.finish()
    return True


def _summary_id(comp_dir: Path) -> str:
    """The summary run's wandb id, kept in the comparison directory (``wandb_id.txt``, as a run keeps its)."""
    path = comp_dir / WANDB_ID
    run_id = path.read_text().strip() if path.is_file() else ""
    if not run_id:
        run_id = secrets.token_hex(6)  # wandb ids are [a-z0-9]
        atomic_write_text(path, run_id + "\n")
    return run_id


def _config(results: ComparisonResults) -> dict[str, Any]:
    """The summary run's config: the comparison's design, not per-run numbers."""
    keys = ("name", "description", "metric", "baseline", "aa_arm", "alpha", "complete", "overrides", "fixed")
    return {k: getattr(results, k) for k in keys}


def _images(image: Callable[[str], Any], comp_dir: Path, plots: list[str]) -> dict[str, Any]:
    return {f"plots/{Path(p).stem}": image(str(comp_dir / p)) for p in plots if (comp_dir / p).is_file()}
