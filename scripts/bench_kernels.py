#!/usr/bin/env python
"""Benchmark the fused AttnRes depth read (dormouse_kernels) against plain torch, eager and compiled.

For each shape (tokens x d x L x dtype) it times, forward and forward+backward:

* ``eager``   -- plain PyTorch: stack the sources, RMS-normalise, score, softmax over L, weighted sum
                 (fp32 maths for bf16 inputs, as a careful plain implementation would do);
* ``compile`` -- ``torch.compile`` of that same function (a fresh compile per shape);
* ``triton``  -- ``dormouse_kernels.depth_attend_fused`` (no stacking: the sources are read in place).

Timing: CUDA events around each call, warmup first, median of the repetitions. Achieved bandwidth is
computed from the bytes the op MUST move (the floor of any implementation, attnres.md "Cost"):
forward = read L sources + write the output; backward = read L sources + grad_out, write L source
gradients. It is reported in GB/s and as a percentage of the measured device-to-device copy bandwidth
(a large ``tensor.copy_``: read + write). A rich table is printed last; ``--out`` writes every number
as JSON.

    python scripts/bench_kernels.py --quick --out runs/bench_kernels.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

FULL = {"tokens": [8192, 65536], "d": [256, 1024, 2048], "L": [3, 9, 17], "dtype": ["bf16", "fp32"]}
QUICK = {"tokens": [65536], "d": [1024, 2048], "L": [3, 9], "dtype": ["bf16"]}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
EPS = 1e-6
DEVICE = "cuda"  # a module constant so a CPU smoke test (interpreter) can swap it


def plain_depth_attend(sources: list[torch.Tensor], query: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """Eq. 2-4 the plain way: stack, RMSNorm keys (mean form), score with the gain folded into the query,
    softmax over the L sources, sum of the raw values. fp32 maths, output in the sources' dtype."""
    v = torch.stack(sources).float()  # [L, N, d]
    inv_rms = torch.rsqrt(v.pow(2).mean(-1) + EPS)  # [L, N]
    scores = (v @ (query * gain).float()) * inv_rms  # [L, N]
    alpha = torch.softmax(scores, dim=0)
    return (alpha.unsqueeze(-1) * v).sum(0).to(sources[0].dtype)


def time_ms(fn: Callable[[], object], warmup: int, reps: int, before: Callable[[], None] | None = None) -> float:
    """Median milliseconds of ``fn`` over ``reps`` CUDA-event-timed calls, after ``warmup`` calls."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_gbs(device: torch.device, gib: float = 2.0) -> float:
    """Device-to-device copy bandwidth, GB/s (bytes read + bytes written), of a ``gib`` GiB tensor."""
    n = int(gib * 2**30) // 4
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), warmup=3, reps=20)
    return 2 * n * 4 / (ms * 1e-3) / 1e9


def bench_shape(tokens: int, d: int, L: int, dtype: torch.dtype, warmup: int, reps: int, impls: list[str]) -> dict:
    import dormouse_kernels as dk

    dev = torch.device(DEVICE)
    size = torch.finfo(dtype).bits // 8
    g = torch.Generator(device=dev).manual_seed(tokens + d + L)
    sources = [torch.randn(tokens, d, device=dev, dtype=dtype, generator=g) for _ in range(L)]
    query = (torch.randn(d, device=dev, generator=g) / math.sqrt(d)).requires_grad_(True)
    gain = torch.ones(d, device=dev).requires_grad_(True)
    grad_out = torch.randn(tokens, d, device=dev, dtype=dtype, generator=g)
    leaves = [s.requires_grad_(True) for s in sources]

    fns: dict[str, Callable[..., torch.Tensor]] = {
        "eager": plain_depth_attend,
        "triton": lambda s, q, gn: dk.depth_attend_fused(s, q, gn, EPS, "paper"),
    }
    if "compile" in impls:
        torch._dynamo.reset()  # a fresh compile per shape (and no recompile-limit fallback to eager)
        fns["compile"] = torch.compile(plain_depth_attend, dynamic=False)

    fwd_bytes = (L + 1) * tokens * d * size
    bwd_bytes = (2 * L + 1) * tokens * d * size
    row: dict = {"tokens": tokens, "d": d, "L": L, "dtype": str(dtype).removeprefix("torch.")}

    def clear() -> None:
        for t in (*leaves, query, gain):
            t.grad = None

    ref = None
    for name in impls:
        fn = fns[name]
        try:
            with torch.no_grad():
                out = fn(leaves, query, gain)
                if ref is None:
                    ref = out.float()
                row[f"{name}_maxdiff"] = (out.float() - ref).abs().max().item()
                del out
                fwd = time_ms(lambda fn=fn: fn(leaves, query, gain), warmup, reps)

            def step(fn=fn) -> None:
                fn(leaves, query, gain).backward(grad_out)

            fb = time_ms(step, warmup, reps, before=clear)
            row[f"{name}_fwd_ms"] = fwd
            row[f"{name}_fwdbwd_ms"] = fb
            row[f"{name}_fwd_gbs"] = fwd_bytes / (fwd * 1e-3) / 1e9
            row[f"{name}_fwdbwd_gbs"] = (fwd_bytes + bwd_bytes) / (fb * 1e-3) / 1e9
        except torch.cuda.OutOfMemoryError:
            row[f"{name}_error"] = "oom"
        except Exception as exc:  # a failing implementation must not hide the others' numbers
            row[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        clear()
        torch.cuda.empty_cache()
    return row


def print_tables(rows: list[dict], copy_gbs: float, impls: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    for phase, label in (("fwd", "forward"), ("fwdbwd", "forward + backward")):
        t = Table(title=f"AttnRes depth read, {label} (median ms; copy bandwidth {copy_gbs:.0f} GB/s)")
        for col in ("tokens", "d", "L", "dtype"):
            t.add_column(col, justify="right")
        for name in impls:
            t.add_column(f"{name} ms", justify="right")
        t.add_column("triton GB/s", justify="right")
        t.add_column("% copy", justify="right")
        t.add_column("triton maxdiff", justify="right")
        for name in impls:
            if name != "triton":
                t.add_column(f"speedup vs {name}", justify="right")
        for r in rows:
            cells = [f"{r['tokens'] // 1024}K", str(r["d"]), str(r["L"]), r["dtype"]]
            for name in impls:
                ms = r.get(f"{name}_{phase}_ms")
                cells.append(f"{ms:.3f}" if ms is not None else r.get(f"{name}_error", "-")[:12])
            gbs = r.get(f"triton_{phase}_gbs")
            cells.append(f"{gbs:.0f}" if gbs else "-")
            cells.append(f"{100 * gbs / copy_gbs:.0f}%" if gbs else "-")
            diff = r.get("triton_maxdiff")
            cells.append(f"{diff:.1e}" if diff is not None else "-")
            tri = r.get(f"triton_{phase}_ms")
            for name in impls:
                if name != "triton":
                    other = r.get(f"{name}_{phase}_ms")
                    cells.append(f"{other / tri:.2f}" if other and tri else "-")
            t.add_row(*cells)
        console.print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"reduced shape set {QUICK}")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile column (compiles are slow)")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available():
        print(
            "bench_kernels.py needs a CUDA GPU (torch.cuda.is_available() is False): it times the compiled "
            "Triton kernels with CUDA events. Run it on a GPU machine, e.g. via scripts/gpu_check.sh.",
            file=sys.stderr,
        )
        return 2
    import dormouse_kernels as dk

    reason = dk.triton_unavailable_reason(torch.device("cuda"))
    if reason is not None:
        print(f"bench_kernels.py: the fused kernels cannot run: {reason}", file=sys.stderr)
        return 2

    shapes = QUICK if args.quick else FULL
    impls = ["eager"] + ([] if args.no_compile else ["compile"]) + ["triton"]
    import triton

    copy_gbs = copy_bandwidth_gbs(torch.device("cuda"))
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_gbs": copy_gbs,
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "bytes_model": "fwd: (L+1)*N*d*size; bwd: (2L+1)*N*d*size (sources+grad_out read, grads written)",
        "quick": args.quick,
    }
    rows = []
    for dtype in shapes["dtype"]:
        for tokens in shapes["tokens"]:
            for d in shapes["d"]:
                for L in shapes["L"]:
                    row = bench_shape(tokens, d, L, DTYPES[dtype], args.warmup, args.reps, impls)
                    rows.append(row)
                    done = {k: round(v, 3) for k, v in row.items() if k.endswith("_ms")}
                    print(f"{tokens}x{d} L={L} {dtype}: {done}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"wrote {args.out}")
    print_tables(rows, copy_gbs, impls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
