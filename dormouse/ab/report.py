"""From finished runs to verdicts: read every run a comparison's looks used, state each arm's sequential
decision with everything beside it, and write ``results.json`` and ``report.md`` (docs/ab-protocol.md,
"Verdicts", "Outputs").

Everything here reads the run directories on disk (through :func:`dormouse.ab.looks.progress`, which
replays the looks), so a report made after a resume is the same as one made in a single sitting.
``results.json`` carries every number a verdict compared (the look's boundary, the repeated interval, the
TOST interval, p and its nominal level), so a reader can check each verdict by hand.

Nothing here branches on an arm's name: the tie rule "keeps the simpler arm" uses the arm registry's order
(``dormouse.arms.registry.ARMS``, simplest first).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from dormouse.ab import stats, tune
from dormouse.ab.looks import INVALID, UNDECIDED, Progress
from dormouse.ab.pairjob import Pair
from dormouse.ab.plan import ComparisonPlan
from dormouse.ab.plots import write_plots
from dormouse.ab.records import RunRecord, is_finite_number
from dormouse.arms.registry import ARMS
from dormouse.config.schema import arm_name
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import ComparisonFiles
from dormouse.run.reader import Finding

BETTER, WORSE, TIE = "better", "worse", "tie"
ORDER = ", then ".join(ARMS)  # the registry's order, simplest first

# What each verdict means for the mechanism (after the sentence that states what was tested).
MEANING = {
    BETTER: "the mechanism is kept if its cost (below) is acceptable.",
    WORSE: "the mechanism is rejected.",
    TIE: f"the mechanism is rejected: the simpler arm is kept (the registry's order: {ORDER}).",
    UNDECIDED: f"nothing is adopted: the simpler arm stays (the registry's order: {ORDER}).",
    INVALID: "no verdict: the arm's counters show it did not run as asked (ran ≠ asked, or 0), an unselected "
             "arm leaked, or a run failed or is incomplete. Fix the cause and rerun; an invalid arm is never a "
             "tie, and it stays in the multiplicity family.",
}


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
    """The simpler of two mechanisms: the one earlier in the arm registry (``ARMS``, simplest first)."""
    rank = {k: i for i, k in enumerate(ARMS)}
    return min(kind_a, kind_b, key=lambda k: rank.get(k, len(rank)))


def _paired(recs: list[RunRecord], base: dict[int, RunRecord], key: str) -> list[float]:
    """Per replicate, arm − baseline at metric ``key`` (replicates both finished, in replicate order)."""
    out = []
    for r in recs:
        b = base.get(r.replicate)
        if r.final and b is not None and b.final and is_finite_number(r.final.get(key)) \
                and is_finite_number(b.final.get(key)):
            out.append(float(r.final[key]) - float(b.final[key]))
    return out


def _by_depth(recs: list[RunRecord], base: dict[int, RunRecord], role: str) -> dict[str, Any]:
    """Secondary: final bpb at every depth (mean over replicates) and, for a compared arm, the mean paired
    Δ at that depth and its sd. Not part of any decision."""
    keys = sorted({k for r in recs if r.final for k in r.final if k.startswith("bpb@")}, key=lambda k: int(k[4:]))
    out: dict[str, Any] = {}
    for k in keys:
        d = _paired(recs, base, k) if role != "baseline" else []
        out[k] = {"bpb_mean": _mean_of([float(r.final[k]) for r in recs if r.final and k in r.final]),
                  "diff_mean": stats.mean(d) if d else None, "diff_sd": stats.sd(d)}
    return out


def _beside(diffs: list[float]) -> dict[str, Any]:
    """Reported beside the verdict, never decided on (dormouse.ab.stats): the probability of improvement
    (the share of replicates where the arm's final bpb is below the baseline's) with its Clopper–Pearson
    interval, and the Hodges–Lehmann estimate of Δ with its signed-rank interval, a robust cross-check."""
    poi = stats.prob_improvement(diffs) if diffs else None
    hl = stats.hodges_lehmann(diffs) if diffs else None
    return {"poi": None if poi is None else poi.estimate, "poi_interval": None if poi is None else poi.interval,
            "poi_k": None if poi is None else poi.k,
            "hodges_lehmann": None if hl is None else hl.estimate,
            "hodges_lehmann_interval": None if hl is None else hl.interval,
            "hodges_lehmann_confidence": None if hl is None else hl.confidence}


def _bad_runs(finals: list[float], ceiling: float | None) -> dict[str, Any] | None:
    """Runs whose final bpb ended above the registered ceiling (a run that did not learn)."""
    rate = None if ceiling is None else stats.bad_run_rate(finals, ceiling)
    if rate is None:
        return None
    return {"count": rate.k, "n": rate.n, "rate": rate.estimate, "interval": rate.interval, "ceiling": ceiling}


def _arm_result(arm: str, role: str, recs: list[RunRecord], base: dict[int, RunRecord], spec: Any) -> dict[str, Any]:
    """One arm's numbers that do not depend on the decision: its runs, Δ, and what is reported beside."""
    finals = {r.replicate: float(r.final["bpb"]) for r in recs if r.final}
    diffs = _paired(recs, base, "bpb") if role != "baseline" else []
    problems = [_finding_text(f, r.run_dir.parent) for r in recs for f in r.findings]
    incomplete = [f"{r.run_dir.name}: {r.error or 'no final eval at step ' + str(r.steps)}"
                  for r in recs if not r.complete]
    beside = _beside(diffs) if role != "baseline" else {}
    beside["bad_runs"] = _bad_runs(list(finals.values()), spec.bad_run_ceiling)
    return {
        "role": role,
        "kind": recs[0].kind if recs else None,
        "overrides": list(spec.arms[arm]),
        "replicates": [r.replicate for r in recs],
        "init_seeds": [r.seed for r in recs],
        "final_bpb": {str(k): v for k, v in finals.items()},
        "bpb_mean": _mean_of(list(finals.values())),
        "bpb_sd": stats.sd(list(finals.values())),
        "diffs": diffs,
        "diff_mean": stats.mean(diffs) if diffs else None,
        "diff_sd": stats.sd(diffs),
        **beside,
        "bpb_by_depth": _by_depth(recs, base, role),
        "counter_check": "pass" if not problems else "fail",
        "findings": problems,
        "incomplete": incomplete,
    }


def _verdict(arm: str, a: dict[str, Any], state: Progress, base: str, base_kind: str) -> None:
    """The arm's verdict, its sentence, the look that decided it, and the arm kept."""
    decision = state.decisions.get(arm)
    a["verdict"] = state.verdict(arm)
    a["decision"] = None if decision is None else decision.to_dict()
    a["look"] = None if decision is None else decision.look + 1
    if a["verdict"] == INVALID:
        a["sentence"] = f"{arm} is invalid: {state.invalid[arm]}"
    elif decision is None:
        a["sentence"] = f"{arm} was not decided: its first look has not been taken"
    else:
        a["sentence"] = decision.sentence(arm, base)
    kind = a["kind"] or "?"
    if a["verdict"] == BETTER:
        a["kept"] = arm
    elif a["verdict"] in (TIE, UNDECIDED):
        a["kept"] = base if simpler(kind, base_kind) == base_kind else arm
    elif a["verdict"] == WORSE:
        a["kept"] = base
    else:
        a["kept"] = None


def analyze(plan: ComparisonPlan, state: Progress, read: Callable[[Pair], RunRecord], *,
            registration: dict[str, Any] | None = None,
            design_card: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[RunRecord]]:
    """Apply the protocol to the runs the looks used; returns (results.json content, the records read)."""
    spec = plan.spec
    base, aa = spec.baseline, spec.aa_arm
    records = [read(p) for p in plan.pairs if p.replicate <= state.used.get(p.arm, 0)]
    by_arm = {a: [r for r in records if r.arm == a] for a in spec.arms}
    base_runs = {r.replicate: r for r in by_arm[base]}
    base_kind = arm_name(next(p.cfg for p in plan.pairs if p.arm == base))  # what the registration selects
    base_cost = _cost(by_arm[base])
    cpu = any(str(r.provenance.get("device", "")).startswith("cpu") for r in records)
    arms: dict[str, Any] = {}
    for arm in spec.arms:
        role = "baseline" if arm == base else "aa" if arm == aa else "arm"
        a = _arm_result(arm, role, by_arm[arm], base_runs, spec)
        cost = _cost(by_arm[arm])
        a.update(cost, params_ratio=_ratio(cost["params"], base_cost["params"]),
                 tok_s_ratio=_ratio(cost["tok_s"], base_cost["tok_s"]),
                 # On CPU the figure is the process's max RSS, which only grows across the runs of one
                 # process: a ratio would compare run order, not arms.
                 peak_mem_ratio=None if cpu else _ratio(cost["peak_mem_bytes"], base_cost["peak_mem_bytes"]))
        if role == "arm":
            _verdict(arm, a, state, base, base_kind)
        else:
            bad = arm in state.invalid
            a.update(verdict=INVALID if bad else role, kept=None, decision=None, look=None,
                     sentence=state.invalid[arm] if bad else "the reference" if role == "baseline"
                     else "the calibration check (below)")
        arms[arm] = a
    calibration = _calibration(arms, aa)
    complete = not state.pending and all(not a["incomplete"] for a in arms.values())
    results = _jsonable({
        "protocol": 2, "name": spec.name, "description": spec.description, "metric": spec.metric,
        "baseline": base, "aa_arm": aa, "sesoi": spec.sesoi, "alpha": spec.alpha, "looks": list(plan.looks),
        "family": list(spec.tested), "n_arms": plan.design().n_arms,
        "replicates": [vars(r) for r in plan.replicates],
        "bad_run_ceiling": spec.bad_run_ceiling,
        "pilot_sd": spec.pilot_sd, "expected_effect": spec.expected_effect,
        "looks_taken": [{"look": lk.index + 1, "n": lk.n, "arms": lk.arms,
                         "verdicts": {a: d.verdict for a, d in lk.decisions.items()}} for lk in state.looks],
        "next_look": None if state.next_look is None else state.next_look + 1,
        "complete": complete, "overrides": list(plan.overrides), "fixed": list(spec.fixed),
        "registration": registration or {}, "design_card": design_card,
        "aa_calibration": calibration, "code": _code(records),
        "tune": None if state.tune is None else tune.to_dict(plan, state.tune),
        "notes": _notes(cpu, state),
        "arms": arms,
        "runs": [_run_json(r) for r in sorted(records, key=lambda r: (r.replicate, plan.arms.index(r.arm)))],
        "generated": datetime.now().isoformat(timespec="seconds"),
    })
    return results, records


def _calibration(arms: dict[str, Any], aa: str | None) -> dict[str, Any] | None:
    """The A/A check (dormouse.ab.stats.aa_calibration): does the A/A arm's spread of paired differences
    agree with each compared arm's? A check that can fail; it decides no verdict."""
    if aa is None:
        return None
    a = arms[aa]
    compared = {n: r["diffs"] for n, r in arms.items() if r["role"] == "arm" and r["verdict"] != INVALID}
    check = None if a["verdict"] == INVALID else stats.aa_calibration(a["diffs"], compared)
    if check is None:
        return {"agrees": None, "sentence": "The check could not be made: the A/A arm is invalid, or it or "
                "every compared arm has fewer than 2 paired replicates."}
    return {**asdict(check), "sentence": check.sentence()}


def _code(records: list[RunRecord]) -> dict[str, Any]:
    """The commit and code fingerprint every run used (from the pairs' attempt records)."""
    from dormouse.ab.pairjob import recorded_fingerprints

    per_run: dict[str, Any] = {}
    for r in records:
        fps = [f for f in recorded_fingerprints(r.run_dir.parent, r.run_dir.name) if f]
        per_run[r.run_dir.name] = {"commit": sorted({str(f.get("commit")) for f in fps}),
                                   "fingerprint": sorted({str(f.get("sha256")) for f in fps})}
    commits = sorted({c for v in per_run.values() for c in v["commit"]})
    prints = sorted({c for v in per_run.values() for c in v["fingerprint"]})
    return {"commits": commits, "fingerprints": prints, "runs": per_run}


def _notes(cpu: bool, state: Progress) -> list[str]:
    notes = []
    if state.tune is not None and not state.tune.settled and state.pending:
        notes.append(f"The tune stage is not finished: {len(state.pending)} tune pair(s) to run; rerun "
                     "`dormouse ab` to continue.")
    elif state.pending:
        notes.append(f"Look {int(state.next_look or 0) + 1} is not taken yet: {len(state.pending)} pair(s) to run; "
                     "rerun `dormouse ab` to continue the schedule.")
    if cpu:
        notes.append("Peak memory on CPU is the process's max RSS, which only grows across the runs of one "
                     "process; its ratios are not reported.")
    return notes


def _finding_text(f: Finding, base: Path) -> str:
    """A finding with its path relative to the comparison directory (the report is read from there)."""
    try:
        where = f.path.relative_to(base)
    except ValueError:
        where = f.path
    return f"{where}{'' if f.line is None else f':{f.line}'}: {f.kind}: {f.message}"


def _run_json(r: RunRecord) -> dict[str, Any]:
    last = r.rows[-1] if r.rows else {}
    return {
        "arm": r.arm, "replicate": r.replicate, "seed": r.seed, "kind": r.kind, "run_dir": str(r.run_dir),
        "complete": r.complete, "error": r.error, "steps": r.steps, "last_step": last.get("step"),
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


def _interval(iv: list[float] | None, spec: str = "+.4f") -> str:
    return "—" if iv is None else f"[{iv[0]:{spec}}, {iv[1]:{spec}}]"


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


def _header(r: dict[str, Any]) -> list[str]:
    reg = r.get("registration") or {}
    code = r.get("code") or {}
    out = [f"# A/B comparison `{r['name']}`", ""]
    if r["description"]:
        out += [r["description"], ""]
    out += [
        f"- Registered: `{reg.get('source', '?')}` (sha256 `{str(reg.get('sha256', '?'))[:16]}`, protocol 2), "
        f"CLI overrides: {', '.join(f'`{o}`' for o in r['overrides']) or 'none'}.",
        f"- Code: every run used commit {', '.join(f'`{c}`' for c in code.get('commits', [])) or '—'} "
        f"(code fingerprint {', '.join(f'`{c[:12]}`' for c in code.get('fingerprints', [])) or '—'}; "
        "per run in the Runs table).",
        f"- Baseline: `{r['baseline']}`; metric: final eval bpb at the final depth (lower is better), read at "
        "the registered final step. Δ = bpb(arm) − bpb(baseline) per replicate (same init seed and data order).",
        f"- Rule: SESOI ±{r['sesoi']:g} bpb, α {r['alpha']:g} family-wise over the {r['n_arms']} registered arm(s) "
        f"({', '.join(f'`{a}`' for a in r['family'])}); looks at {', '.join(map(str, r['looks']))} replicates per "
        "arm. `better`/`worse`: the look's repeated confidence interval lies below/above 0; `tie`: the TOST "
        "interval lies inside ±SESOI; `undecided` otherwise; a decided arm stops. Each sentence below states "
        "the numbers the rule compared.",
        f"- Status: {'complete' if r['complete'] else '**incomplete** (some runs failed, or a look is pending)'}"
        f"; looks taken: {', '.join(str(lk['look']) for lk in r['looks_taken']) or 'none'}.",
        "",
    ]
    if r["notes"]:
        out += ["> " + n for n in r["notes"]] + [""]
    return out


def _verdict_table(r: dict[str, Any]) -> list[str]:
    base = r["baseline"]
    out = ["## Verdicts", "",
           f"| arm | kind | look | n | bpb mean ± sd | mean Δ vs {base} | repeated interval | verdict | "
           "P(improvement) [95 %] | Hodges–Lehmann Δ | bad runs | kept |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in r["arms"].items():
        label = f"`{name}`" + (" (A/A)" if a["role"] == "aa" else "")
        d = a.get("decision") or {}
        poi = ("—" if a.get("poi") is None
               else f"{a['poi_k']}/{len(a['diffs'])} {_interval(a.get('poi_interval'), '.2f')}")
        bad = a.get("bad_runs")
        bad_text = "—" if bad is None else f"{bad['count']}/{bad['n']}"
        out.append(
            f"| {label} | {a['kind']} | {_f(a['look'], 'd')} | {len(a['replicates'])} | "
            f"{_f(a['bpb_mean'])} ± {_f(a['bpb_sd'])} | {_f(a['diff_mean'], '+.4f')} | "
            f"{_interval(d.get('interval'))} | **{a['verdict']}**"
            f"{' (smaller than the SESOI)' if d.get('smaller_than_sesoi') else ''} | {poi} | "
            f"{_f(a.get('hodges_lehmann'), '+.4f')} | {bad_text} | {a['kept'] or '—'} |")
    return out


def _sentences(r: dict[str, Any]) -> list[str]:
    out = ["", "## What was tested", ""]
    for name, a in r["arms"].items():
        if a["role"] != "arm":
            continue
        what = MEANING.get(a["verdict"], "")
        kept = f" Kept: `{a['kept']}`." if a["kept"] else ""
        out.append(f"- `{name}` — **{a['verdict']}**: {a['sentence']} So {what}{kept}")
    cal = r.get("aa_calibration")
    if cal is not None:
        verdict = {True: "agrees", False: "**does not agree**", None: "could not be checked"}[cal.get("agrees")]
        out += ["", f"**A/A calibration check** (`{r['aa_arm']}`: the baseline again on its own data-order "
                f"stream): its spread {verdict} with the compared arms'. {cal['sentence']}"]
    return out


def _cost_table(r: dict[str, Any]) -> list[str]:
    out = ["", "## Cost relative to the baseline", "",
           "| arm | params | arm params | params × | tok/s | tok/s × | peak memory | peak memory × | device |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, a in r["arms"].items():
        out.append(
            f"| `{name}` | {_count(a['params'])} | {_count(a['arm_params'])} | {_f(a['params_ratio'], '.3f')} | "
            f"{_count(a['tok_s'])} | {_f(a['tok_s_ratio'], '.3f')} | {_bytes(a['peak_mem_bytes'])} | "
            f"{_f(a['peak_mem_ratio'], '.3f', 'n/a')} | {', '.join(a['devices'])} |")
    out += ["", "## Counter check (`dormouse logs --check` on every run)", "", "| arm | result | findings |",
            "|---|---|---|"]
    out += [f"| `{name}` | {a['counter_check']} | {len(a['findings'])} |" for name, a in r["arms"].items()]
    problems = [(name, f) for name, a in r["arms"].items() for f in a["findings"]]
    if problems:
        out += ["", "Findings:", ""] + [f"- `{name}`: {f}" for name, f in problems]
    return out


def _depth_table(r: dict[str, Any]) -> list[str]:
    keys = sorted({k for a in r["arms"].values() for k in a["bpb_by_depth"]}, key=lambda k: int(k[4:]))
    if not keys:
        return []
    out = ["", "## Δ at every depth (secondary: reported, never decided on)", "",
           "Mean final bpb at each depth, and for a compared arm the mean paired Δ (± sd) at that depth.", "",
           "| arm | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for name, a in r["arms"].items():
        cells = []
        for k in keys:
            d = a["bpb_by_depth"].get(k) or {}
            delta = "" if d.get("diff_mean") is None else f" (Δ {d['diff_mean']:+.4f} ± {_f(d.get('diff_sd'))})"
            cells.append(_f(d.get("bpb_mean")) + delta)
        out.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return out


def _runs_table(r: dict[str, Any]) -> list[str]:
    # How each pair ran (dormouse/ab/pairjob.py records every attempt): on CPU the per-pair thread count
    # fixes the order of a reduction, and the commit what computed it, so both belong next to the numbers.
    launch = r.get("launch", {})
    ran = launch.get("pairs", {})
    code = (r.get("code") or {}).get("runs", {})
    out = ["", "## Runs", "",
           "| arm | replicate | init seed | complete | last step | final bpb | threads | launcher | commit | run |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for run in r["runs"]:
        bpb = run["final"]["bpb"] if run["final"] else None
        status = "yes" if run["complete"] else f"no{': ' + run['error'] if run['error'] else ''}"
        name = Path(run["run_dir"]).name
        how = ran.get(name, {})
        commit = ", ".join(c[:12] + ("+dirty" if c.endswith("+dirty") else "") for c in code.get(name, {}).get(
            "commit", [])) or "—"
        out.append(f"| `{run['arm']}` | {run['replicate']} | {run['seed']} | {status} | {run['last_step']} | "
                   f"{_f(bpb)} | {', '.join(map(str, how.get('threads', []))) or '—'} | "
                   f"{', '.join(how.get('launchers', [])) or '—'} | `{commit}` | `{name}` |")
    if launch.get("this_invocation"):
        inv = launch["this_invocation"]
        out += ["", "This report's invocation: " + ", ".join(f"{k}={v}" for k, v in inv.items() if v is not None)
                + ". Threads and launcher above are per pair, over all its attempts (a pair resumed under "
                "another setting lists both)."]
    return out


def render_report(results: dict[str, Any], plots: list[str]) -> str:
    """The report.md text."""
    r = results
    out = _header(r) + _verdict_table(r) + _sentences(r)
    if r.get("tune"):
        out += [""] + tune.markdown(r["tune"])
    card = r.get("design_card")
    if card:
        out += ["", "## Design card (simulated at registration from the registered pilot spread)", "", "```",
                card.get("text", "").rstrip(), "```"]
    out += _depth_table(r) + _cost_table(r) + _runs_table(r)
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    out += ["", "## Registration", "", f"- Fixed overrides: {', '.join(f'`{o}`' for o in r['fixed']) or 'none'}"]
    out += [f"- `{name}`: {', '.join(f'`{o}`' for o in a['overrides']) or '(no overrides)'}"
            for name, a in r["arms"].items()]
    out += ["- Replicates (init seed / data seed / A/A data seed): " + "; ".join(
        f"{x['index']}: {x['init_seed']} / {x['data_seed']} / {x['aa_data_seed']}" for x in r["replicates"])]
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


def verdict_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm for the console summary (runner.verdict_table)."""
    rows = []
    for name, a in results["arms"].items():
        d = a.get("decision") or {}
        rows.append({"arm": name + (" (A/A)" if a["role"] == "aa" else ""), "bpb_mean": a["bpb_mean"],
                     "diff_mean": a["diff_mean"], "interval": d.get("interval"), "look": a.get("look"),
                     "verdict": a["verdict"], "kept": a.get("kept"), "sentence": a.get("sentence")})
    return rows
