#!/usr/bin/env python
"""How long ``train.compile`` takes to compile, cold and warm, next to nanoGPT's ``torch.compile``.

Every measurement runs in a **fresh process with its own empty Inductor cache directory**
(``TORCHINDUCTOR_CACHE_DIR``: the FX-graph and AOTAutograd caches live there), so a cold compile is cold; the
same process is then run again on the same directory, which is the warm start a resumed run or the next run
of a comparison gets. Each process builds its model at nanoGPT's "baby" CPU shape (d 128, 4 heads, context 64,
batch 12; ``bench_vs_nanogpt.SHAPE``) and takes ``STEPS`` training steps (forward, cross-entropy, backward,
clipping at 1.0, AdamW). Reported:

* **compile s**: the wall time of all the steps less ``STEPS`` x the steady step (the median of the last five):
  what compiling added, including any steps that ran slow while kernels were still being built (a cold
  12-iteration model ran its next five steps at 620 ms against a steady 105 ms);
* the steady step time;
* where the compile went: the largest of Dynamo's own per-function compile timings (the table
  ``torch._dynamo.utils.compile_times()`` prints; nested, so they overlap).

Variants: nanoGPT (its ``model.py`` from a checkout, 4 layers, compiled as its train.py compiles) and
dormouse's pre-norm arm (``model.use_prenorm=true``, one readout: nanoGPT's residual and objective) at each
``--max-iters`` (4 is nanoGPT's 8 sublayers) in each ``--scopes`` (``regional``: ``train.compile``'s default,
:meth:`LoopedByteLM.compile_regions`; ``whole``: ``train.compile_scope=whole``). ``--arms`` adds other arms.

    python scripts/bench_compile_time.py --nanogpt PATH                          # regional at 3, 6, 12 + nanoGPT
    python scripts/bench_compile_time.py --nanogpt PATH --scopes regional whole --max-iters 4
    python scripts/bench_compile_time.py --nanogpt PATH --arms prenorm attnres --max-iters 4 --out runs/ct.json

A cold ``whole`` compile at this shape took 11-13 min per variant on the project's 2-core VM and grows faster
than the loop (``--timeout`` bounds each process; a variant past it is reported as such).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_vs_nanogpt import SHAPE

ARMS = {"prenorm": ["model.use_prenorm=true"], "rezero": [], "gr": ["model.use_gr=true"],
        "attnres": ["model.use_attnres=true", "model.kernel=torch"],
        "attnres_block": ["model.use_attnres=true", "model.kernel=torch", "model.attnres.block_size=2"]}


STEPS = 20  # per process: the first compiles, the last five give the steady step


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this (fresh) process: build, one step, five more; the timings and Dynamo's phases."""
    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import compilation_time_metrics

    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (SHAPE["batch"], SHAPE["context"]), generator=gen)
    y = torch.randint(0, 256, (SHAPE["batch"], SHAPE["context"]), generator=gen)
    if spec["variant"] == "nanogpt":
        sys.path.insert(0, spec["nanogpt"])
        from model import GPT, GPTConfig  # nanoGPT's model.py, run from its checkout

        model = GPT(GPTConfig(block_size=SHAPE["context"], vocab_size=256, n_layer=SHAPE["layers"],
                              n_head=SHAPE["heads"], n_embd=SHAPE["d"], dropout=0.0, bias=False))
        run = torch.compile(model)

        def loss_fn() -> torch.Tensor:
            return run(x, y)[1]
    else:
        from dormouse.config.schema import compose_config
        from dormouse.model.looped import LoopedByteLM

        cfg = compose_config(["preset=cpu", f"model.d_model={SHAPE['d']}", f"model.n_heads={SHAPE['heads']}",
                              f"model.max_iter={spec['max_iter']}", *ARMS[spec["variant"]]])
        model = LoopedByteLM(cfg.model, seed=0)
        run = model.compile_regions() if spec["scope"] == "regional" else model.compile_whole()

        def loss_fn() -> torch.Tensor:
            return F.cross_entropy(run(x, readouts="last")[-1].reshape(-1, 256), y.reshape(-1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        loss = loss_fn()
        float(loss.detach())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    step = statistics.median(times[-5:])
    # Dynamo's per-function compile timings, the table compile_times() prints (seconds, summed over calls)
    phases = {k: sum(v) for k, v in compilation_time_metrics.items()}
    return {"first_s": times[0], "step_ms": step * 1e3, "compile_s": sum(times) - STEPS * step,
            "phases": dict(sorted(phases.items(), key=lambda kv: -kv[1])[:8])}


def measure(spec: dict[str, Any], cache: Path, timeout: int) -> dict[str, Any]:
    """``spec`` in a fresh process on the Inductor cache ``cache``."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=Path(__file__).resolve().parent)
    except subprocess.TimeoutExpired:
        return {"timeout_s": timeout}
    if proc.returncode != 0:
        raise RuntimeError(f"{spec} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout (3adf61e); without it nanoGPT is left out")
    ap.add_argument("--scopes", nargs="+", choices=["regional", "whole"], default=["regional"])
    ap.add_argument("--max-iters", nargs="+", type=int, default=[3, 6, 12])
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=["prenorm"])
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    ap.add_argument("--out", type=Path, help="write every measurement here as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    specs: list[dict[str, Any]] = []
    if args.nanogpt:
        specs.append({"variant": "nanogpt", "nanogpt": str(args.nanogpt.resolve())})
    specs += [{"variant": arm, "scope": scope, "max_iter": n}
              for scope in args.scopes for arm in args.arms for n in args.max_iters]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_compile_time_") as tmp:
        for i, spec in enumerate(specs):
            cache = Path(tmp) / f"cache{i}"
            cold = measure(spec, cache, args.timeout)
            warm = measure(spec, cache, args.timeout) if "timeout_s" not in cold else {}
            rows.append({**spec, "cold": cold, "warm": warm})
            print(f"{_label(spec):34s} " + _cells(cold, warm), flush=True)
    base = next((r["cold"].get("compile_s") for r in rows if r["variant"] == "nanogpt"), None)
    print(f"\ncold and warm compile, shape {SHAPE}, each in a fresh process on its own cache directory")
    print(f"  {'variant':34s} {'cold s':>7s} {'x nanoGPT':>9s} {'warm s':>7s} {'step ms':>8s}  "
          "where the cold compile went")
    for r in rows:
        cold, warm = r["cold"], r["warm"]
        if "timeout_s" in cold:
            print(f"  {_label(r):34s} > {cold['timeout_s']} s (stopped)")
            continue
        ratio = f"{cold['compile_s'] / base:9.2f}" if base else f"{'-':>9s}"
        where = ", ".join(f"{k} {v:.1f}" for k, v in list(cold["phases"].items())[:4])
        print(f"  {_label(r):34s} {cold['compile_s']:7.1f} {ratio} {warm['compile_s']:7.1f} "
              f"{cold['step_ms']:8.2f}  {where}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"shape": SHAPE, "rows": rows}, indent=1))
    return 0


def _label(spec: dict[str, Any]) -> str:
    if spec["variant"] == "nanogpt":
        return f"nanoGPT ({SHAPE['layers']} layers)"
    return f"dormouse {spec['variant']} {spec['scope']} max_iter={spec['max_iter']}"


def _cells(cold: dict[str, Any], warm: dict[str, Any]) -> str:
    if "timeout_s" in cold:
        return f"cold > {cold['timeout_s']} s"
    return f"cold {cold['compile_s']:.1f} s, warm {warm['compile_s']:.1f} s, step {cold['step_ms']:.1f} ms"


if __name__ == "__main__":
    sys.exit(main())
