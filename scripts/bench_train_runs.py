#!/usr/bin/env python
"""Training tokens/s of real ``dormouse train`` runs, every arm, interleaved: the eval line's figure.

``bench_model_step.py`` times one step of a model on a fixed batch; this runs the whole training loop (data,
learning-rate schedule, probe counters, clipping, checks) as a user does, and reads ``tok/s`` from the last
row of ``metrics.jsonl``: the eval window's training tokens over its training time (evaluation excluded; the
window is the whole run, its first steps included). Arms run interleaved (ReZero, GR, Full, Block, ReZero,
...) for ``--rounds`` rounds, so load that drifts hits all of them alike; reported: the median over rounds and
the median of the per-round ratios to ReZero.

    python scripts/bench_train_runs.py --preset cpu --steps 200 --rounds 3
    python scripts/bench_train_runs.py --preset cpu --steps 100 --rounds 2 --extra train.compile=true
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_model_step import ARMS as STEP_ARMS
from bench_model_step import CUDA_ONLY

# bench_model_step's arms that run anywhere (the torch read)
ARMS: dict[str, list[str]] = {arm: o for arm, o in STEP_ARMS.items() if arm not in CUDA_ONLY}


def run(preset: str, arm: str, steps: int, extra: list[str], run_dir: Path, name: str) -> float:
    overrides = [
        f"preset={preset}", *ARMS[arm], f"train.steps={steps}", f"train.eval_every={steps}", "train.ckpt_every=0",
        "logging.progress=off", *extra,
    ]  # fmt: skip
    return train_tok_s(overrides, run_dir, name)


def train_tok_s(overrides: list[str], run_dir: Path, name: str) -> float:
    """``dormouse train OVERRIDES`` into ``run_dir/name``; the last eval line's training ``tok/s``."""
    overrides = [*overrides, f"run.dir={run_dir}", f"run.name={name}"]
    proc = subprocess.run([sys.executable, "-m", "dormouse", "train", *overrides], capture_output=True, text=True,
                          timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"dormouse train {' '.join(overrides)} failed (exit {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run_dir / name / "metrics.jsonl").read_text().splitlines() if line]
    return float(rows[-1]["tok/s"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every run (e.g. train.compile=true)")
    ap.add_argument("--out", type=Path, help="write every round's tokens/s here as JSON")
    args = ap.parse_args(argv)
    arms = args.arms if "rezero" in args.arms else ["rezero", *args.arms]

    results: dict[str, list[float]] = {a: [] for a in arms}
    with tempfile.TemporaryDirectory(prefix="bench_train_runs_") as tmp:
        for r in range(args.rounds):
            t0 = time.time()
            for arm in arms:
                results[arm].append(run(args.preset, arm, args.steps, args.extra, Path(tmp), f"{arm}-{r}"))
            print(f"round {r + 1}/{args.rounds} ({time.time() - t0:.0f} s): "
                  + ", ".join(f"{a} {v[-1]:,.0f}" for a, v in results.items()), flush=True)

    base = results["rezero"]
    print(f"\ntraining tok/s (eval line), preset={args.preset}, {args.steps} steps, {args.rounds} interleaved rounds"
          f"{' ' + ' '.join(args.extra) if args.extra else ''} (median; ratio = median of per-round step-time "
          "ratios to ReZero)")
    for arm, values in results.items():
        ratio = statistics.median(b / v for v, b in zip(values, base))  # step time ratio = inverse tok/s ratio
        print(f"  {arm:14s} {statistics.median(values):9,.0f} tok/s   step x{ratio:.3f} ReZero")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"preset": args.preset, "steps": args.steps, "extra": args.extra,
                                        "tok/s": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
