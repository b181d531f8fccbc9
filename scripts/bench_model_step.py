#!/usr/bin/env python
"""Time one training step (forward + backward + AdamW) of every arm, interleaved, at any preset.

Arms: ``prenorm`` (the plain pre-norm residual, the default baseline: ``--baseline``), ``rezero``, ``gr``,
``attnres`` (Full) and ``attnres_block`` (Block, S = 2) with the torch read, and on CUDA ``attnres_fused`` /
``attnres_block_fused`` (``model.kernel=triton``), and the field's arms (``delta_attnres``, ``mhc``, ``laurel``,
``denseformer``, ``injection``, ``value_residual``). Each arm is a fresh model from the same seed, run as
dormouse.train.loop runs it: bf16 autocast on CUDA, the preset's batch and sequence length, readouts as
``train.readout``. ``--modes`` adds the compiled forward: ``regional`` (``LoopedByteLM.compile_regions()``, what
``train.compile=true`` runs: each sublayer and the final norm compiled once, the loop and the arm eager),
``compile`` (``LoopedByteLM.compile_whole()``, ``train.compile_scope=whole``: the whole forward as one graph) and
``reduce-overhead`` (the whole forward with CUDA graphs).

Timing is made for a shared, noisy machine: every (arm, mode) is built and warmed up first (compiles
included), then the variants are **interleaved** (A B C A B C ...) for ``--rounds`` rounds of ``--steps``
steps each, so load that drifts hits all of them alike. The table gives, per variant, the median over
rounds of the per-round median step time, tokens/s, and the median over rounds of the per-round ratio to
the baseline in the same mode (ratios are more robust to load than absolute times), with a 95 % bootstrap
interval of that median: on a noisy machine, whether a goal like "<= x1.10" is met is a question of that
interval, and more ``--rounds`` narrow it (on the project's 2-core VM, 30 rounds gave about +-0.04).

    python scripts/bench_model_step.py --preset cpu --cpu                     # the CPU default preset
    python scripts/bench_model_step.py --preset 9m --modes eager compile reduce-overhead   # on a GPU
    python scripts/bench_model_step.py --preset cpu --cpu --arms rezero attnres --rounds 3 --steps 3

Also prints, per variant, the probe counts of one step (``ran/asked``: the arm ran inside the compiled
graph too) and, on CUDA, how many fused-kernel calls one step made and the peak memory; and the
**arithmetic** of one step: the FLOPs of its matmuls and attention, forward and backward, as
``torch.utils.flop_counter.FlopCounterMode`` counts them on the eager model (causal attention counted
whole, as torch counts it), and their ratio to the baseline's. Last, per arm and mode, **the cost beyond
the arithmetic**: (step ratio) / (FLOP ratio), with its 95 % interval, against issue 23's goals (<= 1.03
compiled, <= 1.08 eager; ``GOALS``): 1.00 means the arm costs exactly its FLOPs at the baseline's rate.

    python scripts/bench_model_step.py --preset cpu --cpu --rounds 30 --steps 2 --warmup 2 --modes eager compile
    python scripts/bench_model_step.py --preset cpu --cpu --rounds 30 --steps 2 --warmup 2 --modes eager compile \\
        --extra model.max_iter=4 data.seq_len=64 train.batch_size=12        # nanoGPT's baby shape
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ARMS: dict[str, list[str]] = {
    "prenorm": ["model.use_prenorm=true"],
    "rezero": [],
    "gr": ["model.use_gr=true"],
    "attnres": ["model.use_attnres=true", "model.kernel=torch"],
    "attnres_block": ["model.use_attnres=true", "model.kernel=torch", "model.attnres.block_size=2"],
    "attnres_fused": ["model.use_attnres=true", "model.kernel=triton"],
    "attnres_block_fused": ["model.use_attnres=true", "model.kernel=triton", "model.attnres.block_size=2"],
    "delta_attnres": ["model.use_delta_attnres=true"],
    "mhc": ["model.use_mhc=true"],
    "laurel": ["model.use_laurel=true"],
    "denseformer": ["model.use_denseformer=true"],
    "injection": ["model.use_injection=true"],
    "value_residual": ["model.use_value_residual=true"],
}
CUDA_ONLY = ("attnres_fused", "attnres_block_fused")
MODES = ("eager", "regional", "compile", "reduce-overhead")
# Issue 23's goals: an arm's step may cost at most this much more than its arithmetic, per mode, i.e.
# (step ratio to the baseline) / (FLOP ratio to the baseline) <= goal, judged by the interval's upper end.
GOALS = {"eager": 1.08, "regional": 1.03, "compile": 1.03, "reduce-overhead": 1.03}


def _register_cpu_attention_flops() -> None:
    """FlopCounterMode knows CUDA's SDPA kernels, not the CPU one: count it with torch's own formulas."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    if aten._scaled_dot_product_flash_attention_for_cpu in fc.flop_registry:
        return

    @fc.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu, get_raw=True)
    def _forward(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return fc.sdpa_flop_count(query.shape, key.shape, value.shape)

    @fc.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward, get_raw=True)
    def _backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return fc.sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


def step_flops(v: Variant) -> int:
    """FLOPs of one training step of the eager model (matmuls and attention, forward and backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    _register_cpu_attention_flops()
    with FlopCounterMode(display=False) as counter, v.autocast():
        logits = v.model(v.x, readouts=v.readout)
    with FlopCounterMode(display=False) as counter_backward:
        losses = [F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), v.y.reshape(-1)) for lg in logits]
        torch.stack(losses).mean().backward()
    v.opt.zero_grad(set_to_none=True)
    return counter.get_total_flops() + counter_backward.get_total_flops()


def _count_fused_calls() -> dict[str, int]:
    """Wrap dormouse_kernels.depth_attend_fused with a call counter (the routing looks it up by attribute at
    call time). Under torch.compile the wrapper runs at trace time only, so the count is for eager steps."""
    counter = {"calls": 0}
    try:
        import dormouse_kernels as dk
    except Exception:
        return counter
    inner = dk.depth_attend_fused

    def counted(*args: Any, **kwargs: Any) -> Any:
        counter["calls"] += 1
        return inner(*args, **kwargs)

    dk.depth_attend_fused = counted
    return counter


class Variant:
    """One (arm, mode): a model, its optimizer, a fixed batch and a ``step()``."""

    def __init__(self, arm: str, mode: str, preset: str, device: torch.device, extra: tuple[str, ...] = ()) -> None:
        from dormouse.config.schema import compose_config
        from dormouse.model.looped import LoopedByteLM
        from dormouse.ops.attnres import resolve_kernel

        self.arm, self.mode, self.device = arm, mode, device
        cfg = compose_config([f"preset={preset}", *ARMS[arm], *extra])
        self.kernel = resolve_kernel(str(cfg.model.kernel), device) if cfg.model.use_attnres else "none"
        self.model = LoopedByteLM(cfg.model, seed=0, kernel=self.kernel if self.kernel != "none" else "torch")
        self.model.to(device)
        self.model.counters.to(device)  # the model's own counters, beside it (in-graph adds)
        self.forward: Callable[..., Any] = self.model
        if mode == "regional":
            self.forward = self.model.compile_regions()
        elif mode != "eager":
            self.forward = self.model.compile_whole(mode=None if mode == "compile" else mode)
        self.batch, self.seq = int(cfg.train.batch_size), int(cfg.data.seq_len)
        self.readout = str(cfg.train.readout)
        self.opt = torch.optim.AdamW(self.model.param_groups(0.1), lr=1e-3, fused=device.type == "cuda")
        gen = torch.Generator(device=device).manual_seed(0)
        self.x = torch.randint(0, 256, (self.batch, self.seq), device=device, generator=gen)
        self.y = torch.randint(0, 256, (self.batch, self.seq), device=device, generator=gen)
        self.autocast = (
            (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else nullcontext
        )
        self.d_model, self.max_iter = int(cfg.model.d_model), int(cfg.model.max_iter)

    def step(self) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            logits = self.forward(self.x, readouts=self.readout)
        losses = [F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), self.y.reshape(-1)) for lg in logits]
        loss = torch.stack(losses).mean()
        loss.backward()
        self.opt.step()
        return loss.detach()

    @property
    def name(self) -> str:
        return f"{self.arm} [{self.mode}]"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ci95(values: list[float]) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the median (scipy.stats.bootstrap, fixed seed): how well the
    rounds resolve a ratio on this machine."""
    import numpy as np
    from scipy.stats import bootstrap

    res = bootstrap((np.asarray(values),), np.median, confidence_level=0.95, method="percentile", random_state=0)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def time_steps(v: Variant, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        _sync(v.device)
        t0 = time.perf_counter()
        v.step()
        _sync(v.device)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def quotient_rows(rows: dict[str, dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per (arm, mode): the step ratio to the baseline, the FLOP ratio, and their quotient (the cost beyond the
    arm's arithmetic) with its 95 % interval and the verdict on issue 23's goal. The FLOP ratio is exact (a
    count), so the quotient's interval is the step ratio's divided by it."""
    out = []
    for name, r in rows.items():
        if "error" in r or r.get("arm") == baseline or r.get("x_base") is None or not r.get("flop_x_base"):
            continue
        ci = r.get("x_base_ci95")
        q = r["x_base"] / r["flop_x_base"]
        q_ci = (ci[0] / r["flop_x_base"], ci[1] / r["flop_x_base"]) if ci else None
        goal = GOALS[r["mode"]]
        verdict = "-" if q_ci is None else ("met" if q_ci[1] <= goal else ("not met" if q_ci[0] > goal else "open"))
        out.append({"variant": name, "step_x": r["x_base"], "step_x_ci95": ci, "flop_x": r["flop_x_base"],
                    "quotient": q, "quotient_ci95": q_ci, "goal": goal, "verdict": verdict})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="9m")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), help="default: all (the fused ones on CUDA only)")
    ap.add_argument("--baseline", choices=list(ARMS), default="prenorm",
                    help="the arm every ratio is taken to (default: the plain pre-norm residual)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=["eager"])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per variant per round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per variant first (compiles here)")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every model (another shape)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    ap.add_argument("--out", type=Path, help="write every round's times here as JSON")
    ap.add_argument("--cpu", action="store_true", help="allow running on CPU (the CPU preset's timing)")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available() and not args.cpu:
        print("bench_model_step.py: no CUDA GPU (pass --cpu to time on the CPU)", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    arms = args.arms or [a for a in ARMS if device.type == "cuda" or a not in CUDA_ONLY]
    baseline = args.baseline
    if baseline not in arms:
        arms = [baseline, *arms]
    counter = _count_fused_calls()
    variants: list[Variant] = []
    info: dict[str, dict[str, Any]] = {}
    for mode in args.modes:
        for arm in arms:
            name = f"{arm} [{mode}]"
            try:
                v = Variant(arm, mode, args.preset, device, tuple(args.extra))
                t0 = time.perf_counter()
                counter["calls"] = 0
                for _ in range(args.warmup):
                    v.step()
                _sync(device)
                v.model.counters.reset()
                loss = float(v.step())
                snap = v.model.counters.snapshot()
                counted = "attnres" if arm.startswith("attnres") else arm
                info[name] = {
                    "arm": arm, "mode": mode, "kernel": v.kernel, "warmup_s": time.perf_counter() - t0,
                    "loss": loss, "counts": f"{snap[f'{counted}_ran']}/{snap[f'{counted}_asked']}",
                    "fused_calls_per_step": counter["calls"] / (args.warmup + 1) if mode == "eager" else None,
                    "gflop": step_flops(v) / 1e9,
                }  # fmt: skip
                variants.append(v)
                print(f"built and warmed up {name} in {info[name]['warmup_s']:.1f} s", flush=True)
            except Exception as exc:  # one broken variant must not hide the others
                info[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                print(f"{name}: {info[name]['error']}", flush=True)

    times: dict[str, list[list[float]]] = {v.name: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            times[v.name].append(time_steps(v, args.steps))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {statistics.median(t[-1]):.1f} ms" for n, t in times.items()), flush=True)

    # the GPU machine has only what gpu_check.sh carries: there the timings matter more than their interval
    has_scipy = importlib.util.find_spec("scipy") is not None
    if not has_scipy:
        print("bench_model_step.py: scipy is not installed, so no 95% CI column (pip install scipy)", flush=True)
    rows: dict[str, dict[str, Any]] = {}
    for v in variants:
        per_round = [statistics.median(t) for t in times[v.name]]
        base_name = f"{baseline} [{v.mode}]"
        base = [statistics.median(t) for t in times.get(base_name, [])]
        ratios = [a / b for a, b in zip(per_round, base)] if base else []
        step_ms = statistics.median(per_round)
        rows[v.name] = {
            **info[v.name], "step_ms": step_ms, "tok_s": v.batch * v.seq / (step_ms / 1e3), "baseline": baseline,
            "x_base": statistics.median(ratios) if ratios else None, "round_ms": per_round,
            "x_base_ci95": median_ci95(ratios) if has_scipy and len(ratios) >= 3 and v.arm != baseline else None,
        }  # fmt: skip
        if base_name in info and "gflop" in info[base_name]:
            rows[v.name]["flop_x_base"] = info[v.name]["gflop"] / info[base_name]["gflop"]
        if device.type == "cuda":
            rows[v.name]["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    for name, r in info.items():
        rows.setdefault(name, r)

    shape = f"preset={args.preset}{' ' + ' '.join(args.extra) if args.extra else ''}"
    title = (f"training step, {shape}, {device.type}, {torch.get_num_threads()} threads: median over "
             f"{args.rounds} interleaved rounds of the median of {args.steps} steps; ratios to {baseline}")
    print("\n" + title)
    print(f"{'variant':32s} {'read':7s} {'step ms':>9s} {'tok/s':>9s} {'x base':>7s} {'ran/asked':>10s} "
          f"{'95% CI':>13s} {'fused/step':>10s} {'warmup s':>9s} {'GFLOP':>7s} {'FLOP x':>7s}")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:32s} {r['error'][:100]}")
            continue
        ratio = f"{r['x_base']:.3f}" if r["x_base"] is not None else "-"
        fused = f"{r['fused_calls_per_step']:.0f}" if r["fused_calls_per_step"] is not None else "-"
        flop_ratio = f"{r['flop_x_base']:.3f}" if r.get("flop_x_base") is not None else "-"
        ci = r.get("x_base_ci95")
        ci_text = f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "-"
        print(f"{name:32s} {r['kernel']:7s} {r['step_ms']:9.1f} {r['tok_s']:9,.0f} {ratio:>7s} {r['counts']:>10s} "
              f"{ci_text:>13s} {fused:>10s} {r['warmup_s']:9.1f} {r['gflop']:7.2f} {flop_ratio:>7s}")
    quotients = quotient_rows(rows, baseline)
    if quotients:
        print(f"\ncost beyond arithmetic: (step x {baseline}) / (FLOP x {baseline}); goal <= "
              + ", ".join(f"{g} {m}" for m, g in GOALS.items() if m in args.modes) + " (upper end of the 95 % CI)")
        print(f"{'variant':32s} {'step x':>7s} {'step 95% CI':>13s} {'FLOP x':>7s} {'quotient':>9s} "
              f"{'quotient 95% CI':>16s} {'goal':>5s} {'verdict':>8s}")
        for q in quotients:
            ci, qci = q["step_x_ci95"], q["quotient_ci95"]
            ci_text = f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "-"
            qci_text = f"{qci[0]:.3f}-{qci[1]:.3f}" if qci else "-"
            print(f"{q['variant']:32s} {q['step_x']:7.3f} {ci_text:>13s} {q['flop_x']:7.3f} {q['quotient']:9.3f} "
                  f"{qci_text:>16s} {q['goal']:5.2f} {q['verdict']:>8s}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                "torch": torch.__version__, "preset": args.preset, "extra": args.extra, "baseline": baseline,
                "rounds": args.rounds, "steps": args.steps, "threads": torch.get_num_threads()}
        args.out.write_text(json.dumps({"meta": meta, "rows": rows, "quotients": quotients}, indent=1))
        print(f"wrote {args.out}")
    return 0 if all("error" not in r for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
