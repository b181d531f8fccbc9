#!/usr/bin/env python
"""Training tokens/s of dormouse (ReZero, AttnRes) next to nanoGPT's, side by side on one CPU.

nanoGPT (Karpathy, https://github.com/karpathy/nanoGPT, commit 3adf61e) is the public reference for a
small GPT's training speed. It is run from its own repository (never vendored here) in its README's
"baby" CPU shape: d 128, 4 heads, 4 layers, context 64, batch 12, dropout 0, fp32, no compile. dormouse
runs the same shape: ``model.max_iter=4`` gives 8 sublayers, as nanoGPT's 4 layers do. Both train on the
**same bytes and split**: dormouse's embedded corpus, whose train and val halves are written as nanoGPT's
``train.bin``/``val.bin`` (vocabulary 256, one token per byte).

The arms are interleaved (nanoGPT, ReZero, AttnRes, nanoGPT, ...) for ``--rounds`` rounds, so a machine
whose load drifts slows every arm alike; the table gives each arm's median over rounds and the median of
the per-round ratios to nanoGPT (a ratio is more robust to load than an absolute figure).

How tokens/s is measured, per run of ``--steps`` steps:

* nanoGPT: its own log line ``iter k: ... time X ms`` (wall time of one iteration, the next batch's load
  included); tokens/s = 12 * 64 * (steps - 2) / sum of X over iterations 2.. (iteration 0 runs an eval;
  iteration 1 pays the first backward's set-up).
* dormouse: ``tok/s`` of the final row of ``metrics.jsonl``, i.e. the eval line's training tokens over the
  training time of the window (one window = the whole run, its first steps included; evaluation excluded).

dormouse runs twice per arm: with its default objective (``train.readout=all``: the mean cross-entropy of one
readout per iteration, 4 here) and with nanoGPT's (``train.readout=last``: one readout, after the last layer).
The second is the like-for-like arithmetic; the first is what a dormouse run costs.

    python scripts/bench_vs_nanogpt.py --nanogpt /path/to/nanoGPT            # 6 rounds x 200 steps
    python scripts/bench_vs_nanogpt.py --nanogpt DIR --rounds 2 --steps 50   # a quick look

``--flops`` prints, before the rounds, the arithmetic of one training step of each (matmuls and attention,
forward and backward, as ``torch.utils.flop_counter.FlopCounterMode`` counts them; nanoGPT's model imported
from the checkout): how much of a tokens/s gap is arithmetic rather than overhead.

``--model-step`` times, instead of runs, one training step (forward, cross-entropy, backward, clipping at
1.0, AdamW) of nanoGPT's model and of each dormouse arm in ONE process, interleaved (in a shuffled order
each round) for ``--rounds`` rounds of ``--steps`` steps on one fixed batch: no data loading, no logging, and
drift hits both alike. Real runs on a noisy machine do not resolve a 10 % difference in 3 rounds; this does,
for the model's own cost.

``--model-step --compile`` adds both models compiled (nanoGPT as its train.py does, dormouse as
``train.compile``), and prints each dormouse variant's **time per FLOP against nanoGPT's** in the same mode,
(step ratio) / (FLOP ratio), with a 95 % bootstrap interval: issue 23's goal is <= 1. ``--components`` times the
parts where the models differ (RMSNorm vs LayerNorm, RoPE vs a learned position embedding, SwiGLU vs GELU),
forward + backward, with their FLOPs and their share of a step. ``--profile`` lists, from torch.profiler, the
ops where the like-for-like step (PreNorm, one readout; eager, or compiled with ``--compile``) spends time that
nanoGPT's does not, then the step's phases (forward, backward, clipping + AdamW).

    python scripts/bench_vs_nanogpt.py --nanogpt DIR --model-step --compile --components --rounds 20 --steps 5
    python scripts/bench_vs_nanogpt.py --nanogpt DIR --profile --steps 20             # eager
    python scripts/bench_vs_nanogpt.py --nanogpt DIR --profile --compile --steps 20   # compiled

``--nanogpt`` is a checkout of nanoGPT (``git clone https://github.com/karpathy/nanoGPT; git -C nanoGPT
checkout 3adf61e``); the script copies it to a temporary directory and writes the data there, so the
checkout stays untouched.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from bench_model_step import median_ci95
from bench_train_runs import train_tok_s

SHAPE = {"d": 128, "heads": 4, "layers": 4, "context": 64, "batch": 12}
_ITER = re.compile(r"^iter (\d+): loss [-\d.naninf]+, time ([\d.]+)ms")

DORMOUSE_ARMS: dict[str, list[str]] = {
    "dormouse ReZero": [],
    "dormouse AttnRes": ["model.use_attnres=true", "model.kernel=torch"],
    # nanoGPT's objective: one cross-entropy, after the last layer (dormouse's default, readout=all, averages
    # one per iteration: 3 more head matmuls and softmaxes at max_iter=4)
    "dormouse ReZero (readout=last)": ["train.readout=last"],
    "dormouse AttnRes (readout=last)": ["model.use_attnres=true", "model.kernel=torch", "train.readout=last"],
    # the plain pre-norm residual: nanoGPT's own residual, so the closest like-for-like model
    "dormouse PreNorm (readout=last)": ["model.use_prenorm=true", "train.readout=last"],
}


def write_nanogpt_data(root: Path) -> Path:
    """dormouse's embedded corpus, split as dormouse splits it, as nanoGPT's uint16 token files."""
    from dormouse.config.schema import compose_config
    from dormouse.data import load_corpus

    cfg = compose_config([f"data.seq_len={SHAPE['context']}"])
    corpus = load_corpus(cfg.data)
    data_dir = root / "data" / "dormouse_bytes"
    data_dir.mkdir(parents=True, exist_ok=True)
    corpus.train.numpy().astype(np.uint16).tofile(data_dir / "train.bin")
    corpus.val.numpy().astype(np.uint16).tofile(data_dir / "val.bin")
    with open(data_dir / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 256}, f)
    return data_dir


def run_nanogpt(root: Path, steps: int, out: Path) -> float:
    cmd = [
        sys.executable, "train.py", "config/train_shakespeare_char.py", "--dataset=dormouse_bytes",
        "--device=cpu", "--compile=False", "--dtype=float32", f"--out_dir={out}",
        f"--n_layer={SHAPE['layers']}", f"--n_head={SHAPE['heads']}", f"--n_embd={SHAPE['d']}",
        f"--block_size={SHAPE['context']}", f"--batch_size={SHAPE['batch']}", "--dropout=0.0",
        f"--max_iters={steps}", f"--lr_decay_iters={steps}", "--eval_iters=1", "--eval_interval=1000000",
        "--log_interval=1", "--always_save_checkpoint=False",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"nanoGPT failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    times = {int(m.group(1)): float(m.group(2)) for m in map(_ITER.match, proc.stdout.splitlines()) if m}
    timed = [ms for k, ms in times.items() if k >= 2]
    if not timed:
        raise RuntimeError(f"nanoGPT printed no iteration times:\n{proc.stdout[-2000:]}")
    return SHAPE["batch"] * SHAPE["context"] * len(timed) / (sum(timed) / 1e3)


def run_dormouse(extra: list[str], steps: int, run_dir: Path, name: str) -> float:
    overrides = [
        "preset=cpu", f"model.d_model={SHAPE['d']}", f"model.n_heads={SHAPE['heads']}", "model.max_iter=4",
        f"data.seq_len={SHAPE['context']}", f"train.batch_size={SHAPE['batch']}", f"train.steps={steps}",
        f"train.eval_every={steps}", "train.warmup=10", "train.ckpt_every=0", "data.eval_bytes=4096", *extra,
    ]  # fmt: skip
    return train_tok_s(overrides, run_dir, name)


def _dormouse_loss(model: Any, readouts: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dormouse's objective: the mean cross-entropy over the readouts."""
    logits = model(x, readouts=readouts)
    return torch.stack([F.cross_entropy(lg.reshape(-1, 256), y.reshape(-1)) for lg in logits]).mean()


def _nanogpt_model(nanogpt: Path) -> Any:
    sys.path.insert(0, str(nanogpt))
    from model import GPT, GPTConfig  # nanoGPT's model.py, run from its checkout

    return GPT(GPTConfig(block_size=SHAPE["context"], vocab_size=256, n_layer=SHAPE["layers"],
                         n_head=SHAPE["heads"], n_embd=SHAPE["d"], dropout=0.0, bias=False))  # fmt: skip


def _dormouse_model(extra: list[str]) -> tuple[Any, str]:
    from dormouse.config.schema import compose_config
    from dormouse.model.looped import LoopedByteLM

    cfg = compose_config(["preset=cpu", f"model.d_model={SHAPE['d']}", f"model.n_heads={SHAPE['heads']}",
                          "model.max_iter=4", *[o for o in extra if not o.startswith("train.")]])  # fmt: skip
    return LoopedByteLM(cfg.model, seed=0, kernel="torch"), "last" if "train.readout=last" in extra else "all"


def print_step_flops(nanogpt: Path) -> None:
    """FLOPs of one training step (forward + backward) of nanoGPT's model and of each dormouse arm."""
    x, y = _batch()
    nano = _nanogpt_model(nanogpt)
    base = _flops_of(lambda: nano(x, y)[1])
    print(f"FLOPs of one training step (matmuls + attention, fwd + bwd), shape {SHAPE}:")
    print(f"  {'nanoGPT':32s} {base / 1e9:6.3f} GFLOP   x1.000")
    for arm, extra in DORMOUSE_ARMS.items():
        model, readouts = _dormouse_model(extra)
        n = _flops_of(lambda m=model, r=readouts: _dormouse_loss(m, r, x, y))
        print(f"  {arm:32s} {n / 1e9:6.3f} GFLOP   x{n / base:.3f}")


def _flops_of(loss_fn: Any) -> int:
    """FLOPs (matmuls and attention, forward and backward) of one loss and its backward, torch's count."""
    from bench_model_step import _register_cpu_attention_flops
    from torch.utils.flop_counter import FlopCounterMode

    _register_cpu_attention_flops()
    with FlopCounterMode(display=False) as counter:
        loss_fn().backward()
    return counter.get_total_flops()


PHASES = ("forward", "backward", "clip + AdamW")


def _train_step(model: Any, loss_fn: Any, opt: torch.optim.Optimizer, phase_ms: dict[str, list[float]]) -> Any:
    """One training step as both loops take it: the loss, read; backward; clipping at 1.0; the optimizer.
    Each step appends the wall time of each of ``PHASES`` to ``phase_ms``."""

    def step() -> None:
        t0 = time.perf_counter()
        loss = loss_fn()
        float(loss.detach())  # both loops read the loss every step
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for phase, ms in zip(PHASES, (t1 - t0, t2 - t1, time.perf_counter() - t2)):
            phase_ms[phase].append(ms * 1e3)

    return step


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The one fixed batch every timed step trains on."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (SHAPE["batch"], SHAPE["context"]), generator=gen)
    return x, torch.randint(0, 256, (SHAPE["batch"], SHAPE["context"]), generator=gen)



@dataclass
class TimedModel:
    """One model set up for timing: the model, its loss on the uncompiled model (what FLOPs are counted on),
    its training step (compiled or not) and the wall times of that step's phases."""

    model: Any
    eager_loss: Callable[[], torch.Tensor]
    step: Callable[[], None]
    phase_ms: dict[str, list[float]]


def _nanogpt_timed(nanogpt: Path, mode: str, x: torch.Tensor, y: torch.Tensor) -> TimedModel:
    """nanoGPT's model and step; compiled (``mode`` "compile" or "regional"): ``torch.compile(model)``, as its
    train.py compiles (its layers are not weight-shared, so it has no regional form)."""
    nano = _nanogpt_model(nanogpt)
    run = nano if mode == "eager" else torch.compile(nano)
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    step = _train_step(nano, lambda: run(x, y)[1], nano.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu"), phases)
    return TimedModel(nano, lambda: nano(x, y)[1], step, phases)


def _dormouse_timed(extra: list[str], mode: str, x: torch.Tensor, y: torch.Tensor) -> TimedModel:
    """A dormouse variant's model and step; ``mode="regional"``: ``LoopedByteLM.compile_regions()``, as
    ``train.compile`` compiles; ``mode="compile"``: ``LoopedByteLM.compile_whole()`` (``train.compile_scope=whole``)."""
    model, readouts = _dormouse_model(extra)
    run = {"eager": model, "regional": model.compile_regions, "compile": model.compile_whole}[mode]
    run = run if mode == "eager" else run()
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-3, betas=(0.9, 0.99))
    step = _train_step(model, lambda: _dormouse_loss(run, readouts, x, y), opt, phases)
    return TimedModel(model, lambda: _dormouse_loss(model, readouts, x, y), step, phases)

def model_step_times(nanogpt: Path, rounds: int, steps: int, modes: list[str],
                     arms: list[str] | None = None) -> dict[str, Any]:
    """``--model-step``: one training step of each model, interleaved in this process, eager and (``--compile``)
    compiled: nanoGPT as its train.py compiles it (``torch.compile(model)``), dormouse as ``train.compile``
    does (``LoopedByteLM.compile_whole()``). Reported per variant: the step time, the FLOPs of the step, and
    **time per FLOP against nanoGPT's in the same mode**: (step ratio) / (FLOP ratio), median over rounds with a
    95 % bootstrap interval; <= 1 means dormouse does its arithmetic at least as fast as nanoGPT (the goal).
    The same quotient for the model alone (forward + backward, timed inside each step) follows: the clipping and
    AdamW of the step are work a FLOP count of the model does not see, and they scale with the parameters, which
    dormouse's weight-shared block has fewer of."""
    x, y = _batch()
    timed: dict[str, TimedModel] = {}
    for mode in modes:
        timed[f"nanoGPT [{mode}]"] = _nanogpt_timed(nanogpt, mode, x, y)
        for arm, extra in DORMOUSE_ARMS.items():
            if arms and arm not in arms:
                continue
            timed[f"{arm} [{mode}]"] = _dormouse_timed(extra, mode, x, y)
    flops = {name: _flops_of(t.eager_loss) for name, t in timed.items()}
    variants = {name: t.step for name, t in timed.items()}
    warmup_s: dict[str, float] = {}
    for name, step in variants.items():
        t0 = time.perf_counter()
        for _ in range(3):
            step()
        warmup_s[name] = time.perf_counter() - t0
        print(f"warmed up {name} in {warmup_s[name]:.1f} s", flush=True)
    ms: dict[str, list[float]] = {name: [] for name in variants}
    model_ms: dict[str, list[float]] = {name: [] for name in variants}  # forward + backward, per step
    # A fresh order each round: with a fixed order, load that drifts within a round favours whichever variant
    # sits nearer its nanoGPT baseline; shuffled, that bias averages out over rounds (seeded: rerunnable).
    order, shuffler = list(variants.items()), random.Random(0)
    for _ in range(rounds):
        shuffler.shuffle(order)
        for name, step in order:
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            ms[name].append((time.perf_counter() - t0) / steps * 1e3)
            phases = timed[name].phase_ms
            model_ms[name].append((sum(phases["forward"][-steps:]) + sum(phases["backward"][-steps:])) / steps)
    print(f"\ntraining step in one process, shape {SHAPE}, {torch.get_num_threads()} threads, {rounds} interleaved "
          f"rounds x {steps} steps (median over rounds); vs nanoGPT in the same mode; per FLOP = step ratio / FLOP "
          "ratio (<= 1: dormouse does its arithmetic at least as fast as nanoGPT); model = forward + backward only")
    print(f"  {'variant':44s} {'step ms':>8s} {'GFLOP':>6s} {'step x':>7s} {'FLOP x':>7s} {'per FLOP x':>10s} "
          f"{'95% CI':>13s} {'goal <= 1':>9s} {'model per FLOP x':>16s} {'95% CI':>13s}")
    rows: dict[str, Any] = {}
    for name, times in ms.items():
        mode = name.rsplit("[", 1)[1].rstrip("]")
        flop_x = flops[name] / flops[f"nanoGPT [{mode}]"]
        ratios = [a / b for a, b in zip(times, ms[f"nanoGPT [{mode}]"])]
        per_flop, ci = _per_flop(ratios, flop_x, name)
        model_per_flop, model_ci = _per_flop(
            [a / b for a, b in zip(model_ms[name], model_ms[f"nanoGPT [{mode}]"])], flop_x, name)
        verdict = "-" if ci is None else ("met" if ci[1] <= 1.0 else ("not met" if ci[0] > 1.0 else "open"))
        rows[name] = {"step_ms": statistics.median(times), "gflop": flops[name] / 1e9,
                      "step_x": statistics.median(ratios), "flop_x": flop_x,
                      "per_flop_x": per_flop, "per_flop_ci95": ci, "verdict": verdict,
                      "model_per_flop_x": model_per_flop, "model_per_flop_ci95": model_ci,
                      "warmup_s": warmup_s[name], "round_ms": times, "round_model_ms": model_ms[name]}  # fmt: skip
        print(f"  {name:44s} {statistics.median(times):8.2f} {flops[name] / 1e9:6.3f} {rows[name]['step_x']:7.3f} "
              f"{flop_x:7.3f} {per_flop:10.3f} {_ci_text(ci):>13s} {verdict:>9s} {model_per_flop:16.3f} "
              f"{_ci_text(model_ci):>13s}")
    return rows


def _per_flop(ratios: list[float], flop_x: float, name: str) -> tuple[float, tuple[float, float] | None]:
    """Median of the per-round (time ratio) / (FLOP ratio), and its 95 % bootstrap interval (none for nanoGPT's
    own row, or under 3 rounds)."""
    per_flop = [r / flop_x for r in ratios]
    ci = median_ci95(per_flop) if len(per_flop) >= 3 and not name.startswith("nanoGPT") else None
    return statistics.median(per_flop), ci


def _ci_text(ci: tuple[float, float] | None) -> str:
    return f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "-"


def profile_like_for_like(nanogpt: Path, steps: int, mode: str, top: int = 14) -> None:
    """``--profile``: where the step of the like-for-like dormouse model (PreNorm, one readout) spends time that
    nanoGPT's does not, eager or (``--compile``) compiled as ``--model-step`` compiles them: torch.profiler's self
    CPU time per op, per step, over ``steps`` steps each (after 3 unprofiled ones, which pay a compile), and the
    ops whose time differs most. The models run one after the other: the call counts are exact, a few per cent
    of one op's time is noise. Compiled, Inductor's graphs show as ``CompiledFxGraph`` calls. Then the step's
    phases (forward, backward, clipping + AdamW), timed without the profiler: the last is work a FLOP count of
    the model does not see, and it scales with the parameters, which a weight-shared block has fewer of."""
    x, y = _batch()
    timed = {"nanoGPT": _nanogpt_timed(nanogpt, mode, x, y),
             "dormouse PreNorm (readout=last)": _dormouse_timed(DORMOUSE_ARMS["dormouse PreNorm (readout=last)"],
                                                                mode, x, y)}  # fmt: skip
    from profile_step import op_differences, op_times

    ops = {name: op_times(t.step, steps, warmup=3) for name, t in timed.items()}
    base, ours = ops["nanoGPT"], ops["dormouse PreNorm (readout=last)"]
    print(f"\nself CPU time per step, {mode}, {steps} profiled steps each: nanoGPT "
          f"{sum(ms for _, ms in base.values()):.1f} ms, dormouse PreNorm (readout=last) "
          f"{sum(ms for _, ms in ours.values()):.1f} ms; the ops that differ most:")
    for k, ms, calls in op_differences(ours, base, top, either_way=True):
        print(f"  {k[:56]:56s} {ms:+7.2f} ms  {calls:+5.0f} calls  (nanoGPT {base.get(k, (0, 0))[1]:6.2f} ms)")
    # The phases, timed without the profiler and interleaved step by step. A FLOP count sees the forward and
    # backward; the optimizer's work grows with the parameters, and a weight-shared block has fewer of them.
    for t in timed.values():
        for times in t.phase_ms.values():
            times.clear()
    for _ in range(steps):
        for t in timed.values():
            t.step()
    print(f"\nthe step's phases, {mode}, wall ms per step (median of {steps} interleaved steps each):")
    print(f"  {'model':32s} {'params':>9s} " + " ".join(f"{p:>13s}" for p in PHASES))
    for name, t in timed.items():
        params = sum(q.numel() for q in t.model.parameters())
        print(f"  {name:32s} {params:9,d} " + " ".join(f"{statistics.median(t.phase_ms[p]):13.2f}" for p in PHASES))


def component_times(rounds: int, steps: int) -> dict[str, Any]:
    """``--components``: what each difference of model costs at the baby shape, against its arithmetic.
    Forward + backward of dormouse's part and nanoGPT's counterpart on the same [batch, context, d] input,
    interleaved: RMSNorm (``dormouse.ops.norm``) vs LayerNorm without bias (nanoGPT's); RoPE on q and k
    (``dormouse.model.looped.rope_qkv``, once per attention sublayer) vs a learned position embedding added once per
    forward; SwiGLU (hidden 8/3 d, rounded) vs GELU (hidden 4 d), both without their norms. Per step, one
    forward of the baby model runs each norm 2 x 4 + 1 times, RoPE 4 times, the position add once, each MLP
    4 times; the table gives each part's time per call and per step."""
    from dormouse.model.looped import SwiGLU, rope_qkv, rope_tables, swiglu_hidden
    from dormouse.ops.norm import RMSNorm

    torch.manual_seed(0)
    b, t, d, h = SHAPE["batch"], SHAPE["context"], SHAPE["d"], SHAPE["heads"]
    x = torch.randn(b, t, d, requires_grad=True)
    qkv = torch.randn(b, t, 3, h, d // h, requires_grad=True)
    cos, sin = rope_tables(t, d // h, 10000.0, torch.device("cpu"))
    rms, ln = RMSNorm(d), torch.nn.LayerNorm(d, bias=False)
    wpe = torch.nn.Embedding(t, d)
    pos = torch.arange(t)
    swiglu = SwiGLU(d, swiglu_hidden(d, None))
    gelu_mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d, bias=False), torch.nn.GELU(),
                                   torch.nn.Linear(4 * d, d, bias=False))  # fmt: skip

    def rope() -> torch.Tensor:
        qk, v = rope_qkv(qkv, cos[:, None, None, :], sin[:, None, None, :])
        return qk.sum() + v.sum()

    parts: dict[str, tuple[Any, int]] = {  # name -> (loss of one call, calls per baby-model step)
        "dormouse RMSNorm": (lambda: rms(x).sum(), 9),
        "nanoGPT LayerNorm": (lambda: ln(x).sum(), 9),
        "dormouse RoPE (q, k)": (rope, 4),
        "nanoGPT position embedding": (lambda: (x + wpe(pos)).sum(), 1),
        "dormouse SwiGLU (no norm)": (lambda: _swiglu_no_norm(swiglu, x).sum(), 4),
        "nanoGPT GELU MLP": (lambda: gelu_mlp(x).sum(), 4),
    }
    flops = {name: _flops_of(fn) for name, (fn, _) in parts.items()}
    us: dict[str, list[float]] = {name: [] for name in parts}
    for fn, _ in parts.values():
        for _ in range(5):
            fn().backward()
    for _ in range(rounds):
        for name, (fn, _) in parts.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                fn().backward()
            us[name].append((time.perf_counter() - t0) / steps * 1e6)
    print(f"\nparts of the model, forward + backward, input [{b}, {t}, {d}], {rounds} interleaved rounds x {steps} "
          "calls (median)")
    print(f"  {'part':30s} {'us/call':>8s} {'MFLOP':>7s} {'calls/step':>10s} {'ms/step':>8s}")
    rows = {}
    for name, (_, calls) in parts.items():
        med = statistics.median(us[name])
        rows[name] = {"us_per_call": med, "mflop": flops[name] / 1e6, "calls_per_step": calls,
                      "ms_per_step": med * calls / 1e3}  # fmt: skip
        print(f"  {name:30s} {med:8.1f} {flops[name] / 1e6:7.2f} {calls:10d} {med * calls / 1e3:8.2f}")
    return rows


def _swiglu_no_norm(mlp: Any, x: torch.Tensor) -> torch.Tensor:
    """dormouse's SwiGLU without its pre-norm (nanoGPT's MLP has its norm outside it): the same gate Function."""
    from dormouse.model.looped import _SwiGLUGate

    return mlp.down(_SwiGLUGate.apply(mlp.gate_up(x)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nanogpt", type=Path, required=True, help="a nanoGPT checkout (3adf61e)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", type=Path, help="write every round's numbers here as JSON")
    ap.add_argument("--flops", action="store_true", help="print each step's arithmetic first")
    ap.add_argument("--model-step", action="store_true", help="time the models' steps in one process instead")
    ap.add_argument("--compile", action="store_true",
                    help="--model-step: also time both models compiled (--modes eager regional compile); --profile: "
                         "profile them compiled")
    ap.add_argument("--modes", nargs="+", choices=["eager", "regional", "compile"],
                    help="--model-step: the modes to time (dormouse's regional is train.compile's default scope, "
                         "compile its whole-forward scope; nanoGPT compiled as its train.py does in both)")
    ap.add_argument("--arms", nargs="+", choices=list(DORMOUSE_ARMS), help="--model-step: these dormouse variants only")
    ap.add_argument("--components", action="store_true", help="--model-step: also time the parts that differ")
    ap.add_argument("--profile", action="store_true",
                    help="profile nanoGPT's step and dormouse's like-for-like one, eager (--compile: compiled), "
                         "--steps steps each, then time their phases")
    args = ap.parse_args(argv)
    if not (args.nanogpt / "train.py").is_file() or not (args.nanogpt / "model.py").is_file():
        print(f"--nanogpt {args.nanogpt}: no nanoGPT train.py/model.py there", file=sys.stderr)
        return 2

    if args.flops:
        print_step_flops(args.nanogpt)
    if args.profile:
        profile_like_for_like(args.nanogpt, args.steps, "compile" if args.compile else "eager")
        return 0
    if args.model_step:
        modes = args.modes or (["eager", "regional", "compile"] if args.compile else ["eager"])
        out: dict[str, Any] = {"shape": SHAPE, "rounds": args.rounds, "steps": args.steps,
                               "model_step": model_step_times(args.nanogpt, args.rounds, args.steps, modes, args.arms)}
        if args.components:
            out["components"] = component_times(args.rounds, max(args.steps, 20))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1))
        return 0
    results: dict[str, list[float]] = {"nanoGPT": [], **{a: [] for a in DORMOUSE_ARMS}}
    with tempfile.TemporaryDirectory(prefix="bench_vs_nanogpt_") as tmp:
        root = Path(tmp) / "nanoGPT"
        shutil.copytree(args.nanogpt, root, ignore=shutil.ignore_patterns(".git", "out*", "data"))
        (root / "config").mkdir(exist_ok=True)
        write_nanogpt_data(root)
        for r in range(args.rounds):
            t0 = time.time()
            results["nanoGPT"].append(run_nanogpt(root, args.steps, Path(tmp) / f"out{r}"))
            for arm, extra in DORMOUSE_ARMS.items():
                name = f"{re.sub(r'[^a-z0-9]+', '-', arm.lower()).strip('-')}-{r}"
                results[arm].append(run_dormouse(extra, args.steps, Path(tmp) / "runs", name))
            print(f"round {r + 1}/{args.rounds} ({time.time() - t0:.0f} s): "
                  + ", ".join(f"{a} {v[-1]:,.0f} tok/s" for a, v in results.items()), flush=True)

    base = results["nanoGPT"]
    print(f"\ntokens/s, shape {SHAPE}, {args.rounds} interleaved rounds x {args.steps} steps (median; ratio = "
          "median of the per-round ratios to nanoGPT)")
    for arm, values in results.items():
        ratio = statistics.median(v / b for v, b in zip(values, base))
        print(f"  {arm:32s} {statistics.median(values):9,.0f} tok/s   x{ratio:.2f} nanoGPT")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"shape": SHAPE, "steps": args.steps, "tok/s": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
