"""Eval-only: ``dormouse eval RUN [--checkpoint PATH]`` scores a checkpoint on its run's fixed eval set.

The checkpoint carries its own config (dormouse.train.loop.write_checkpoint), so the corpus, the split and the
fixed eval windows are rebuilt exactly as the run built them (:func:`dormouse.data.eval_windows`), and the
bpb at every depth comes from the training loop's own :func:`dormouse.train.loop.evaluate` with the run's eval
batch size: on CPU the number is the run's own eval at that step, bit for bit. Nothing is written: not to
the run directory (no train.log line, no metrics.jsonl row, no lock), not anywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dormouse.config.schema import arm_name
from dormouse.data import eval_windows, load_corpus
from dormouse.train.trained import find_checkpoint, load_model, resolve_device


def eval_checkpoint(run_dir: Path, checkpoint: Path | None = None, device: str = "cpu") -> tuple[Path, dict[str, Any]]:
    """``(checkpoint path, row)``: the row holds ``step``, ``bpb``, ``bpb@k`` for every depth and ``arm`` (no
    training-window fields: nothing trained)."""
    from dormouse.train.device import autocast_context, compute_dtype
    from dormouse.train.loop import evaluate

    dev = resolve_device(device)
    path = find_checkpoint(run_dir, checkpoint)
    model, cfg, step = load_model(path, dev)
    corpus = load_corpus(cfg.data)
    x, y = eval_windows(corpus.val, seq_len=int(cfg.data.seq_len), eval_bytes=cfg.data.eval_bytes)

    # the run's own train.dtype, as its evals ran (a checkpoint older than the key ran "auto")
    dtype = compute_dtype(str(cfg.train.get("dtype", "auto")), dev)

    def autocast() -> Any:  # the training loop's (dormouse.train.loop._Run.autocast)
        return autocast_context(dtype, dev)

    bpb = evaluate(model, x, y, int(cfg.train.batch_size), dev, autocast)
    return path, {"step": step, **bpb, "arm": arm_name(cfg)}
