"""Plots of what each arm learned (the probes of :mod:`dormouse.arms.probes`): the drawing primitives the arms'
own ``plot`` methods use. A read map draws one row per read and one column per source, each cell the mean
softmax weight (the AttnRes paper's figure layout; blank where causality hides a source); a bar chart draws one
value per slot. Drawn from a metrics row's ``probe/...`` fields, on matplotlib's Agg canvas, never pyplot."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dormouse.arms.registry import arm_classes


def mean_map(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The AttnRes map and entropies averaged over seeds; NaN cells stay NaN, runs without a map are skipped."""
    maps = [r for r in rows if r.get("probe/weights") is not None]
    if not maps:
        return None
    first = maps[0]
    key = (first["probe/reads"], first["probe/sources"])
    same = [m for m in maps if (m["probe/reads"], m["probe/sources"]) == key]
    weights = np.array([np.array(m["probe/weights"], dtype=float) for m in same])
    entropy = np.array([np.array(m["probe/entropy"], dtype=float) for m in same])
    with warnings.catch_warnings():  # an all-NaN column (a source no read sees) is expected: stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"probe/reads": first["probe/reads"], "probe/sources": first["probe/sources"],
                "probe/weights": np.nanmean(weights, axis=0).tolist() if len(same) > 1 else weights[0].tolist(),
                "probe/entropy": entropy.mean(axis=0).tolist(), "n": len(same)}


def plot_attnres_map(probe: dict[str, Any], out: Path, title: str = "AttnRes depth-attention map") -> Path:
    """Heat map reads x sources of the mean depth-attention weight, each read's entropy on the right."""
    w = np.array(probe["probe/weights"], dtype=float)
    reads, sources = probe["probe/reads"], probe["probe/sources"]
    fig = Figure(figsize=(max(5.5, 2.4 + 0.75 * len(sources)), 1.6 + 0.45 * len(reads)), dpi=110,
                 layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(w), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            if np.isfinite(w[i, j]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if w[i, j] > 0.6 else "white")
    entropy = ax.secondary_yaxis("right")
    entropy.set_yticks(range(len(reads)), [f"H={h:.2f}" for h in probe["probe/entropy"]])
    entropy.tick_params(labelsize=7, length=0)
    entropy.set_ylabel("entropy (nats)", fontsize=8)
    ax.set_xticks(range(len(sources)), sources, rotation=45, ha="right")
    ax.set_yticks(range(len(reads)), reads)
    ax.set_xlabel("source (what is read)")
    ax.set_ylabel("read (sublayer input / readout)")
    ax.set_title(title, fontsize=10, wrap=True)
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, label="mean weight")
    fig.savefig(out)
    return out


def plot_weight_matrix(weights: list[list[float]], rows: list[str], cols: list[str], out: Path, *, title: str,
                       xlabel: str, ylabel: str) -> Path:
    """Heat map of signed weights (rows x columns), centred on 0, each cell annotated; NaN cells blank."""
    w = np.array(weights, dtype=float)
    span = max(1.0, float(np.nanmax(np.abs(w)))) if np.isfinite(w).any() else 1.0
    fig = Figure(figsize=(max(5.0, 2.4 + 0.75 * len(cols)), 1.6 + 0.45 * len(rows)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(w), cmap="RdBu_r", vmin=-span, vmax=span, aspect="auto")
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            if np.isfinite(w[i, j]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(w[i, j]) > 0.6 * span else "black")
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, wrap=True)
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, label="weight")
    fig.savefig(out)
    return out


def spread_label(quantity: str, spread: list[float] | None, over: str) -> str:
    """A slot plot's y label, ``<quantity> (bars: sd over <over>)``, or the quantity alone without bars."""
    return f"{quantity} (bars: sd over {over})" if spread is not None else quantity


def plot_slot_values(slots: list[str], values: list[float], out: Path, *, ylabel: str, title: str,
                     spread: list[float] | None = None, reference: float | None = None) -> Path:
    """One bar per slot with ``spread`` error bars; ``reference`` is drawn above the zero line."""
    from matplotlib.patches import Patch

    fig = Figure(figsize=(max(5.0, 0.6 * len(slots) + 2), 3.8), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colours = ["C0" if s.startswith("attn") else "C1" for s in slots]
    ax.bar(range(len(slots)), values, yerr=spread, capsize=3 if spread else 0, color=colours)
    if reference != 0.0:  # at 0 the reference line is the zero line (a solid one would hide it)
        ax.axhline(0.0, color="black", linewidth=0.6, zorder=2)
    handles = [Patch(color="C0", label="attention"), Patch(color="C1", label="MLP")]
    if reference is not None:
        handles.append(ax.axhline(reference, color="black", linestyle=":", linewidth=1.4, zorder=3,
                                  label=f"init {reference:.3g}"))
        lo, hi = ax.get_ylim()  # a bar's edge at the reference would sit the line on the frame: keep a margin
        pad = 0.06 * (hi - lo)
        ax.set_ylim(min(lo, reference - pad), max(hi, reference + pad))
    ax.legend(handles=handles, fontsize=8)
    ax.set_xticks(range(len(slots)), slots, rotation=45, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    return out


def write_probe_plots(out_dir: Path, row: dict[str, Any], label: str = "",
                      name: Callable[[str], Path] | None = None) -> list[Path]:
    """Each registered arm's plot of a metrics row's probe fields into ``out_dir``; returns the paths."""
    where = name or (lambda plot: out_dir / plot)
    suffix = f" ({label})" if label else ""
    written: list[Path] = []
    for cls in arm_classes().values():
        if cls.plot_file and (path := cls.plot(row, where(cls.plot_file), suffix)) is not None:
            written.append(path)
    return written


def mean_probe_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The probe fields of ``rows`` (an arm's seeds) averaged, each by its arm's ``mean_over_seeds`` rule."""
    out: dict[str, Any] = {}
    for cls in arm_classes().values():
        out.update(cls.mean_over_seeds(rows))
    return out
