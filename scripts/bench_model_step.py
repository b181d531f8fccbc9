#!/usr/bin/env python
"""Time one training step (forward + backward + AdamW): ReZero vs GR vs AttnRes, at any preset.

Arms: ``rezero`` (the baseline), ``attnres`` with ``model.kernel=auto`` (the fused Triton read on CUDA)
and, for attribution, ``attnres`` with ``model.kernel=torch``. Each arm: a fresh model from the same seed,
bf16 autocast on CUDA (as dormouse.train does), the preset's batch and sequence length, warmup steps,
then the median of timed steps (CUDA-synchronised wall time). Prints a table with the step-time ratio
AttnRes / ReZero and how many fused-kernel calls one step made (0 means the fused path did not run).

    python scripts/bench_model_step.py [--preset 9m] [--steps 10] [--out runs/bench_model_step.json]
    python scripts/bench_model_step.py --preset cpu --cpu --steps 20   # the CPU default's tokens/s

It is a script, kept tolerant of small API drift: the model is built as dormouse.train builds it
(``LoopedByteLM(cfg.model, seed=...)``, ``model.arm.kernel = resolve_kernel(...)``), and anything
missing is reported rather than guessed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

ARMS = {
    "rezero": [],
    "gr": ["model.use_gr=true"],
    "attnres (kernel=auto)": ["model.use_attnres=true", "model.kernel=auto"],
    "attnres (kernel=torch)": ["model.use_attnres=true", "model.kernel=torch"],
}


def _count_fused_calls() -> dict[str, int]:
    """Wrap dormouse_kernels.depth_attend_fused with a call counter (the routing looks it up by
    attribute at call time, so the wrapper sees every fused read)."""
    counter = {"calls": 0}
    try:
        import dormouse_kernels as dk
    except Exception:
        return counter
    inner = dk.depth_attend_fused

    def counted(*args, **kwargs):
        counter["calls"] += 1
        return inner(*args, **kwargs)

    dk.depth_attend_fused = counted
    return counter


def build(overrides: list[str], device: torch.device):
    from dormouse.config import compose_config
    from dormouse.model import LoopedByteLM

    cfg = compose_config(overrides)
    kernel = "none"
    if cfg.model.use_attnres:
        try:
            from dormouse.attnres import resolve_kernel

            kernel = resolve_kernel(str(cfg.model.kernel), device)
        except Exception as exc:  # e.g. kernel=triton refused: say so in the table
            kernel = f"unresolved ({type(exc).__name__}: {exc})"[:80]
    model = LoopedByteLM(cfg.model, seed=0, kernel=kernel if kernel in ("torch", "triton") else "torch").to(device)
    return cfg, model, kernel


def time_arm(overrides: list[str], device: torch.device, steps: int, warmup: int, counter: dict) -> dict:
    cfg, model, kernel = build(overrides, device)
    batch = int(cfg.train.batch_size)
    seq = int(cfg.data.seq_len)
    params = model.param_groups(0.1) if hasattr(model, "param_groups") else model.parameters()
    opt = torch.optim.AdamW(params, lr=1e-3, fused=device.type == "cuda")
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else nullcontext
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randint(0, 256, (batch, seq), device=device, generator=gen)
    y = torch.randint(0, 256, (batch, seq), device=device, generator=gen)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with autocast():
            out = model(x)
        logits = out if isinstance(out, (list, tuple)) else [out]
        loss = torch.stack([F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), y.reshape(-1)) for lg in logits])
        loss = loss.mean()
        loss.backward()
        opt.step()
        return float(loss.detach())

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    counter["calls"] = 0
    times = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    return {
        "overrides": overrides,
        "kernel": kernel,
        "batch": batch,
        "seq_len": seq,
        "d_model": int(cfg.model.d_model),
        "max_iter": int(cfg.model.max_iter),
        "step_ms": statistics.median(times),
        "step_ms_all": times,
        "fused_calls_per_step": counter["calls"] / steps,
        "loss": loss,
        "peak_gib": peak,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="9m")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cpu", action="store_true", help="allow running on CPU (the CPU preset's timing)")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available() and not args.cpu:
        print("bench_model_step.py needs a CUDA GPU (pass --cpu for a smoke run)", file=sys.stderr)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    counter = _count_fused_calls()
    rows = {}
    for name, extra in ARMS.items():
        overrides = [f"preset={args.preset}", *extra]
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            rows[name] = time_arm(overrides, device, args.steps, args.warmup, counter)
        except Exception as exc:  # one broken arm must not hide the others
            rows[name] = {"overrides": overrides, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(name, {k: v for k, v in rows[name].items() if k != "step_ms_all"}, flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    base = rows.get("rezero", {}).get("step_ms")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"wrote {args.out}")

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"training step, preset={args.preset} (median of {args.steps} steps, {device.type})")
    for col in ("arm", "read path", "step ms", "tok/s", "x ReZero", "fused calls/step", "peak GiB"):
        t.add_column(col, justify="right" if col != "arm" else "left")
    for name, r in rows.items():
        if "error" in r:
            t.add_row(name, "-", r["error"][:60], "-", "-", "-", "-")
            continue
        ratio = f"{r['step_ms'] / base:.3f}" if base else "-"
        tok_s = r["batch"] * r["seq_len"] / (r["step_ms"] / 1e3)
        fused = f"{r['fused_calls_per_step']:.0f}"
        t.add_row(name, str(r["kernel"]), f"{r['step_ms']:.2f}", f"{tok_s:,.0f}", ratio, fused, f"{r['peak_gib']:.2f}")
    Console(width=160).print(t)
    return 0 if all("error" not in r for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
