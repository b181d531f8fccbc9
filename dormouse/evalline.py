"""The eval line (model.md): one ``key=value`` line per evaluation, fields in a fixed order.

    eval step=400 tokens=1.64M loss=1.412 bpb=2.037 bpb@1=2.410 ... lr=2.4e-04 tok/s=8.1k depth=4.0
         arm=attnres rezero=0/0 gr=0/0 attnres=3600/3600 kernel=torch skipped=0

Every arm's counter is always present (unselected arms as 0/0) so a leaking arm is visible. The same
fields, unformatted, are one row of ``metrics.jsonl`` (see :func:`metrics_row`); ``dormouse.logs``
parses both.
"""

from __future__ import annotations

from typing import Any

from dormouse.probes import format_counters


def human(n: float) -> str:
    """3 significant figures with a k/M/G suffix: 1638400 -> '1.64M'."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}" if isinstance(n, float) else str(n)


def format_eval_line(row: dict[str, Any], max_iter: int) -> str:
    """Render a metrics row as the eval line."""
    parts = [
        f"step={row['step']}",
        f"tokens={human(row['tokens'])}",
        f"loss={row['loss']:.4f}",
        f"bpb={row['bpb']:.4f}",
    ]
    parts += [f"bpb@{k}={row[f'bpb@{k}']:.4f}" for k in range(1, max_iter + 1)]
    parts += [
        f"lr={row['lr']:.2e}",
        f"tok/s={human(float(row['tok/s']))}",
        f"depth={row['depth']:.2f}",
        f"arm={row['arm']}",
        format_counters(row),
        f"kernel={row['kernel']}",
        f"skipped={row['skipped']}",
    ]
    return "eval " + " ".join(parts)
