"""``dormouse eval RUN [--checkpoint PATH]``: score a checkpoint on its run's fixed eval set, rebuilt from the
checkpoint's config and scored by the loop's own ``evaluate``, so on CPU it is the run's eval bit for bit.
Writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dormouse.config.schema import arm_name
from dormouse.train.batches import eval_windows, load_corpus
from dormouse.train.trained import find_checkpoint, load_model, resolve_device


def eval_checkpoint(run_dir: Path, checkpoint: Path | None = None, device: str = "cpu",
                    on_loaded: Callable[[Path, int, dict[str, int]], None] | None = None
                    ) -> tuple[Path, dict[str, Any]]:
    """``(checkpoint path, row)`` with ``step``, ``bpb``, ``bpb@k`` per depth and ``arm``; ``on_loaded`` gets the
    checkpoint, its step and the model's parameter counts before the eval."""
    from dormouse.train.device import autocast_context, compute_dtype
    from dormouse.train.loop import evaluate

    dev = resolve_device(device)
    path = find_checkpoint(run_dir, checkpoint)
    model, cfg, step = load_model(path, dev)
    if on_loaded is not None:
        on_loaded(path, step, model.param_counts())
    corpus = load_corpus(cfg.data)
    x, y = eval_windows(corpus.val, seq_len=int(cfg.data.seq_len), eval_bytes=cfg.data.eval_bytes)

    # the run's own train.dtype, as its evals ran (a checkpoint's config without the key ran "auto")
    dtype = compute_dtype(str(cfg.train.get("dtype", "auto")), dev)

    def autocast() -> Any:  # the training loop's (dormouse.train.loop._Run.autocast)
        return autocast_context(dtype, dev)

    bpb = evaluate(model, x, y, int(cfg.train.batch_size), dev, autocast)
    return path, {"step": step, **bpb, "arm": arm_name(cfg)}
