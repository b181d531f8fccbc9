#!/usr/bin/env python
"""Where a training step's time goes, per arm: torch.profiler's self time by op, and each arm's extra over ReZero.

One training step as ``bench_model_step.py`` times it (its ``Variant``: forward with the preset's readouts,
mean cross-entropy, backward, AdamW), eager, on the CPU. Per arm: the total self time of ``--steps`` profiled
steps (after ``--warmup`` steps), the share spent in matmuls (``mm``/``addmm``/``bmm``), and the ops whose
time grew most against ReZero (per step, with the change in calls). The arms run one after another, not
interleaved: on a noisy machine a difference of a few per cent in one op is noise; the call counts are exact.

    python scripts/profile_step.py                                # CPU preset, every arm
    python scripts/profile_step.py --arms rezero gr --top 20
    python scripts/profile_step.py --extra model.max_iter=4 data.seq_len=64 train.batch_size=12
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
from bench_model_step import ARMS, CUDA_ONLY, Variant

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


OpTable = dict[str, tuple[float, float]]  # op -> (calls per step, self CPU ms per step)


def op_times(step: Callable[[], None], steps: int, warmup: int) -> OpTable:
    """torch.profiler's self CPU time of each op over ``steps`` calls of ``step`` (after ``warmup`` unprofiled
    ones), per step."""
    for _ in range(warmup):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return {e.key: (e.count / steps, e.self_cpu_time_total / 1e3 / steps) for e in prof.key_averages()}


def op_differences(table: OpTable, base: OpTable, top: int, either_way: bool) -> list[tuple[str, float, float]]:
    """The ``top`` ops whose time per step grew most against ``base`` (``either_way``: changed most, up or
    down): (op, ms, calls), each as ``table`` minus ``base``."""
    rows = [(k, table.get(k, (0, 0))[1] - base.get(k, (0, 0))[1], table.get(k, (0, 0))[0] - base.get(k, (0, 0))[0])
            for k in set(table) | set(base)]  # fmt: skip
    return sorted(rows, key=lambda r: -abs(r[1]) if either_way else -r[1])[:top]


def profile_arm(arm: str, preset: str, extra: list[str], steps: int, warmup: int) -> OpTable:
    """``{op: (calls per step, self ms per step)}`` for ``steps`` profiled steps of ``arm``."""
    return op_times(Variant(arm, "eager", preset, torch.device("cpu"), tuple(extra)).step, steps, warmup)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--arms", nargs="+", choices=[a for a in ARMS if a not in CUDA_ONLY],
                    default=[a for a in ARMS if a not in CUDA_ONLY])  # fmt: skip
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--top", type=int, default=12, help="ops listed per arm")
    ap.add_argument("--extra", nargs="*", default=[], help="more config overrides (e.g. a shape)")
    args = ap.parse_args(argv)
    arms = args.arms if "rezero" in args.arms else ["rezero", *args.arms]

    ops = {arm: profile_arm(arm, args.preset, args.extra, args.steps, args.warmup) for arm in arms}
    base = ops["rezero"]
    print(f"self CPU time per step, preset={args.preset} {' '.join(args.extra)}, {args.steps} profiled steps")
    for arm, table in ops.items():
        total = sum(ms for _, ms in table.values())
        matmul = sum(table[k][1] for k in MATMULS if k in table)
        print(f"\n{arm}: {total:.1f} ms, matmuls {matmul:.1f} ms ({matmul / total:.0%})")
        if arm == "rezero":
            rows = sorted(((ms, k, n) for k, (n, ms) in table.items()), reverse=True)[: args.top]
            for ms, k, n in rows:
                print(f"  {k[:60]:60s} {ms:8.2f} ms  {n:6.0f} calls")
            continue
        for k, ms, calls in op_differences(table, base, args.top, either_way=False):
            print(f"  {k[:60]:60s} {ms:+8.2f} ms  {calls:+6.0f} calls  vs ReZero")
    return 0


if __name__ == "__main__":
    sys.exit(main())
