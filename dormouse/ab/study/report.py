"""A study's analysis and report: each point's verdicts from its ``results.json``, the primary question
(:func:`~dormouse.ab.study.interaction.decide_all`) and the A/A calibration, written as ``results.json``,
``report.md`` and plots in the study directory. An arm's change reads what its point decisions used (the first ``n``
differences of its deciding look; the A/A arm every one); nothing is decided until every point is complete."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dormouse.ab.reporting.jsonable import jsonable
from dormouse.ab.reporting.results import ArmResult, ComparisonResults
from dormouse.ab.study.interaction import INVALID, decide_all, decide_calibration, interaction_sentence
from dormouse.ab.study.registry import TREND_FLOPS, RegisteredStudy
from dormouse.ab.study.scaling_fit import FitFailed, PowerLaw, bootstrap_delta_at, bootstrap_power_law
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import DELTA_AXIS_PLOT, LOSS_FLOPS_PLOT, POINTS_DEPTH_PLOT, StudyFiles


def read_point(study_dir: Path, point: str) -> ComparisonResults | None:
    path = StudyFiles(study_dir).point(point).results
    return ComparisonResults.from_json(json.loads(path.read_text())) if path.is_file() else None


def decision_diffs(arm: ArmResult) -> list[float]:
    """The paired differences an arm's point decision used: the first ``decision.n`` (all, for the A/A arm)."""
    diffs = [float(x) for x in arm.diffs]
    n = (arm.outcome.decision or {}).get("n")
    return diffs[: int(n)] if n is not None else diffs


def analyze_study(study: RegisteredStudy, study_dir: Path, stamp: dict[str, Any] | None = None,
                  card: dict[str, Any] | None = None) -> dict[str, Any]:
    """The study's ``results.json``: each point's verdicts, and the interaction once every point is complete."""
    t = study.template
    points, per_point = [], []
    for p in study.points():
        r = read_point(study_dir, p.name)
        per_point.append(r)
        row: dict[str, Any] = {"name": p.name, "value": p.value, "complete": bool(r and r.complete),
                               "started": StudyFiles(study_dir).point(p.name).registration.is_file(),
                               "decided": r is not None, "arms": {}}
        if r is not None:
            for arm, a in r.arms.items():
                d = a.outcome.decision or {}
                row["arms"][arm] = {"role": a.role, "verdict": a.outcome.verdict, "bpb_mean": a.bpb_mean,
                                    "diff_mean": a.diff_mean, "diff_sd": a.diff_sd, "n": d.get("n", len(a.diffs)),
                                    "interval": d.get("interval"), "look": a.outcome.look,
                                    "lr": (r.tune or {}).get("chosen", {}).get(arm),
                                    "bpb_by_depth": {k: v.get("bpb_mean") for k, v in a.bpb_by_depth.items()},
                                    "sentence": a.outcome.sentence}
            row["looks_taken"] = len(r.looks_taken or [])
        points.append(row)
    complete = all(row["complete"] for row in points)
    out: dict[str, Any] = {
        "kind": "study", "name": study.name, "description": t.description, "axis": study.axis,
        "values": study.values, "baseline": t.baseline, "aa_arm": t.aa_arm, "tested": study.tested,
        "alpha": t.alpha, "point_alpha": study.interaction_design().point_alpha, "sesoi": t.sesoi,
        "looks": list(t.looks), "smallest_change": study.study.smallest_change,
        "alpha_holdback": study.study.alpha_holdback, "expected_change": study.study.expected_change,
        "complete": complete, "points": points, "interaction": None, "calibration": None,
        "registration": stamp, "study_card": card,
        "generated": datetime.now().isoformat(timespec="seconds"), "command": f"dormouse ab {study.argument}"}
    if complete:
        out["interaction"], out["calibration"] = _decide(study, per_point)
    if study.study.trend == TREND_FLOPS:  # a width ladder: each point's FLOPs, and each arm's curve once complete
        out["flops"] = study.point_flops()
        out["scaling"] = _scaling(study, per_point, out["flops"]) if complete else None
    return jsonable(out)


EXTRAPOLATE_TO = 1e18  # the compute the papers' claims sit at: Δ there is an extrapolation, and labelled one
SCALING_BOOT, SCALING_SEED = 2000, 20261208  # the bootstrap of the curves: refits and its fixed seed


def _scaling(study: RegisteredStudy, per_point: list[ComparisonResults | None], flops: list[float]) -> dict:
    """Each arm's L = E + A·C^(−α) over the points (its replicates' final bpb at each point's FLOPs budget), with
    bootstrap intervals and L at EXTRAPOLATE_TO; each tested arm's Δ there, paired with the baseline. A fit that
    fails is reported with its reason, never replaced."""
    base = study.template.baseline

    def by_point(arm: str) -> dict[float, dict[str, float]]:
        """Point FLOPs -> replicate -> the arm's final bpb there."""
        return {c: {k: float(v) for k, v in r.arms[arm].final_bpb.items()}
                for c, r in zip(flops, per_point) if r is not None and arm in r.arms}

    curves: dict[str, Any] = {}
    for arm in [base, *study.tested] + ([study.template.aa_arm] if study.template.aa_arm else []):
        try:
            fit = bootstrap_power_law({c: list(v.values()) for c, v in by_point(arm).items()}, n_boot=SCALING_BOOT,
                                      seed=SCALING_SEED, at=[EXTRAPOLATE_TO])
            curves[arm] = {"E": fit.estimate.E, "A": fit.estimate.A, "alpha": fit.estimate.alpha,
                           "E_interval": fit.E, "A_interval": fit.A, "alpha_interval": fit.alpha,
                           "at": fit.at[0], "L_at": fit.predicted[0], "L_at_interval": fit.predicted_interval[0],
                           "n_failed": fit.n_failed}
        except (FitFailed, ValueError) as exc:
            curves[arm] = {"failed": str(exc)}
    deltas: dict[str, Any] = {}
    b = by_point(base)
    for arm in study.tested:
        a = by_point(arm)
        pairs = {c: sorted(set(a[c]) & set(b[c]), key=int) for c in a if c in b}  # the replicates both ran
        try:
            d = bootstrap_delta_at({c: [a[c][k] for k in ks] for c, ks in pairs.items()},
                                   {c: [b[c][k] for k in ks] for c, ks in pairs.items()},
                                   at=[EXTRAPOLATE_TO], n_boot=SCALING_BOOT, seed=SCALING_SEED)
            deltas[arm] = {"at": d.at[0], "delta": d.delta[0], "interval": d.interval[0], "n_failed": d.n_failed}
        except (FitFailed, ValueError) as exc:
            deltas[arm] = {"failed": str(exc)}
    return {"law": "L = E + A·C^(−α)", "level": 0.95, "n_boot": SCALING_BOOT, "seed": SCALING_SEED,
            "curves": curves, "delta_at": deltas}


def _decide(study: RegisteredStudy, per_point: list[ComparisonResults | None]) -> tuple[dict, dict | None]:
    design = study.interaction_design()
    diffs: dict[str, list[list[float]]] = {}
    invalid: set[str] = set()
    for arm in study.tested:
        rows = [None if r is None else r.arms.get(arm) for r in per_point]
        if any(a is None or a.outcome.verdict == INVALID for a in rows):
            invalid.add(arm)
            continue
        diffs[arm] = [decision_diffs(a) for a in rows]  # type: ignore[arg-type]
    decisions = decide_all(design, diffs, invalid=invalid)
    inter = {arm: {**d.to_dict(), "sentence": d.sentence(arm, study.template.baseline, study.axis)}
             for arm, d in decisions.items()}
    aa = study.template.aa_arm
    calib = None
    if aa is not None:
        rows = [None if r is None else r.arms.get(aa) for r in per_point]
        bad = any(a is None or a.outcome.verdict == INVALID for a in rows)
        c = decide_calibration(design, [[] if a is None else decision_diffs(a) for a in rows], point_invalid=bad)
        calib = {**c.to_dict(), "sentence": interaction_sentence(c, aa, study.template.baseline, study.axis)}
    return inter, calib


def point_state(p: dict[str, Any]) -> str:
    """Where a point stands, in every summary's words. "Decided" needs the point's ``results.json``, which the
    runner writes when it passes the point (a carry leaves it out), so a point without one says only that it
    started."""
    if p["complete"]:
        return "complete"
    if p["decided"]:
        return "decided in part"
    return "started, no results written yet" if p["started"] else "not started"


def summary_lines(r: dict[str, Any]) -> list[str]:
    """The console's summary: each point's verdicts, then the interaction (or what it waits for)."""
    lines = []
    for p in r["points"]:
        if not p["decided"]:
            lines.append(f"{p['name']}: {point_state(p)}")
            continue
        verdicts = ", ".join(f"{a} {v['verdict']}" for a, v in p["arms"].items() if v["role"] == "arm")
        lines.append(f"{p['name']}: {verdicts}" + ("" if p["complete"] else " (not complete)"))
    if r["interaction"] is None:
        lines.append("interaction: pending (decided once every point is complete)")
    else:
        lines += [f"interaction {arm}: {d['verdict']} (L {_f(d['estimate'], '+.4f')} bpb)"
                  for arm, d in r["interaction"].items()]
    return lines


def _f(x: Any, spec: str = ".4f") -> str:
    return "—" if x is None else format(float(x), spec)


def _iv(iv: Any) -> str:
    return "—" if not iv or iv[0] is None else f"[{iv[0]:+.4f}, {iv[1]:+.4f}]"


def scaling_lines(r: dict[str, Any]) -> list[str]:
    """A ladder's curves: each arm's fitted law with its intervals, and Δ at the extrapolated compute, labelled so."""
    sc = r.get("scaling")
    if not sc:
        return []
    out = ["", f"## Each arm's loss against training compute ({sc['law']}, {sc['level']:.0%} bootstrap intervals over "
           f"the replicates, {sc['n_boot']} refits, seed {sc['seed']})", "",
           f"| arm | E | A | α | L at {EXTRAPOLATE_TO:.0e} FLOPs (extrapolated) |", "|---|---|---|---|---|"]
    for arm, c in sc["curves"].items():
        if "failed" in c:
            out.append(f"| {arm} | fit failed: {c['failed']} | | | |")
            continue
        out.append(f"| {arm} | {c['E']:.3f} [{c['E_interval'][0]:.3f}, {c['E_interval'][1]:.3f}] | {c['A']:.3g} | "
                   f"{c['alpha']:.3f} [{c['alpha_interval'][0]:.3f}, {c['alpha_interval'][1]:.3f}] | "
                   f"{c['L_at']:.3f} [{c['L_at_interval'][0]:.3f}, {c['L_at_interval'][1]:.3f}] |")
    out += ["", f"**Δ at {EXTRAPOLATE_TO:.0e} training FLOPs: an extrapolation** of two laws fitted over "
            f"{min(r['flops']):.2g}–{max(r['flops']):.2g} FLOPs, far outside them. It assumes both laws hold that far; "
            "its paired interval covers the replicates' noise, not the error of the law's form. It decides nothing.",
            ""]
    for arm, d in sc["delta_at"].items():
        out.append(f"- {arm}: " + (f"fit failed: {d['failed']}" if "failed" in d else
                                   f"Δ {d['delta']:+.4f} bpb [{d['interval'][0]:+.4f}, {d['interval'][1]:+.4f}]"))
    return out


def render_study_report(r: dict[str, Any], plots: list[str]) -> str:
    axis = r["axis"]
    out = [f"# Study {r['name']}", "", " ".join(str(r["description"]).split()), "",
           f"Axis `{axis}` at {', '.join(map(str, r['values']))}; baseline `{r['baseline']}`; tested "
           f"{', '.join(f'`{a}`' for a in r['tested'])}; family-wise α {r['alpha']:g} (the interaction over the "
           f"tested arms; each point's comparison at α/{len(r['values'])} = {r['point_alpha']:.4g}); SESOI "
           f"{r['sesoi']:g} bpb at each point; smallest change τ {r['smallest_change']:g} bpb; looks {r['looks']}.",
           "", "## The primary question: does each arm's Δ change along the axis?", ""]
    if r["interaction"] is None:
        out.append("Pending: decided once every point is complete ("
                   + ", ".join(f"{p['name']} {point_state(p)}" for p in r["points"]) + ").")
    else:
        out += ["| arm | change L (bpb) | interval | TOST interval | df | verdict |", "|---|---|---|---|---|---|"]
        for arm, d in r["interaction"].items():
            out.append(f"| {arm} | {_f(d['estimate'], '+.4f')} | {_iv(d['interval'])} | {_iv(d['eq_interval'])} | "
                       f"{_f(d['df'], 'g')} | **{d['verdict']}** |")
        out += [""] + [f"- {d['sentence']}" for d in r["interaction"].values()]
        if r["calibration"]:
            out += ["", f"A/A calibration (not in the family): {r['calibration']['sentence']}"]
    out += scaling_lines(r)
    out += ["", "## Each point's verdicts (each a registered comparison; its own report is in its folder)", "",
            "| point | arm | final bpb | Δ mean | n | interval | verdict | tuned lr |",
            "|---|---|---|---|---|---|---|---|"]
    for p in r["points"]:
        for arm, a in p["arms"].items():
            out.append(f"| {p['name']} | {arm} | {_f(a['bpb_mean'])} | {_f(a['diff_mean'], '+.4f')} | {a['n']} | "
                       f"{_iv(a['interval'])} | {a['verdict']} | {_f(a['lr'], 'g')} |")
        if not p["decided"]:
            out.append(f"| {p['name']} | — | — | — | — | — | {point_state(p)} | — |")
    card = r.get("study_card")
    if card:
        out += ["", "## Study card (simulated at registration)", "", "```", card.get("text", "").rstrip(), "```"]
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    out += ["", f"_Generated {r['generated']} by `{r['command']}`._", ""]
    return "\n".join(out)


def draw_delta(r: dict[str, Any]) -> Figure:
    """Each tested arm's mean difference (± its point decision's interval) at every point on log2 of the axis, with
    the fitted change when decided."""
    fig = Figure(figsize=(7, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    names = [a for a in r["tested"]] + ([r["aa_arm"]] if r["aa_arm"] else [])
    for i, arm in enumerate(names):
        xs, ys, lo, hi = [], [], [], []
        for p in r["points"]:
            a = p["arms"].get(arm)
            if not a or a["diff_mean"] is None:
                continue
            at = r["flops"][r["points"].index(p)] if r.get("flops") else float(p["value"])  # a ladder: its FLOPs
            x = at * 2 ** ((i - (len(names) - 1) / 2) * 0.03)  # dodge on the log axis
            iv = a["interval"] or [a["diff_mean"], a["diff_mean"]]
            xs.append(x)
            ys.append(a["diff_mean"])
            lo.append(a["diff_mean"] - iv[0])
            hi.append(iv[1] - a["diff_mean"])
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=f"C{i % 10}",
                        linestyle=":" if arm == r["aa_arm"] else "-",
                        label=arm + (" (A/A)" if arm == r["aa_arm"] else
                                     f" ({r['interaction'][arm]['verdict']})" if r["interaction"] else ""))
    ax.axhline(0.0, color="k", lw=0.8)
    for s in (-1, 1):
        ax.axhline(s * r["sesoi"], color="grey", lw=0.6, ls="--")
    if r.get("flops"):
        ax.set_xscale("log", base=10)
        ax.set_xlabel(f"training FLOPs per run ({r['axis']} " + ", ".join(map(str, r["values"])) + ")")
    else:
        ax.set_xscale("log", base=2)
        ax.set_xticks([float(v) for v in r["values"]], [str(v) for v in r["values"]])
        ax.set_xlabel(r["axis"])
    ax.set_ylabel(f"Δ = bpb(arm) − bpb({r['baseline']})")
    ax.set_title("Each arm's Δ at every point (mean, the point decision's interval; dashed: ±SESOI)", fontsize=9)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def draw_loss_vs_flops(r: dict[str, Any]) -> Figure:
    """A ladder's curves: each arm's final bpb at every point (mean ± sd over replicates) against training FLOPs,
    and its fitted law over the points, dashed on to the extrapolated compute."""
    fig = Figure(figsize=(7, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    curves = (r.get("scaling") or {}).get("curves", {})
    grid = np.geomspace(min(r["flops"]), max(r["flops"]), 50)
    beyond = np.geomspace(max(r["flops"]), EXTRAPOLATE_TO, 50)
    for i, arm in enumerate(curves or {a: None for a in r["points"][0]["arms"]}):
        c = curves.get(arm) or {}
        ms = [(f, p["arms"][arm]["bpb_mean"]) for f, p in zip(r["flops"], r["points"])
              if arm in p["arms"] and p["arms"][arm]["bpb_mean"] is not None]
        if ms:
            ax.plot([f for f, _ in ms], [m for _, m in ms], "o", color=f"C{i % 10}", label=arm)
        if "alpha" in c:
            law = PowerLaw(E=c["E"], A=c["A"], alpha=c["alpha"])
            ax.plot(grid, law.predict(grid), "-", color=f"C{i % 10}", lw=1)
            ax.plot(beyond, law.predict(beyond), "--", color=f"C{i % 10}", lw=0.8)
    ax.set_xscale("log", base=10)
    ax.set_xlabel("training FLOPs per run")
    ax.set_ylabel("final bpb (mean over replicates)")
    ax.set_title(f"Each arm's loss against compute, L = E + A·C^(−α) (dashed: extrapolated to {EXTRAPOLATE_TO:.0e})",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def draw_points_depth(r: dict[str, Any]) -> Figure:
    """bpb@k (the readout after k iterations, mean over the point's replicates) per arm, one panel per point."""
    n = len(r["points"])
    fig = Figure(figsize=(4 * n, 4), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, p in zip(axes, r["points"]):
        for i, (arm, a) in enumerate(p["arms"].items()):
            pts = sorted((int(k[4:]), v) for k, v in a["bpb_by_depth"].items() if v is not None)
            if pts:
                ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o", ms=3, color=f"C{i % 10}", label=arm)
        ax.set_title(f"{p['name']}", fontsize=9)
        ax.set_xlabel("k (iterations read out)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
        if len(ax.get_lines()):
            tops = [v for a in p["arms"].values() for v in a["bpb_by_depth"].values() if v is not None]
            ax.set_ylim(min(tops) - 0.05, min(max(tops), min(tops) + 1.0))  # the last iterations, not bpb@1
    axes[0].set_ylabel("bpb@k (mean over replicates)")
    if axes[-1].get_legend_handles_labels()[0]:
        axes[-1].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def write_study_outputs(study: RegisteredStudy, study_dir: Path, stamp: dict[str, Any] | None,
                        card: dict[str, Any] | None) -> dict[str, Any]:
    """Analyse, draw and write the study's results.json and report.md; returns the results with ``summary``."""
    files = StudyFiles(study_dir)
    r = analyze_study(study, study_dir, stamp, card)
    plots = []
    if any(p["decided"] for p in r["points"]):
        draws = [(DELTA_AXIS_PLOT, draw_delta), (POINTS_DEPTH_PLOT, draw_points_depth)]
        if r.get("scaling"):
            draws.append((LOSS_FLOPS_PLOT, draw_loss_vs_flops))
        for name, draw in draws:
            draw(r).savefig(files.dir / name)
            plots.append(name)
    r["plots"] = plots
    atomic_write_text(files.results, json.dumps(r, indent=2, allow_nan=False) + "\n")
    atomic_write_text(files.report, render_study_report(r, plots))
    return {**r, "summary": summary_lines(r)}

