#!/usr/bin/env python
"""Training step of every arm at an older commit and at this tree, interleaved in ONE process.

On a shared or virtual machine, step times drift by +-10 % between runs minutes apart: more than most speed
changes this project makes. Comparing two commits in two runs therefore measures the drift. This script
imports the older commit's ``dormouse`` package beside this tree's (``git archive BASE dormouse`` into a
temporary directory, renamed ``dormouse_base`` and its imports rewritten), builds every arm's model from the
same seed with both, and times them interleaved (old ReZero, new ReZero, old GR, ...) over ``--rounds``
rounds, so drift hits both alike. Reported: medians of per-round times, of per-round ratios to ReZero at the
same commit, and of per-round new/old ratios; and the fastest round of each variant with the ratios of those
(the least-disturbed estimate of a variant's own cost when the machine's noise only ever adds time).
One training step = forward (readout=all), mean cross-entropy, backward, AdamW; no clipping (as
``bench_model_step.py``).

    python scripts/bench_commits.py --base 866d611                   # CPU preset, 2 threads
    python scripts/bench_commits.py --base 866d611 --threads 1 --rounds 20
    python scripts/bench_commits.py --base 866d611 --preset cpu --extra model.max_iter=4 data.seq_len=64
"""

from __future__ import annotations

import argparse
import inspect
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from bench_train_runs import ARMS

REPO = Path(__file__).resolve().parent.parent


def import_base(commit: str, into: Path) -> ModuleType:
    """The ``dormouse`` package at ``commit``, importable as ``dormouse_base`` (its own config, model, arms)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "dormouse"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    pkg = into / "dormouse_base"
    (into / "dormouse").rename(pkg)
    pattern = re.compile(r"\b(from|import) dormouse(\.|\b)")
    for path in pkg.rglob("*.py"):
        path.write_text(pattern.sub(lambda m: f"{m.group(1)} dormouse_base{m.group(2)}", path.read_text()))
    sys.path.insert(0, str(into))
    import dormouse_base.model  # noqa: PLC0415 - imported from the temporary directory just written

    return dormouse_base


def make_step(package: str, preset: str, arm: str, extra: list[str]) -> Callable[[], float]:
    config = __import__(f"{package}.config", fromlist=["compose_config"])
    model_mod = __import__(f"{package}.model", fromlist=["LoopedByteLM"])
    cfg = config.compose_config([f"preset={preset}", *ARMS[arm], *extra])
    # commits before the read-path choice (e.g. 41f4e61, the first landing) take no ``kernel``
    takes_kernel = "kernel" in inspect.signature(model_mod.LoopedByteLM).parameters
    model = model_mod.LoopedByteLM(cfg.model, seed=0, **({"kernel": "torch"} if takes_kernel else {}))
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    batch, seq = int(cfg.train.batch_size), int(cfg.data.seq_len)
    x = torch.randint(0, 256, (batch, seq), generator=gen)
    y = torch.randint(0, 256, (batch, seq), generator=gen)

    def step() -> float:
        logits = model(x, readouts="all")
        loss = torch.stack([F.cross_entropy(lg.float().reshape(-1, 256), y.reshape(-1)) for lg in logits]).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the older commit (anything `git archive` takes)")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per variant per round")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every model")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    arms = args.arms if "rezero" in args.arms else ["rezero", *args.arms]

    with tempfile.TemporaryDirectory(prefix="bench_commits_") as tmp:
        import_base(args.base, Path(tmp))
        variants = {(arm, tag): make_step(pkg, args.preset, arm, args.extra)
                    for arm in arms for tag, pkg in (("base", "dormouse_base"), ("tree", "dormouse"))}
        for step in variants.values():  # warm-up, and the same first loss from both commits
            step()
        times: dict[tuple[str, str], list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for key, step in variants.items():
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    step()
                times[key].append((time.perf_counter() - t0) / args.steps * 1e3)

    print(f"training step, preset={args.preset} {' '.join(args.extra)}, threads={torch.get_num_threads()}, "
          f"{args.rounds} interleaved rounds x {args.steps} steps; base={args.base}, tree=this checkout")
    print(f"{'arm':14s} {'base ms':>9s} {'tree ms':>9s} {'tree/base':>9s} {'base xReZero':>13s} {'tree xReZero':>13s}"
          f"   | fastest round: {'base ms':>8s} {'tree ms':>8s} {'tree/base':>9s} {'base xRZ':>8s} {'tree xRZ':>8s}")

    def med_ratio(a: list[float], b: list[float]) -> float:
        return statistics.median(x / y for x, y in zip(a, b, strict=True))

    for arm in arms:
        b, t = times[(arm, "base")], times[(arm, "tree")]
        rb, rt = min(times[("rezero", "base")]), min(times[("rezero", "tree")])
        print(f"{arm:14s} {statistics.median(b):9.1f} {statistics.median(t):9.1f} {med_ratio(t, b):9.3f} "
              f"{med_ratio(b, times[('rezero', 'base')]):13.3f} {med_ratio(t, times[('rezero', 'tree')]):13.3f}"
              f"   |                {min(b):8.1f} {min(t):8.1f} {min(t) / min(b):9.3f} {min(b) / rb:8.3f} "
              f"{min(t) / rt:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
