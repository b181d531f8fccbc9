"""From finished runs to a verdict: read every run of a comparison, apply the protocol's statistics and
write ``results.json`` and ``report.md`` (docs/ab-protocol.md, "The metric and the statistics", "Outputs").

Everything here reads the run directories on disk, so a report made after a resume (some pairs from an
earlier process) is the same as one made in a single sitting.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from dormouse.ab import stats
from dormouse.ab.plots import write_plots
from dormouse.ab.records import RunRecord, is_finite_number
from dormouse.ab.registry import ComparisonSpec
from dormouse.checkpoint import atomic_write_text
from dormouse.config import ARMS
from dormouse.logs import Finding
from dormouse.runfiles import ComparisonFiles

ALPHA = 0.05
CONFIDENCE = 0.95

# What each verdict means for the mechanism (after the sentence that states the rule and the numbers).
MEANING = {
    stats.BETTER: "the arm lowers final bpb by at least δ beyond noise. The mechanism is kept if its cost "
                  "(below) is acceptable.",
    stats.WORSE: "the arm raises final bpb by at least δ beyond noise: the mechanism is rejected.",
    stats.TIE: "the effect is shown to be smaller than δ either way: the mechanism is rejected; the simpler "
               "arm is kept (ReZero, then GR, then AttnRes).",
    stats.UNDECIDED: "the data cannot tell an effect of δ from none. Nothing is adopted: the simpler arm "
                     "stays for now (ReZero, then GR, then AttnRes), and the registered extension decides.",
    stats.INVALID: "no verdict: the arm's counters show it did not run as asked (ran ≠ asked, or 0), an "
                   "unselected arm leaked, or a run failed or is incomplete. Fix the cause and rerun; an "
                   "invalid arm is never a tie.",
}

AA_MEANING = {
    stats.TIE: "as expected: the baseline run again is shown to be within δ of the baseline.",
    stats.UNDECIDED: "no difference beyond noise was shown, but the interval is too wide to show the repeat "
                     "lies within δ of the baseline. Expected at few seeds when δ comes from the A/A spread "
                     "itself: the interval's half-width is t(0.975, n−1)/(2√n)·δ, 1.24 δ at 3 seeds. Only a "
                     "`better`/`worse` A/A arm is a warning.",
    stats.BETTER: "the baseline run again differs from the baseline beyond δ: the noise is larger than "
                  "the A/A seeds showed, or the runs are not reproducible. Treat every verdict above with "
                  "suspicion and find out why.",
    stats.INVALID: MEANING[stats.INVALID] + " Without it δ is the registered minimum.",
}
AA_MEANING[stats.WORSE] = AA_MEANING[stats.BETTER]


# --- analysis -------------------------------------------------------------------------------------------

def _mean_of(values: list[float]) -> float | None:
    vals = [v for v in values if is_finite_number(v)]
    return float(np.mean(vals)) if vals else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def _cost(records: list[RunRecord]) -> dict[str, Any]:
    """Parameters, throughput (median tok/s over the eval windows: robust to the first, warm-up window)
    and peak memory, averaged over the arm's runs."""
    params = _mean_of([(r.final or {}).get("params", r.provenance.get("params", math.nan)) for r in records])
    arm_params = _mean_of([r.provenance.get("arm_params", math.nan) for r in records])
    tok_s = _mean_of([float(np.median([x["tok/s"] for x in r.rows if is_finite_number(x.get("tok/s"))]))
                      for r in records if any(is_finite_number(x.get("tok/s")) for x in r.rows)])
    peak = _mean_of([max(x.get("peak_mem_bytes", 0) or 0 for x in r.rows) for r in records if r.rows])
    devices = sorted({str(r.provenance.get("device", "?")) for r in records})
    return {"params": params, "arm_params": arm_params, "tok_s": tok_s, "peak_mem_bytes": peak or None,
            "devices": devices}


def simpler(kind_a: str, kind_b: str) -> str:
    """The simpler of two mechanisms (ReZero, then GR, then AttnRes)."""
    rank = {k: i for i, k in enumerate(ARMS)}  # the arm registry lists the mechanisms simplest first
    return min(kind_a, kind_b, key=lambda k: rank.get(k, len(rank)))


def analyze(spec: ComparisonSpec, records: list[RunRecord], *, overrides: list[str] | None = None,
            registration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Apply the protocol to the runs; returns the results.json content (JSON-ready, NaN as null)."""
    by_arm: dict[str, list[RunRecord]] = {a: sorted([r for r in records if r.arm == a], key=lambda r: r.seed)
                                         for a in spec.arms}
    base = spec.baseline
    base_final = {r.seed: float(r.final["bpb"]) for r in by_arm[base] if r.final}
    base_cost = _cost(by_arm[base])
    base_kind = by_arm[base][0].kind if by_arm[base] else "rezero"
    cpu = any(d == "cpu" or d.startswith("cpu") for recs in by_arm.values() for r in recs
              for d in [str(r.provenance.get("device", ""))])

    arms: dict[str, Any] = {}
    for arm, recs in by_arm.items():
        finals = {r.seed: float(r.final["bpb"]) for r in recs if r.final}
        depth_keys = sorted({k for r in recs if r.final for k in r.final if k.startswith("bpb@")},
                            key=lambda k: int(k[4:]))
        by_depth = {k: _mean_of([float(r.final[k]) for r in recs if r.final and k in r.final])
                    for k in depth_keys}
        problems = [_finding_text(f, r.run_dir.parent) for r in recs for f in r.findings]
        incomplete = [f"{r.arm}-s{r.seed}: {r.error or 'no final eval at step ' + str(r.steps)}"
                      for r in recs if not r.complete]
        missing_seeds = [s for s in spec.seeds if s not in {r.seed for r in recs}]
        incomplete += [f"{arm}-s{s}: not run" for s in missing_seeds]
        paired = [s for s in spec.seeds if s in finals and s in base_final]
        diffs = [finals[s] - base_final[s] for s in paired]
        cost = _cost(recs)
        role = "baseline" if arm == base else "aa" if arm == spec.aa_arm else "arm"
        arms[arm] = {
            "role": role,
            "kind": recs[0].kind if recs else None,
            "overrides": list(spec.arms[arm]),
            "seeds": [r.seed for r in recs if r.final],
            "final_bpb": {str(s): v for s, v in finals.items()},
            "bpb_mean": _mean_of(list(finals.values())),
            "bpb_sd": stats.sd(list(finals.values())),
            "bpb_by_depth": by_depth,
            "paired_seeds": paired if role != "baseline" else [],
            "diffs": diffs if role != "baseline" else [],
            "diff_mean": stats.mean(diffs) if diffs and role != "baseline" else None,
            "diff_sd": stats.sd(diffs) if role != "baseline" else None,
            "t_interval": stats.t_interval(diffs, CONFIDENCE) if role != "baseline" else None,
            "bootstrap_interval": stats.bootstrap_interval(diffs, CONFIDENCE) if role != "baseline" else None,
            "p": stats.t_test_p(diffs) if role != "baseline" else None,
            "p_holm": None,
            "counter_check": "pass" if not problems else "fail",
            "findings": problems,
            "incomplete": incomplete,
            "params": cost["params"],
            "arm_params": cost["arm_params"],
            "tok_s": cost["tok_s"],
            "peak_mem_bytes": cost["peak_mem_bytes"],
            "devices": cost["devices"],
            "params_ratio": _ratio(cost["params"], base_cost["params"]),
            "tok_s_ratio": _ratio(cost["tok_s"], base_cost["tok_s"]),
            # On CPU the figure is the process's max RSS, which only grows across the runs of one process:
            # a ratio would compare run order, not arms.
            "peak_mem_ratio": None if cpu else _ratio(cost["peak_mem_bytes"], base_cost["peak_mem_bytes"]),
        }

    aa = arms.get(spec.aa_arm) if spec.aa_arm else None
    aa_ok = aa is not None and aa["counter_check"] == "pass" and not aa["incomplete"]
    aa_diffs = aa["diffs"] if aa_ok else None
    floor = stats.noise_floor(spec.min_effect, aa_diffs)

    # The Holm family is every registered tested arm, fixed in advance: an arm without a p-value (failed
    # runs) counts as p = 1 rather than shrinking the family and loosening the others' correction.
    tested = [a for a, r in arms.items() if r["role"] == "arm"]
    if len(spec.seeds) >= 2:
        adjusted = stats.holm([1.0 if arms[a]["p"] is None else arms[a]["p"] for a in tested])
        for a, p in zip(tested, adjusted, strict=True):
            arms[a]["p_holm"] = p if arms[a]["p"] is not None else None

    base_bad = arms[base]["counter_check"] == "fail" or bool(arms[base]["incomplete"])
    for arm, r in arms.items():
        if r["role"] == "baseline":
            r["verdict"] = stats.INVALID if base_bad else "baseline"
            r["reason"] = ("the baseline " + _invalid_reason(r)) if base_bad else "the reference"
            r["kept"] = None
            continue
        if r["counter_check"] == "fail" or r["incomplete"]:
            r["verdict"], r["reason"] = stats.INVALID, _invalid_reason(r)
        elif base_bad:
            r["verdict"] = stats.INVALID
            r["reason"] = "the baseline is invalid: " + _invalid_reason(arms[base])
        else:
            p_adj = r["p_holm"] if r["role"] == "arm" else None
            decision = stats.decide(r["diff_mean"] if r["diffs"] else math.nan,
                                    None if r["t_interval"] is None else tuple(r["t_interval"]),
                                    floor.delta, p_adj, ALPHA)
            r["verdict"] = decision.verdict
            r["reason"] = rule_sentence(decision, len(r["diffs"]), CONFIDENCE)
        kind, bkind = r["kind"] or "?", base_kind
        if r["role"] == "aa":
            r["kept"] = None  # a noise check decides nothing about mechanisms
        elif r["verdict"] == stats.BETTER:
            r["kept"] = arm
        elif r["verdict"] in (stats.TIE, stats.UNDECIDED):
            r["kept"] = base if simpler(kind, bkind) == bkind else arm
        elif r["verdict"] == stats.WORSE:
            r["kept"] = base
        else:
            r["kept"] = None

    notes = []
    if aa is not None and aa_diffs is not None and aa_diffs and all(d == 0.0 for d in aa_diffs):
        notes.append(f"The A/A arm `{spec.aa_arm}` reproduced the baseline exactly (every paired difference "
                     "is 0): a different arm-parameter stream changes nothing when every arm parameter has a "
                     "deterministic init, and these runs are deterministic. It calibrates no noise; δ is the "
                     "registered minimum.")
    if aa is not None and aa_diffs is None:
        notes.append(f"The A/A arm `{spec.aa_arm}` is invalid or incomplete, so δ is the registered minimum.")
    if aa_diffs is not None and len(aa_diffs) < 2:
        notes.append("With fewer than 2 A/A seeds the A/A spread is undefined; δ is the registered minimum.")
    if len(spec.seeds) < 2:
        notes.append("One seed: paired intervals are undefined; every valid arm is `undecided`.")
    if cpu:
        notes.append("Peak memory on CPU is the process's max RSS, which only grows across the runs of one "
                     "process; its ratios are not reported.")

    complete = all(not r["incomplete"] for r in arms.values())
    return _jsonable({
        "name": spec.name,
        "description": spec.description,
        "metric": spec.metric,
        "baseline": base,
        "aa_arm": spec.aa_arm,
        "seeds": list(spec.seeds),
        "min_effect": spec.min_effect,
        "delta": floor.delta,
        "delta_source": floor.source,
        "aa_sd": floor.aa_sd,
        "alpha": ALPHA,
        "confidence": CONFIDENCE,
        "bootstrap": {"resamples": stats.BOOTSTRAP_RESAMPLES, "seed": stats.BOOTSTRAP_SEED},
        "complete": complete,
        "overrides": list(overrides or []),
        "fixed": list(spec.fixed),
        "extension": spec.extension,
        "extension_comparison": spec.extension_comparison,
        "registration": registration or {},
        "notes": notes,
        "arms": arms,
        "runs": [_run_json(r) for r in sorted(records, key=lambda r: (r.seed, list(spec.arms).index(r.arm)))],
        "generated": datetime.now().isoformat(timespec="seconds"),
    })


def _finding_text(f: Finding, base: Path) -> str:
    """A finding with its path relative to the comparison directory (the report is read from there)."""
    try:
        where = f.path.relative_to(base)
    except ValueError:
        where = f.path
    return f"{where}{'' if f.line is None else f':{f.line}'}: {f.kind}: {f.message}"


def _invalid_reason(r: dict[str, Any]) -> str:
    parts = []
    if r["counter_check"] == "fail":
        parts.append(f"failed the counter/log check ({len(r['findings'])} finding(s))")
    if r["incomplete"]:
        parts.append("incomplete runs: " + "; ".join(r["incomplete"]))
    return "; ".join(parts)


def rule_sentence(d: stats.Decision, n_paired: int, confidence: float) -> str:
    """The rule that produced ``d.verdict``, with the numbers it compared (every clause is one of the
    comparisons :func:`dormouse.ab.stats.decide` made, so the sentence cannot contradict the numbers)."""
    if d.interval is None:
        return (f"{n_paired} paired seed(s): no spread, so no interval; a verdict other than undecided needs "
                "an interval")
    lo, hi = d.interval
    ci = f"the {confidence * 100:.0f} % t-interval [{lo:+.4f}, {hi:+.4f}]"
    side = "lies below 0" if d.below_zero else "lies above 0" if d.above_zero else "contains 0"
    size = f"|mean Δ| {abs(d.diff_mean):.4f} {'≥' if d.big else '<'} δ {d.delta:.4f}"
    holm = ("" if d.p_adjusted is None else
            f"Holm-adjusted p {d.p_adjusted:.3g} {'<' if d.significant else '≥'} {d.alpha}")
    band = f"(−δ, +δ) = ({-d.delta:+.4f}, {d.delta:+.4f})"
    if d.verdict in (stats.BETTER, stats.WORSE):
        clauses = [f"{ci} {side}", size] + ([holm] if holm else [])
        return f"rule: {d.verdict} = interval {side}, |mean Δ| ≥ δ and Holm p < α; here " + ", ".join(clauses)
    if d.verdict == stats.TIE:
        return f"rule: tie = the interval lies inside {band}; here {ci} does"
    # undecided: say which condition of better/worse failed and why the interval is not a tie.
    failed = []
    if not (d.below_zero or d.above_zero):
        failed.append(f"{ci} {side}")
    else:
        failed.append(f"{ci} {side}")
        if not d.big:
            failed.append(size)
        if not d.significant:
            failed.append(holm)
    return (f"rule: undecided = neither better/worse (interval on one side of 0, |mean Δ| ≥ δ, Holm p < α) "
            f"nor tie (interval inside {band}); here " + ", ".join(failed) + f", and the interval is not "
            f"inside {band}")


def _run_json(r: RunRecord) -> dict[str, Any]:
    last = r.rows[-1] if r.rows else {}
    return {
        "arm": r.arm, "seed": r.seed, "kind": r.kind, "run_dir": str(r.run_dir), "complete": r.complete,
        "error": r.error, "steps": r.steps, "last_step": last.get("step"),
        "final": r.final, "findings": [f.to_dict() for f in r.findings],
        "curve": [{"step": x.get("step"), "tokens": x.get("tokens"), "bpb": x.get("bpb")} for x in r.rows],
    }


def _jsonable(x: Any) -> Any:
    """NaN/inf become null (JSON has no NaN), tuples lists, Paths strings."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    return x


# --- writing --------------------------------------------------------------------------------------------

def _f(x: Any, spec: str = ".4f", none: str = "—") -> str:
    return none if x is None else format(x, spec)


def _interval(iv: list[float] | None) -> str:
    return "undefined" if iv is None else f"[{iv[0]:+.4f}, {iv[1]:+.4f}]"


def _bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for div, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def _count(n: float | None) -> str:
    if n is None:
        return "—"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.0f}"


def extension_sentence(results: dict[str, Any]) -> str:
    """What an undecided arm leads to: the extension registered in advance and the command that runs it."""
    rule = results.get("extension") or "none registered"
    comp = results.get("extension_comparison")
    if comp:
        return f"Registered extension: {rule} Run it with `dormouse ab {comp}`."
    return (f"Registered extension: {rule} No extension comparison is registered, so none can be run under "
            "this registration.")


def render_report(results: dict[str, Any], plots: list[str]) -> str:
    """The report.md text."""
    r = results
    arms = r["arms"]
    base = r["baseline"]
    out: list[str] = [f"# A/B comparison `{r['name']}`", ""]
    if r["description"]:
        out += [r["description"], ""]
    reg = r.get("registration") or {}
    out += [
        f"- Registered: `{reg.get('source', '?')}` (sha256 `{str(reg.get('sha256', '?'))[:16]}`), "
        f"CLI overrides: {', '.join(f'`{o}`' for o in r['overrides']) or 'none'}.",
        f"- Baseline: `{base}`; seeds: {', '.join(map(str, r['seeds']))}; metric: final eval bpb at the "
        "final depth (lower is better), read at the registered final step.",
        f"- δ = **{r['delta']:.4f} bpb** ({r['delta_source']}; registered minimum {r['min_effect']:.4f}; "
        f"2·sd of the A/A paired differences = {_f(None if r['aa_sd'] is None else 2 * r['aa_sd'])}).",
        f"- Decision: Δ = bpb(arm) − bpb({base}) per seed; `better` if the {int(r['confidence'] * 100)} % "
        f"t-interval lies below 0, the Holm-adjusted p < {r['alpha']} and |mean Δ| ≥ δ; `worse` likewise "
        "above 0; `tie` if the interval lies inside (−δ, +δ) (the effect is shown to be small); "
        "`undecided` otherwise (the simpler arm stays; the registered extension decides); `invalid` if the "
        "counter check fails or a run is missing. The bootstrap "
        f"interval ({r['bootstrap']['resamples']} resamples, seed {r['bootstrap']['seed']}) is a "
        "cross-check. The Holm family is every registered arm except the baseline and the A/A arm.",
        f"- Status: {'complete' if r['complete'] else '**incomplete** (some runs failed or are missing)'}.",
        "",
    ]
    if r["notes"]:
        out += ["> " + n for n in r["notes"]] + [""]

    out += ["## Verdicts", "",
            f"| arm | kind | seeds | bpb mean ± sd | Δ vs {base} (mean ± sd) | 95 % t-interval | "
            "95 % bootstrap | p | p (Holm) | verdict | kept |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in arms.items():
        label = f"`{name}`" + (" (A/A)" if a["role"] == "aa" else "")
        dm = "—" if a["role"] == "baseline" else f"{_f(a['diff_mean'], '+.4f')} ± {_f(a['diff_sd'])}"
        ti = "—" if a["role"] == "baseline" else _interval(a["t_interval"])
        bi = "—" if a["role"] == "baseline" else _interval(a["bootstrap_interval"])
        out.append(
            f"| {label} | {a['kind']} | {len(a['seeds'])} | {_f(a['bpb_mean'])} ± {_f(a['bpb_sd'])} | {dm} | "
            f"{ti} | {bi} | {_f(a['p'], '.3g')} | {_f(a['p_holm'], '.3g')} | **{a['verdict']}** | "
            f"{a['kept'] or '—'} |")
    out += ["", "## What the verdicts mean", ""]
    for name, a in arms.items():
        if a["role"] == "baseline" and a["verdict"] == "baseline":
            continue
        what = (AA_MEANING if a["role"] == "aa" else MEANING).get(a["verdict"], "")
        kept = f" Kept: `{a['kept']}`." if a["kept"] else ""
        if a["verdict"] == stats.UNDECIDED and a["role"] == "arm":
            kept = f" Stays for now: `{a['kept']}`. " + extension_sentence(r)
        role = " (the A/A arm: a noise check, expected to be a tie)" if a["role"] == "aa" else ""
        out.append(f"- `{name}`{role} — **{a['verdict']}** ({a['reason']}): {what}{kept}")
    out += ["", "## Cost relative to the baseline", "",
            "| arm | params | arm params | params × | tok/s | tok/s × | peak memory | peak memory × "
            "| device |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, a in arms.items():
        out.append(
            f"| `{name}` | {_count(a['params'])} | {_count(a['arm_params'])} | "
            f"{_f(a['params_ratio'], '.3f')} | "
            f"{_count(a['tok_s'])} | {_f(a['tok_s_ratio'], '.3f')} | {_bytes(a['peak_mem_bytes'])} | "
            f"{_f(a['peak_mem_ratio'], '.3f', 'n/a')} | {', '.join(a['devices'])} |")
    out += ["", "## Counter check (`dormouse logs --check` on every run)", "",
            "| arm | result | findings |", "|---|---|---|"]
    for name, a in arms.items():
        out.append(f"| `{name}` | {a['counter_check']} | {len(a['findings'])} |")
    problems = [(name, f) for name, a in arms.items() for f in a["findings"]]
    if problems:
        out += ["", "Findings:", ""] + [f"- `{name}`: {f}" for name, f in problems]
    depth_keys = sorted({k for a in arms.values() for k in a["bpb_by_depth"]}, key=lambda k: int(k[4:]))
    if depth_keys:
        out += ["", "## Final bpb by depth (mean over seeds)", "",
                "| arm | " + " | ".join(depth_keys) + " |", "|---|" + "---|" * len(depth_keys)]
        for name, a in arms.items():
            out.append(f"| `{name}` | " + " | ".join(_f(a["bpb_by_depth"].get(k)) for k in depth_keys) + " |")
    # How each pair ran (dormouse/ab/pairjob.py records every attempt): on CPU the per-pair thread count
    # fixes the order of a reduction, so it belongs next to the numbers.
    launch = r.get("launch", {})
    ran = launch.get("pairs", {})
    out += ["", "## Runs", "", "| arm | seed | complete | last step | final bpb | threads | launcher | run |",
            "|---|---|---|---|---|---|---|---|"]
    for run in r["runs"]:
        bpb = run["final"]["bpb"] if run["final"] else None
        status = "yes" if run["complete"] else f"no{': ' + run['error'] if run['error'] else ''}"
        how = ran.get(Path(run["run_dir"]).name, {})
        out.append(f"| `{run['arm']}` | {run['seed']} | {status} | {run['last_step']} | {_f(bpb)} | "
                   f"{', '.join(map(str, how.get('threads', []))) or '—'} | "
                   f"{', '.join(how.get('launchers', [])) or '—'} | `{Path(run['run_dir']).name}` |")
    if launch.get("this_invocation"):
        inv = launch["this_invocation"]
        out += ["", "This report's invocation: " + ", ".join(f"{k}={v}" for k, v in inv.items() if v is not None)
                + ". Threads and launcher above are per pair, over all its attempts (a pair resumed under "
                "another setting lists both)."]
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    out += ["", "## Registration", "",
            f"- Fixed overrides: {', '.join(f'`{o}`' for o in r['fixed']) or 'none'}"]
    out += [f"- `{name}`: {', '.join(f'`{o}`' for o in a['overrides']) or '(no overrides)'}"
            for name, a in arms.items()]
    if r["extension"]:
        out += [f"- Extension rule (fixed in advance): {r['extension']}"]
    out += ["", f"_Generated {r['generated']} by `dormouse ab {r['name']}`._", ""]
    return "\n".join(out)


def write_outputs(comp_dir: Path, results: dict[str, Any], records: list[RunRecord]) -> dict[str, Path]:
    """Write the plots, results.json and report.md into ``comp_dir``; returns their paths."""
    plots = write_plots(comp_dir, results, records)
    results["plots"] = [p.name for p in plots]
    files = ComparisonFiles(comp_dir)
    paths = {"results": files.results, "report": files.report}
    atomic_write_text(paths["results"], json.dumps(results, indent=2, allow_nan=False) + "\n")
    atomic_write_text(paths["report"], render_report(results, results["plots"]))
    for p in plots:
        paths[p.stem] = p
    return paths
