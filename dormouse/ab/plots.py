"""The comparison's plots (docs/ab-protocol.md, "Outputs"): eval bpb vs tokens per arm (seeds thin, their mean
thick), final bpb by depth, and the forest plot of the paired differences (the decision at a glance).
Drawn with matplotlib's object API on the Agg canvas, never pyplot, so nothing depends on (or changes)
the process's global backend or display.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dormouse.ab.records import RunRecord, is_finite_number
from dormouse.run.files import ComparisonFiles


def plot_curves(records: list[RunRecord], arms: list[str], out: Path, aa_arm: str | None = None) -> Path:
    """Eval bpb vs training tokens: one colour per arm, each replicate thin, the mean over replicates thick
    (the A/A arm dashed, its replicates dashed too and as visible as the others': they are the check).

    The mean is taken at the steps every seed of the arm reached (the runs share the eval schedule).
    """
    fig = Figure(figsize=(8, 5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cycle = [f"C{i}" for i in range(10)]
    for i, arm in enumerate(arms):
        colour = cycle[i % len(cycle)]
        by_step: dict[int, list[tuple[float, float]]] = defaultdict(list)
        runs = [r for r in records if r.arm == arm]
        for r in runs:
            pts = [(x["tokens"], x["bpb"]) for x in r.rows
                   if is_finite_number(x.get("bpb")) and is_finite_number(x.get("tokens"))]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour, linewidth=0.9, alpha=0.6,
                        linestyle="--" if arm == aa_arm else "-")
            for x in r.rows:
                if is_finite_number(x.get("bpb")) and is_finite_number(x.get("tokens")):
                    by_step[int(x["step"])].append((float(x["tokens"]), float(x["bpb"])))
        shared = sorted(s for s, v in by_step.items() if len(v) == len(runs) and runs)
        if shared:
            mx = [np.mean([t for t, _ in by_step[s]]) for s in shared]
            my = [np.mean([b for _, b in by_step[s]]) for s in shared]
            ax.plot(mx, my, color=colour, linewidth=2.4, linestyle="--" if arm == aa_arm else "-",
                    label=f"{arm} (n={len(runs)})")
    ax.set_xlabel("training tokens (bytes)")
    ax.set_ylabel("eval bpb")
    ax.set_title("Eval bpb vs tokens (thin: replicates, thick: mean)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    return out


def plot_depth(results: dict[str, Any], out: Path) -> Path:
    """Final bpb at each depth 1..max_iter per arm: mean over replicates, error bars ± sd across replicates.
    The legend sits outside the axes: inside, it covered the curves."""
    fig = Figure(figsize=(7, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    arms = results["arms"]
    names = list(arms)
    for i, name in enumerate(names):
        finals = [run["final"] for run in results["runs"] if run["arm"] == name and run["final"]]
        keys = sorted({k for f in finals for k in f if k.startswith("bpb@")}, key=lambda k: int(k[4:]))
        if not keys:
            continue
        depths, means, sds = [], [], []
        for k in keys:
            vals = [f[k] for f in finals if is_finite_number(f.get(k))]
            if vals:
                depths.append(int(k[4:]) + (i - (len(names) - 1) / 2) * 0.04)  # dodge overlapping bars
                means.append(float(np.mean(vals)))
                sds.append(float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0)
        ax.errorbar(depths, means, yerr=sds, marker="o", capsize=3, color=f"C{i % 10}", label=name)
    ax.set_xlabel("depth (iterations of the shared block)")
    ax.set_ylabel("final eval bpb")
    ax.set_title("Final bpb by depth (mean ± sd over replicates)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out)
    return out


def plot_forest(results: dict[str, Any], out: Path) -> Path:
    """The decision at a glance: each arm's mean paired Δ bpb vs the baseline (a dot), the repeated
    confidence interval its deciding look compared with 0 (thick bar) and the TOST interval it compared
    with ±SESOI (thin bar below it), the ±SESOI band (shaded) and zero (a line). Below zero = lower bpb =
    better. The verdict and its look are written at the right; an arm without a decision is listed with
    "no decision"."""
    arms = [(name, a) for name, a in results["arms"].items() if a["role"] != "baseline"]
    sesoi = float(results["sesoi"])
    fig = Figure(figsize=(8, 1.4 + 0.6 * max(1, len(arms))), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.axvspan(-sesoi, sesoi, color="grey", alpha=0.18, label=f"±SESOI = {sesoi:g} bpb")
    ax.axvline(0.0, color="black", linewidth=0.8)
    ys = list(range(len(arms)))[::-1]
    xs: list[float] = [-sesoi, sesoi]
    for y, (_, a) in zip(ys, arms):
        colour = "C7" if a["role"] == "aa" else "C0"
        d = a.get("decision") or {}
        rci, eq = d.get("interval"), d.get("eq_interval")
        if rci is not None:
            ax.plot(rci, [y, y], color=colour, linewidth=3.5, solid_capstyle="butt",
                    label="repeated interval (vs 0)" if y == ys[0] else None)
            xs += list(rci)
        if eq is not None:
            ax.plot(eq, [y - 0.18, y - 0.18], color=colour, linewidth=1.2, alpha=0.8,
                    label="TOST interval (vs ±SESOI)" if y == ys[0] else None)
            xs += list(eq)
        if is_finite_number(a.get("diff_mean")):
            ax.plot([a["diff_mean"]], [y], "o", color="black", markersize=5,
                    label="mean paired Δ" if y == ys[0] else None)
            xs.append(float(a["diff_mean"]))
    lo, hi = min(xs), max(xs)
    pad = 0.08 * (hi - lo or 1.0)
    ax.set_xlim(lo - pad, hi + pad)
    for y, (_, a) in zip(ys, arms):
        note = str(a.get("verdict", "?"))
        if a.get("look"):
            note += f" (look {a['look']}, n={len(a.get('replicates', []))})"
        elif a["role"] == "arm":
            note += ": no decision"
        ax.annotate(note, xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=9)
    ax.set_yticks(ys, [name + (" (A/A)" if a["role"] == "aa" else "") for name, a in arms])
    ax.set_ylim(-0.8, len(arms) - 0.4)
    ax.set_xlabel(f"Δ bpb vs {results['baseline']} (arm − baseline; < 0 is better)")
    ax.set_title(f"ab {results['name']}: paired differences, looks at {results['looks']} replicates", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.08), ncol=4, frameon=False)
    fig.tight_layout()
    fig.savefig(out)
    return out


def write_plots(comp_dir: Path, results: dict[str, Any], records: list[RunRecord]) -> list[Path]:
    """The plots into ``comp_dir``; returns their paths."""
    files = ComparisonFiles(comp_dir)
    written = [
        plot_curves(records, list(results["arms"]), files.curves_plot, results.get("aa_arm")),
        plot_depth(results, files.depth_plot),
        plot_forest(results, files.forest_plot),
    ]
    return written + plot_learned(files, list(results["arms"]), records)


def plot_learned(files: ComparisonFiles, arms: list[str], records: list[RunRecord]) -> list[Path]:
    """Each arm's learned values at its final eval, averaged over its seeds by the residual arm's own rule and
    drawn as its own plot (dormouse.arms: ``mean_over_seeds``, ``plot``): ``<plot>_<arm>.png``. Runs without
    a final eval are left out."""
    from dormouse.arms.plots import mean_probe_row, write_probe_plots

    written: list[Path] = []
    for arm in arms:
        finals = [r.final for r in records if r.arm == arm and r.final]
        averaged = mean_probe_row(finals)
        if averaged:
            label = f"{arm}, mean of {len(finals)} seed{'s' if len(finals) > 1 else ''}"
            written += write_probe_plots(files.dir, averaged, label, name=lambda plot, a=arm: files.arm_plot(plot, a))
    return written
