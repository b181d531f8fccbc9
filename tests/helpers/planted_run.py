"""The files a real training run leaves, written with a planted final bpb: what the fake train functions of
the ``dormouse ab`` tests (test_ab.py, test_ab_tune.py) hand the runner instead of training.

One owner for the run directory's shape: config.yaml, provenance.json, train.log (eval lines in the format
``dormouse.run.loglines`` writes, then a done line) and metrics.jsonl, with a bpb that falls linearly to the
planted final value and the arm counters a real run logs (``<arm>_ran`` / ``<arm>_asked``, 2 sublayers per
iteration per step).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dormouse.arms.registry import ARMS
from dormouse.config.eval_schedule import eval_steps
from dormouse.config.schema import arm_name
from dormouse.run.loglines import format_eval_line


def write_run_header(run_dir: Path, cfg: DictConfig, provenance: dict[str, Any]) -> None:
    """config.yaml and provenance.json, as a run writes them when it starts."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run_dir / "provenance.json").write_text(json.dumps({"device": "cpu", "arm": arm_name(cfg), **provenance}))


def eval_rows(cfg: DictConfig, final_bpb: float, *, start: int = 0, tok_s: float = 5000.0, params: int = 1000,
              dead: bool = False) -> Iterator[dict[str, Any]]:
    """The metrics row of each eval step after ``start``: bpb = final + 0.5·(1 − step/steps), so the last row
    holds the planted final bpb. ``dead``: the arm's counter says it was asked and never ran."""
    steps, max_iter = int(cfg.train.steps), int(cfg.model.max_iter)
    kind = arm_name(cfg)
    previous = 0
    for step in eval_steps(float(cfg.train.eval_every), steps):  # the loop's own schedule (a budget's fractional)
        every, previous = step - previous, step  # the steps this eval's window counted
        if step <= start:
            continue
        bpb = final_bpb + 0.5 * (1 - step / steps)
        row: dict[str, Any] = {"step": step, "tokens": step * 128, "loss": bpb * math.log(2), "bpb": bpb,
                               "lr": float(cfg.train.lr), "tok/s": tok_s, "depth": 2.0, "arm": kind,
                               "kernel": "torch", "skipped": 0, "time_s": step / 10, "peak_mem_bytes": 2**20,
                               "params": params}
        row.update({f"bpb@{k}": bpb + 0.2 * (max_iter - k) for k in range(1, max_iter + 1)})
        for a in ARMS:
            n = 2 * max_iter * every if a == kind else 0
            row[f"{a}_ran"] = 0 if (a == kind and dead) else n
            row[f"{a}_asked"] = n
        yield row


def append_eval(run_dir: Path, cfg: DictConfig, row: dict[str, Any]) -> None:
    """One eval: its line in train.log and its row in metrics.jsonl."""
    with (run_dir / "train.log").open("a") as log:
        log.write(format_eval_line(row, int(cfg.model.max_iter)) + "\n")
    with (run_dir / "metrics.jsonl").open("a") as mf:
        mf.write(json.dumps(row) + "\n")


def append_log(run_dir: Path, line: str) -> None:
    """A line of train.log that is not an eval (the start, resume and done lines)."""
    with (run_dir / "train.log").open("a") as log:
        log.write(line + "\n")


def done_line(cfg: DictConfig) -> str:
    """The line a run that finished writes last."""
    return f"done step={int(cfg.train.steps)} wall_s=1.0"
