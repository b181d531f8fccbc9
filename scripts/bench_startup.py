#!/usr/bin/env python
"""Where a tiny ``dormouse train`` spends the time it does not train: each phase timed in fresh interpreters.

A phase's cost is the difference between two fresh processes that differ by that phase only (``python -c``
snippets, then the CLI itself), the median over ``--repeats``; the run's own ``wall=`` (its training and
evals) is read off its ``done:`` line. The machine's load (1-minute load average before and after) is printed
with the figures: on a shared 2-core machine the same phases take twice as long.

    python scripts/bench_startup.py --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

# Each phase: the snippet that stops just after it; the cost is its time minus the previous phase's.
PHASES: list[tuple[str, str]] = [
    ("python itself", "pass"),
    ("import torch", "import torch"),
    ("torch.optim imports Dynamo (its first param group)",
     "import torch; torch.optim.AdamW([torch.zeros(1, requires_grad=True)])"),
    ("hydra + omegaconf",
     "import torch; torch.optim.AdamW([torch.zeros(1, requires_grad=True)]); import hydra, omegaconf"),
    ("matplotlib (the run's plots)",
     "import torch; torch.optim.AdamW([torch.zeros(1, requires_grad=True)]); import hydra, omegaconf; "
     "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"),
]


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start, out.stdout


def tiny_train(run_dir: str, i: int) -> tuple[float, float]:
    """A one-step tiny run as the README's: (the process's seconds, its own wall= seconds)."""
    seconds, stdout = timed([sys.executable, "-m", "dormouse", "train", "preset=tiny", "train.steps=1",
                             "model.use_prenorm=true", f"run.dir={run_dir}", f"run.name=t{i}"])
    wall = re.search(r"wall=([0-9.]+)s", stdout)
    return seconds, float(wall.group(1)) if wall else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    cumulative = {name: statistics.median(timed([sys.executable, "-c", code])[0] for _ in range(args.repeats))
                  for name, code in PHASES}
    cli = statistics.median(timed([sys.executable, "-m", "dormouse", "--help"])[0] for _ in range(args.repeats))
    with tempfile.TemporaryDirectory() as tmp:
        runs = [tiny_train(tmp, i) for i in range(args.repeats)]
    total, wall = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load {load_before:.2f} before / {os.getloadavg()[0]:.2f} after; median of {args.repeats}")
    previous = 0.0
    for name, seconds in cumulative.items():
        print(f"  {name:<52} {seconds - previous:6.2f} s  (cumulative {seconds:5.2f})")
        previous = seconds
    print(f"  {'dormouse --help (the CLI, no torch)':<52} {cli:6.2f} s")
    print(f"  {'train preset=tiny train.steps=1, whole process':<52} {total:6.2f} s")
    print(f"  {'  of which its own wall= (training and evals)':<52} {wall:6.2f} s")
    print(f"  {'  the rest (imports, config, corpus, plots, exit)':<52} {total - wall:6.2f} s")


if __name__ == "__main__":
    main()
