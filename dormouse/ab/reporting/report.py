"""``report.md`` and the files beside it (docs/ab-protocol.md, "Outputs"): the typed results written as
``results.json``, drawn, and rendered; a published report is made again from its file through
:meth:`ComparisonResults.from_json`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from dormouse.ab.comparison.registry import MEAN_REFERENCE
from dormouse.ab.reporting.plots import write_plots
from dormouse.ab.reporting.results import ComparisonResults
from dormouse.ab.rule.family import HOLM
from dormouse.ab.rule.looks import INVALID, UNDECIDED
from dormouse.ab.rule.sequential import BETTER, TIE, WORSE, holdback_words
from dormouse.ab.runs.records import RunRecord
from dormouse.ab.tune import report as tune_report
from dormouse.arms.registry import ARMS
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import ComparisonFiles


def registry_order() -> str:
    """The arm registry's order, simplest first, read at report time (plugins registered since import count)."""
    return ", then ".join(ARMS)


def meaning(verdict: str) -> str:
    """What a verdict means for the mechanism (after the sentence that states what was tested)."""
    return {
        BETTER: "the mechanism is kept if its cost (below) is acceptable.",
        WORSE: "the mechanism is rejected.",
        TIE: f"the mechanism is rejected: the simpler arm is kept (the registry's order: {registry_order()}).",
        UNDECIDED: f"nothing is adopted: the simpler arm stays (the registry's order: {registry_order()}).",
        INVALID: "no verdict: the arm's counters show it did not run as asked (ran ≠ asked, or 0), an unselected "
                 "arm leaked, or a run failed or is incomplete. Fix the cause and rerun; an invalid arm is never "
                 "a tie, and it stays in the multiplicity family.",
    }.get(verdict, "")


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
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.0f}"


def _plugin_words(plugin: dict[str, Any]) -> str:
    """A plugin a run recorded, as the report names it: module, file and source sha256."""
    return f"`{plugin.get('module')}` (`{plugin.get('file')}`, sha256 `{str(plugin.get('sha256'))[:12]}`)"


def _header(r: ComparisonResults) -> list[str]:
    reg, code = r.registration or {}, r.code or {}
    out = [f"# A/B comparison `{r.name}`", ""]
    if r.description:
        out += [r.description, ""]
    out += [
        f"- Registered: `{reg.get('source', '?')}` (sha256 `{str(reg.get('sha256', '?'))[:16]}`, protocol 2), "
        f"CLI overrides: {', '.join(f'`{o}`' for o in r.overrides) or 'none'}.",
        f"- Code: every run used commit {', '.join(f'`{c}`' for c in code.get('commits', [])) or '—'} "
        f"(code fingerprint {', '.join(f'`{c[:12]}`' for c in code.get('fingerprints', [])) or '—'}; "
        "per run in the Runs table)"
        + (f"; arms from plugins: {', '.join(_plugin_words(p) for p in code['plugins'])}."
           if code.get("plugins") else "."),
        f"- Baseline: `{r.baseline}`; metric: final eval bpb at the final depth (lower is better), read at "
        f"the registered final step. {_delta_words(r)} per replicate (same init seed and data order).",
        f"- Rule: SESOI ±{r.sesoi:g} bpb, α {r.alpha:g} family-wise over the {r.n_arms} registered arm(s) "
        f"({', '.join(f'`{a}`' for a in r.family)})"
        f"{_held(r)}; looks at {', '.join(map(str, r.looks))} replicates per "
        "arm. `better`/`worse`: the look's repeated confidence interval lies below/above 0; `tie`: the TOST "
        "interval lies inside ±SESOI; `undecided` otherwise; a decided arm stops. Each sentence below states "
        "the numbers the rule compared.",
        f"- Status: {'complete' if r.complete else '**incomplete** (some runs failed, or a look is pending)'}"
        f"; looks taken: {', '.join(str(lk['look']) for lk in r.looks_taken) or 'none'}.",
        "",
    ]
    if r.notes:
        out += ["> " + n for n in r.notes] + [""]
    return out


def _delta_words(r: ComparisonResults) -> str:
    """What Δ is taken against: the baseline, or the registered mean of the baseline and its A/A repeat."""
    if (r.reference or {}).get("registered") == MEAN_REFERENCE:
        return f"Δ = bpb(arm) − the mean of bpb(`{r.baseline}`) and bpb(`{r.aa_arm}`) (the registered reference)"
    return "Δ = bpb(arm) − bpb(baseline)"


def _held(r: ComparisonResults) -> str:
    """The registered α hold-back and a Holm correction as the header states them ("" without either)."""
    words = holdback_words(float(r.alpha), float(r.alpha_holdback))
    holm = ("each `better`/`worse` and each `tie` family-wise, by Holm's step-down over the arms for each kind of "
            "claim" if r.multiplicity == HOLM else "")
    said = "; ".join(w for w in (words, holm) if w)
    return f" ({said})" if said else ""


def contrast_lines(r: ComparisonResults) -> list[str]:
    """The registered contrast, first: its verdict, its sentence, what is reported beside it, and its card."""
    c = r.contrast
    if not c:
        return []
    b = c.get("beside") or {}
    d = c["looks"][-1] if c.get("looks") else {}
    out = ["## The registered contrast", "",
           f"**{c['arm']} − {c['against']}: {c['verdict']}** (SESOI {c['sesoi']:g} bpb; its own family of one test "
           f"at α {r.alpha:g}; Δ paired by replicate, negative: {c['arm']} is better).", "", c["sentence"], "",
           "| replicates | mean Δ | sd | interval | P(improvement) | Hodges–Lehmann Δ |", "|---|---|---|---|---|---|",
           f"| {d.get('n', '—')} | {_f(d.get('mean'), '+.4f')} | {_f(d.get('sd'))} | {_interval(d.get('interval'))} "
           f"| {_f(b.get('poi'), '.2f')} {_interval(b.get('poi_interval'), '.2f')} "
           f"| {_f(b.get('hodges_lehmann'), '+.4f')} {_interval(b.get('hodges_lehmann_interval'))} |"]
    card = (c.get("card") or {}).get("text")
    if card:
        out += ["", "The contrast's design card:", "", "```", card.rstrip(), "```"]
    return out + [""]


def _verdict_table(r: ComparisonResults) -> list[str]:
    out = ["## Verdicts", "",
           f"| arm | kind | look | n | bpb mean ± sd | mean Δ vs {r.baseline} | repeated interval | verdict | "
           "P(improvement) [95 %] | Hodges–Lehmann Δ | bad runs | kept |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in r.arms.items():
        label = f"`{name}`" + (" (A/A)" if a.role == "aa" else "") + tune_report.verdict_mark(r, name)
        said, beside = a.outcome, a.beside
        d = said.decision or {}
        poi = ("—" if beside.get("poi") is None
               else f"{beside['poi_k']}/{len(a.diffs)} {_interval(beside.get('poi_interval'), '.2f')}")
        bad = beside.get("bad_runs")
        bad_text = "—" if bad is None else f"{bad['count']}/{bad['n']}"
        out.append(
            f"| {label} | {a.kind} | {_f(said.look, 'd')} | {len(a.replicates)} | "
            f"{_f(a.bpb_mean)} ± {_f(a.bpb_sd)} | {_f(a.diff_mean, '+.4f')} | "
            f"{_interval(d.get('interval'))} | **{said.verdict}**"
            f"{' (smaller than the SESOI)' if d.get('smaller_than_sesoi') else ''} | {poi} | "
            f"{_f(beside.get('hodges_lehmann'), '+.4f')} | {bad_text} | {said.kept or '—'} |")
    return out + tune_report.verdict_footnotes(r)


def regret_lines(r: ComparisonResults) -> list[str]:
    """Each arm's tuning regret bound beside its Δ, and the verdicts fragile to tuning (descriptive)."""
    rows = {n: a.beside for n, a in r.arms.items() if "tune_regret" in a.beside}
    if not rows:
        return []
    out = ["Tuning regret (how far each arm's chosen lr may be from the best it tried, a one-sided 95 % bound from "
           "the tune seeds' spread, else the confirmatory runs'; `—`: no spread to estimate it from):", ""]
    for name, b in rows.items():
        reg = b.get("tune_regret")
        spread = "" if reg is None or reg.get("spread_from", "tune") == "tune" else ", the sd of its confirmatory runs"
        bound = "—" if reg is None else f"≤ {reg['upper']:.4f} bpb ({reg['df']} df{spread})"
        flag = " — **fragile to tuning**: its margin to the decision boundary is smaller" if b.get(
            "fragile_to_tuning") else ""
        out.append(f"- `{name}`: {bound}{flag}")
    return out


def bad_run_lines(r: ComparisonResults) -> list[str]:
    """The bad-run policy's finding, one line per arm: bad runs over every run made, the rate's interval, each
    replacement. Empty without the policy."""
    most = r.bad_run_replacements
    if not most:
        return []
    out = [f"Bad runs (final bpb above the ceiling {r.bad_run_ceiling:g}; registered policy: at most {most} "
           "per arm replaced by the next spare replicate):"]
    for name, a in r.arms.items():
        bad = a.beside.get("bad_runs")
        if bad is None:
            continue
        lo, hi = bad["interval"]
        swaps = "; ".join(f"replicate {x['replicate']} replaced by spare {x['spare']} ({' and '.join(x['bad'])} "
                          "run bad)" for x in bad.get("replaced") or [])
        out.append(f"- {name}: {bad['count']} of {bad['n']} runs bad ({100 * bad['rate']:.0f} %, 95 % "
                   f"[{100 * lo:.0f}, {100 * hi:.0f}] %)" + (f"; {swaps}" if swaps else ""))
    return out


def bad_mode_lines(r: ComparisonResults) -> list[str]:
    """The registered bad-mode marker's finding: per arm the runs flagged, the rate's interval and their init seeds,
    then the seeds flagged in several arms. Reported, never decided on; empty without a marker."""
    marker = r.bad_mode
    if not marker:
        return []
    out = ["## Bad modes (reported, never decided on)", "",
           f"A run is in a bad mode when its eval bpb at the first eval at or after {marker['at_fraction']:g} of its "
           f"steps lies more than {marker['margin']:g} bpb above its arm's median there (over every run the arm "
           "made). Separate from the bad-run policy; no verdict reads it.", "",
           "| arm | eval step | median bpb there | runs in a bad mode | rate [95 %] | "
           "replicates (init seed: bpb, excess) |",
           "|---|---|---|---|---|---|"]
    for name, a in r.arms.items():
        modes = a.beside.get("bad_modes")
        if modes is None:
            out.append(f"| `{name}` | — | — | — | — | no run reached the marker's eval |")
            continue
        lo, hi = modes["interval"]
        where = "; ".join(f"{f['replicate']} (seed {f['init_seed']}: {f['bpb']:.4f}, {f['excess']:+.4f})"
                          for f in modes["flagged"]) or "—"
        out.append(f"| `{name}` | {', '.join(map(str, modes['steps']))} | {modes['median']:.4f} | "
                   f"{modes['k']} of {modes['n']} | {100 * modes['rate']:.0f} % [{100 * lo:.0f}, {100 * hi:.0f}] % | "
                   f"{where} |")
    shared = marker.get("shared_seeds") or {}
    out += ["", "Init seeds flagged in more than one arm (shared initial weights): " + (
        "; ".join(f"{seed} ({', '.join(arms)})" for seed, arms in shared.items()) if shared else "none") + "."]
    return out


def _sentences(r: ComparisonResults) -> list[str]:
    out = ["", "## What was tested", ""]
    for name, a in r.arms.items():
        if a.role != "arm":
            continue
        said = a.outcome
        kept = f" Kept: `{said.kept}`." if said.kept else ""
        out.append(f"- `{name}` — **{said.verdict}**: {said.sentence} So {meaning(said.verdict)}{kept}")
    return out + assumption_lines(r)


def assumption_lines(r: ComparisonResults) -> list[str]:
    """The design's assumptions beside the verdicts: the A/A check and the pooled skewness. A results.json holding
    the arms' F test instead renders it as it is, with no skewness line."""
    out: list[str] = []
    cal = r.aa_calibration
    if cal is not None and "pilot_sd" in cal:  # the A/A sd interval against the registered pilot sd
        verdict = {True: "agrees with the registered pilot sd", False: "**does not agree** with the registered "
                   "pilot sd", None: "could not be checked"}[cal.get("agrees")]
        out += ["", f"**A/A calibration check** (`{r.aa_arm}`: the baseline again on its own data-order "
                f"stream): its paired sd {verdict}. {cal['sentence']}"]
    elif cal is not None:  # a results.json with the F test of each arm's spread against the A/A's
        verdict = {True: "agrees", False: "**does not agree**", None: "could not be checked"}[cal.get("agrees")]
        out += ["", f"**A/A calibration check** (`{r.aa_arm}`: the baseline again on its own data-order "
                f"stream): its spread {verdict} with the compared arms'. {cal['sentence']}"]
    if r.skewness:
        out += ["", f"**Skewness**: {r.skewness['sentence']} (the bounds are exact for normal differences; the "
                "design card's skew lines state what skew does to them)."]
    return out


def _cost_table(r: ComparisonResults) -> list[str]:
    """What each arm cost: parameters, the budget's steps and training FLOPs, and the throughput and wall-clock
    measured (their ratios mean something only where the arms ran on one machine: the device column)."""
    out = ["", "## Cost relative to the baseline", "",
           "| arm | params | arm params | params × | steps | FLOPs/token | FLOPs | FLOPs × | tok/s | tok/s × | "
           "wall × | peak memory | peak memory × | device |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in r.arms.items():
        cost, ratio = a.cost, a.ratios
        uncounted = " (arm's own work uncounted)" if cost.get("arm_flops_counted") is False else ""
        out.append(
            f"| `{name}` | {_count(cost['params'])} | {_count(cost['arm_params'])} | "
            f"{_f(ratio['params_ratio'], '.3f')} | {_f(cost.get('steps'), 'd')} | "
            f"{_count(cost.get('flops_per_token'))}{uncounted} | {_count(cost.get('flops'))} | "
            f"{_f(ratio.get('flops_ratio'), '.3f')} | {_count(cost['tok_s'])} | {_f(ratio['tok_s_ratio'], '.3f')} | "
            f"{_f(ratio.get('wall_ratio'), '.3f')} | {_bytes(cost['peak_mem_bytes'])} | "
            f"{_f(ratio['peak_mem_ratio'], '.3f', 'n/a')} | {', '.join(cost['devices'])} |")
    out += ["", "FLOPs: training matmul FLOPs (×3 the forward), the block's and the arm's own; wall ×: the mean run's "
            "wall-clock over the baseline's."]
    out += ["", "## Counter check (`dormouse logs --check` on every run)", "", "| arm | result | findings |",
            "|---|---|---|"]
    out += [f"| `{name}` | {a.counter_check} | {len(a.findings)} |" for name, a in r.arms.items()]
    problems = [(name, f) for name, a in r.arms.items() for f in a.findings]
    if problems:
        out += ["", "Findings:", ""] + [f"- `{name}`: {f}" for name, f in problems]
    return out


def _budget_lines(r: ComparisonResults) -> list[str]:
    """The registered budget, and Δ in the matched view it does not decide on (descriptive)."""
    budget = r.budget or {}
    views = {n: a.other_view for n, a in r.arms.items() if a.other_view}
    if not budget and not views:
        return []
    unit = budget.get("unit", "steps")
    said = (f"every arm trains {budget['value']:g} {unit}" if budget.get("value") is not None and unit != "steps"
            else "every arm trains the same steps")
    out = ["", "## Budget and the other matched view", "",
           f"Registered budget: **{unit}** ({said}); the verdicts compare the arms there. Steps, FLOPs and "
           "wall-clock of each arm are in the cost table."]
    if views:
        first = next(iter(views.values()))
        out += ["", f"Beside it, descriptive (never decided on): Δ at matched **{first['unit']}**, each replicate's "
                f"runs read at {first['read_at']}.", "",
                "| arm | n | mean Δ ± sd | P(improvement) [95 %] | Hodges–Lehmann Δ |", "|---|---|---|---|---|"]
        for name, v in views.items():
            poi = ("—" if v.get("poi") is None
                   else f"{v['poi_k']}/{len(v['diffs'])} {_interval(v.get('poi_interval'), '.2f')}")
            out.append(f"| `{name}` | {len(v['diffs'])} | {_f(v.get('diff_mean'), '+.4f')} ± {_f(v.get('diff_sd'))} | "
                       f"{poi} | {_f(v.get('hodges_lehmann'), '+.4f')} |")
    return out


def _reference_table(r: ComparisonResults) -> list[str]:
    """Each verdict against either set of pre-norm runs and their mean (under a registered reference)."""
    ref = r.reference or {}
    rows = ref.get("sensitivity") or {}
    if not rows:
        return []
    names = {"baseline": f"vs `{r.baseline}`", "aa": f"vs `{r.aa_arm}`", "mean": "vs their mean"}
    registered = "mean" if ref.get("registered") == MEAN_REFERENCE else "baseline"
    out = ["", "## Reference sensitivity", "",
           f"Registered reference: {names[registered]} (the verdicts above). The same rule, at the same look and "
           "replicates, against each set of baseline runs:", "",
           "| arm | " + " | ".join(names[s] + (" (registered)" if s == registered else "") for s in names) + " |",
           "|---|" + "---|" * len(names)]
    for arm, row in rows.items():
        out.append(f"| `{arm}` | " + " | ".join(f"{_f(row[s]['diff_mean'], '+.4f')} {row[s]['verdict']}"
                                              for s in names) + " |")
    return out


def _depth_table(r: ComparisonResults) -> list[str]:
    keys = sorted({k for a in r.arms.values() for k in a.bpb_by_depth}, key=lambda k: int(k[4:]))
    if not keys:
        return []
    out = ["", "## Δ at every depth (secondary: reported, never decided on)", "",
           "Mean final bpb at each depth, and for a compared arm the mean paired Δ (± sd) at that depth.", "",
           "| arm | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for name, a in r.arms.items():
        cells = []
        for k in keys:
            d = a.bpb_by_depth.get(k) or {}
            delta = "" if d.get("diff_mean") is None else f" (Δ {d['diff_mean']:+.4f} ± {_f(d.get('diff_sd'))})"
            cells.append(_f(d.get("bpb_mean")) + delta)
        out.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return out


def _runs_table(r: ComparisonResults) -> list[str]:
    # How each run ran (dormouse/ab/runs/job.py records every attempt): on CPU the per-run thread count
    # fixes the order of a reduction, and the commit what computed it, so both belong next to the numbers.
    launch = r.launch or {}
    ran = launch.get("pairs", {})
    code = (r.code or {}).get("runs", {})
    out = ["", "## Runs", "",
           "| arm | replicate | init seed | complete | last step | final bpb | threads | launcher | commit | run |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for run in r.runs:
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
                + ". Threads and launcher above are per run, over all its attempts (a run resumed under "
                "another setting lists both)."]
    return out


def render_report(r: ComparisonResults, plots: list[str]) -> str:
    """The report.md text."""
    bad, regret, modes = bad_run_lines(r), regret_lines(r), bad_mode_lines(r)
    out = _header(r) + contrast_lines(r) + _verdict_table(r) + ([""] + bad if bad else [])
    out += ([""] + regret if regret else []) + _sentences(r) + ([""] + modes if modes else [])
    if r.tune:
        out += [""] + tune_report.markdown(r, plots)
    card = r.design_card
    if card:
        out += ["", "## Design card (simulated at registration from the registered pilot spread)", "", "```",
                card.get("text", "").rstrip(), "```"]
    out += _reference_table(r) + _budget_lines(r) + _depth_table(r) + _cost_table(r) + _runs_table(r)
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    out += ["", "## Registration", "", f"- Fixed overrides: {', '.join(f'`{o}`' for o in r.fixed) or 'none'}"]
    out += [f"- `{name}`: {', '.join(f'`{o}`' for o in a.overrides) or '(no overrides)'}"
            for name, a in r.arms.items()]
    out += ["- Replicates (init seed / data seed / A/A data seed): " + "; ".join(
        f"{x['index']}: {x['init_seed']} / {x['data_seed']} / {x['aa_data_seed']}" for x in r.replicates)]
    out += ["", f"_Generated {r.generated} by `{r.command or 'dormouse ab ' + r.name}`._", ""]
    return "\n".join(out)


def write_outputs(comp_dir: Path, results: ComparisonResults,
                  records: list[RunRecord]) -> tuple[ComparisonResults, dict[str, Path]]:
    """Draw the plots and write results.json and report.md into ``comp_dir``; returns the results as written and the
    paths."""
    plots = write_plots(comp_dir, results, records)
    results = replace(results, plots=[p.name for p in plots])
    files = ComparisonFiles(comp_dir)
    paths = {"results": files.results, "report": files.report}
    atomic_write_text(paths["results"], json.dumps(results.to_json(), indent=2, allow_nan=False) + "\n")
    atomic_write_text(paths["report"], render_report(results, results.plots or []))
    for p in plots:
        paths[p.stem] = p
    return results, paths


def verdict_rows(results: ComparisonResults) -> list[dict[str, Any]]:
    """One row per arm for the console summary (:func:`dormouse.ab.comparison.status.verdict_table`)."""
    rows = []
    for name, a in results.arms.items():
        said = a.outcome
        rows.append({"arm": name + (" (A/A)" if a.role == "aa" else ""), "bpb_mean": a.bpb_mean,
                     "diff_mean": a.diff_mean, "interval": (said.decision or {}).get("interval"), "look": said.look,
                     "verdict": said.verdict, "kept": said.kept, "sentence": said.sentence})
    return rows
