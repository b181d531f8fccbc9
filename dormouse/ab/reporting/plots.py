"""The comparison's plots (docs/ab-protocol.md, "Outputs"): bpb curves, bpb by depth, the forest plot and the tune
lr plot. matplotlib's object API on the Agg canvas, never pyplot, so the process's backend is untouched."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from dormouse.ab.reporting.results import ArmResult, ComparisonResults
from dormouse.ab.runs.records import RunRecord, is_finite_number
from dormouse.ab.tune.report import LrCurve, lr_curves, ran_lrs, unbracketed_side
from dormouse.run.files import ComparisonFiles


def plot_curves(records: list[RunRecord], arms: list[str], out: Path, aa_arm: str | None = None) -> Path:
    """Eval bpb vs tokens: each replicate thin, the mean thick, taken at the steps every seed reached (the A/A arm
    dashed, its replicates as visible as the others': they are the check)."""
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


def plot_depth(results: ComparisonResults, out: Path) -> Path:
    """Final bpb at each depth per arm, mean ± sd over replicates; the legend outside the axes."""
    fig = Figure(figsize=(7, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    names = list(results.arms)
    for i, name in enumerate(names):
        finals = [run["final"] for run in results.runs if run["arm"] == name and run["final"]]
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


FOREST_TITLE_PAD_PT = 20  # the forest legend's one row at fontsize 7 (about 15 pt) and a gap


def plot_forest(results: ComparisonResults, out: Path) -> Path:
    draw_forest(results).savefig(out)
    return out


def draw_forest(results: ComparisonResults) -> Figure:
    """Each arm's mean Δ (dot), the repeated interval its deciding look compared with 0 (thick bar), the TOST
    interval against ±SESOI (thin bar), the ±SESOI band and zero; below zero is better. Verdicts at the right; an
    unbracketed arm named so, with a hollow dot."""
    arms = [(name, a) for name, a in results.arms.items() if a.role != "baseline"]
    sesoi = float(results.sesoi)
    fig = Figure(figsize=(8, 1.8 + 0.6 * max(1, len(arms))), dpi=110)  # 1.8 in: title, legend, x label
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.axvspan(-sesoi, sesoi, color="grey", alpha=0.18, label=f"±SESOI = {sesoi:g} bpb")
    ax.axvline(0.0, color="black", linewidth=0.8)
    ys = list(range(len(arms)))[::-1]
    xs: list[float] = [-sesoi, sesoi]
    for y, (name, a) in zip(ys, arms):
        colour = "C7" if a.role == "aa" else "C0"
        d = a.outcome.decision or {}
        rci, eq = d.get("interval"), d.get("eq_interval")
        if rci is not None:
            ax.plot(rci, [y, y], color=colour, linewidth=3.5, solid_capstyle="butt",
                    label="repeated interval (vs 0)" if y == ys[0] else None)
            xs += list(rci)
        if eq is not None:
            ax.plot(eq, [y - 0.18, y - 0.18], color=colour, linewidth=1.2, alpha=0.8,
                    label="TOST interval (vs ±SESOI)" if y == ys[0] else None)
            xs += list(eq)
        if is_finite_number(a.diff_mean):
            ax.plot([a.diff_mean], [y], "o", color="black", markersize=5, gid=f"mean:{name}",
                    markerfacecolor="none" if unbracketed_side(results, name) else "black",
                    label="mean paired Δ" if y == ys[0] else None)
            xs.append(float(a.diff_mean))
    lo, hi = min(xs), max(xs)
    pad = 0.08 * (hi - lo or 1.0)
    ax.set_xlim(lo - pad, hi + pad)
    for y, (_, a) in zip(ys, arms):
        note = str(a.outcome.verdict)
        if a.outcome.look:
            note += f" (look {a.outcome.look}, n={len(a.replicates)})"
        elif a.role == "arm":
            note += ": no decision"
        ax.annotate(note, xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=9)
    ax.set_yticks(ys, [_forest_label(results, name, a) for name, a in arms])
    ax.set_ylim(-0.8, len(arms) - 0.4)
    ax.set_xlabel(f"Δ bpb vs {results.baseline} (arm − baseline; < 0 is better)")
    # The legend sits just above the axes and the title above the legend, both placed in points (a
    # fraction of the axes' height put them on top of each other when one compared arm makes it short).
    ax.set_title(f"ab {results.name}: paired differences, looks at {results.looks} replicates", fontsize=10,
                 pad=FOREST_TITLE_PAD_PT)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), borderaxespad=0.2, ncol=4, frameon=False)
    fig.tight_layout()
    return fig


def _forest_label(results: ComparisonResults, name: str, a: ArmResult) -> str:
    side = unbracketed_side(results, name)
    return name + (" (A/A)" if a.role == "aa" else "") + (f" (unbracketed: {side})" if side else "")


def draw_lr(results: ComparisonResults) -> Figure:
    """Final bpb against lr (log axis), one panel per tuned arm: tune runs as dots, diverged ones as red triangles
    on the top edge, the chosen lr dashed, the confirmatory mean ± sd a black square. Each set has a gid
    (``tune-runs:ARM``, ``tune-diverged:ARM``, ``chosen:ARM``, ``confirmatory:ARM``) to be read back."""
    curves = lr_curves(results)
    ncols = min(3, max(1, len(curves)))
    nrows = -(-max(1, len(curves)) // ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.3 * nrows), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    ys = [b for c in curves.values() for _, b in c.runs]
    ys += [m + s * k for c in curves.values() if c.confirmatory for m, s in [c.confirmatory] for k in (-1, 1)]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = 0.08 * (hi - lo or 0.05)
    lrs = ran_lrs(results.tune or {})
    for ax, (arm, curve) in zip(axes, curves.items()):
        ax.set_xscale("log")
        ax.set_ylim(lo - pad, hi + 2 * pad)
        _lr_panel(ax, arm, curve, hi + 2 * pad)
        ax.set_title(arm + (f" (unbracketed: {side})" if (side := unbracketed_side(results, arm)) else ""),
                     fontsize=9)
        ax.set_xticks(lrs, [f"{x:g}" for x in lrs], fontsize=7)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.tick_params(axis="x", labelbottom=True)  # a panel over an empty slot has no labelled one below
    for ax in axes[len(curves):]:
        ax.set_visible(False)
    if lrs:
        axes[0].set_xlim(lrs[0] / 1.3, lrs[-1] * 1.3)
    for ax in axes[::ncols]:
        ax.set_ylabel("final eval bpb")
    for ax in axes[-ncols:]:
        ax.set_xlabel("lr")
    title = (f"ab {results.name}: final bpb of each tune run by lr (diverged: red triangle at the top); "
             "chosen lr dashed, confirmatory mean ± sd there a square")
    # ~13 characters per inch at fontsize 10: wrapped to the figure's width, so one panel shows it whole
    fig.suptitle(textwrap.fill(title, width=int(13 * 4.2 * ncols)), fontsize=10)
    fig.tight_layout()
    return fig


def _lr_panel(ax: Axes, arm: str, curve: LrCurve, top: float) -> None:
    """One arm's panel of :func:`draw_lr`; ``top`` is the panel's upper edge, where a diverged run sits."""
    ax.grid(True, alpha=0.3)
    if curve.means:
        ax.plot([x for x, _ in curve.means], [m for _, m in curve.means], color="C0", linewidth=0.9, alpha=0.6)
    ax.plot([x for x, _ in curve.runs], [b for _, b in curve.runs], "o", color="C0", markersize=4,
            gid=f"tune-runs:{arm}")
    (div,) = ax.plot(curve.diverged, [top] * len(curve.diverged), "^", color="C3", markersize=7, clip_on=False,
                     gid=f"tune-diverged:{arm}")
    div.set_in_layout(False)  # unclipped, so its box would stretch tight_layout's (an empty one most of all)
    if curve.chosen is not None:
        ax.axvline(curve.chosen, color="C2", linestyle="--", linewidth=1.0, gid=f"chosen:{arm}")
        if curve.confirmatory is not None:
            mean, sd = curve.confirmatory
            bars = ax.errorbar([curve.chosen], [mean], yerr=[sd], fmt="s", color="black", markersize=5, capsize=3)
            bars.lines[0].set_gid(f"confirmatory:{arm}")


def plot_lr(results: ComparisonResults, out: Path) -> Path:
    draw_lr(results).savefig(out)
    return out


def write_plots(comp_dir: Path, results: ComparisonResults, records: list[RunRecord]) -> list[Path]:
    files = ComparisonFiles(comp_dir)
    written = [
        plot_curves(records, list(results.arms), files.curves_plot, results.aa_arm),
        plot_depth(results, files.depth_plot),
        plot_forest(results, files.forest_plot),
    ]
    if results.tune:
        written.append(plot_lr(results, files.lr_plot))
    return written + plot_learned(files, list(results.arms), records)


def plot_learned(files: ComparisonFiles, arms: list[str], records: list[RunRecord]) -> list[Path]:
    """Each arm's learned values at its final eval, averaged and drawn by the arm's own ``mean_over_seeds`` and
    ``plot``: ``<plot>_<arm>.png``."""
    from dormouse.arms import builtin  # noqa: F401  (the arm classes that average and draw; torch)
    from dormouse.arms.plots import mean_probe_row, write_probe_plots

    written: list[Path] = []
    for arm in arms:
        finals = [r.final for r in records if r.arm == arm and r.final]
        averaged = mean_probe_row(finals)
        if averaged:
            label = f"{arm}, mean of {len(finals)} seed{'s' if len(finals) > 1 else ''}"
            written += write_probe_plots(files.dir, averaged, label, name=lambda plot, a=arm: files.arm_plot(plot, a))
    return written
