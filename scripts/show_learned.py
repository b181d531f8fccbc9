#!/usr/bin/env python
"""Print what a checkpoint's arm learned on its fixed eval set (the learned-value probes), and draw its plot.

For a run trained before the probes existed, or to look at an intermediate checkpoint:

    python scripts/show_learned.py runs/myrun [--checkpoint PATH] [--plot-dir DIR]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from dormouse.arms.plots import write_probe_plots
from dormouse.arms.probes import learned_values
from dormouse.data import eval_windows, load_corpus
from dormouse.train.trained import find_checkpoint, load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--plot-dir", type=Path, default=None, help="where to write the PNG (default: none)")
    args = ap.parse_args()
    path = find_checkpoint(args.run_dir, args.checkpoint)
    model, cfg, step = load_model(path)
    corpus = load_corpus(cfg.data)
    x, _ = eval_windows(corpus.val, seq_len=int(cfg.data.seq_len), eval_bytes=cfg.data.eval_bytes)
    lv = learned_values(model, x, int(cfg.train.batch_size))
    print(f"{path} (step {step}), arm {lv.arm}, {x.numel():,} eval bytes; summary {lv.summary()}")
    if lv.alpha is not None:
        print("alpha: " + "  ".join(f"{s}={a:+.3f}" for s, a in zip(lv.slots, lv.alpha)))
    if lv.gate_mean is not None:
        print("gate:  " + "  ".join(f"{s}={g:.3f}±{d:.3f}" for s, g, d in zip(lv.slots, lv.gate_mean, lv.gate_spread)))
    if lv.weights is not None:
        print(f"{'read':>6} " + " ".join(f"{s:>6}" for s in lv.sources) + "  entropy(nats)")
        for read, row, h in zip(lv.reads, lv.weights, lv.entropy):
            cells = " ".join("     ." if math.isnan(w) else f"{w:6.3f}" for w in row)
            print(f"{read:>6} {cells}  {h:.3f}")
    if args.plot_dir is not None:
        args.plot_dir.mkdir(parents=True, exist_ok=True)
        for p in write_probe_plots(args.plot_dir, lv.to_row(), f"{args.run_dir.name}, step {step}"):
            print(f"wrote {p}")


if __name__ == "__main__":
    main()
