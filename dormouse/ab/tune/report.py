"""The report's tune section from the results' ``tune`` stage, so a published comparison renders again
(docs/ab-protocol.md, "Outputs"): the rule, each arm's lr table, spending and flags, the lr plot, and whether each
verdict's sign holds at the baseline's lr. The sign check reads the tune runs (few replicates, disjoint seeds): it
says how far a verdict leans on each arm's own lr, and decides nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from dormouse.ab.reporting.results import ComparisonResults
from dormouse.ab.rule.sequential import BETTER, WORSE
from dormouse.ab.runs.records import is_finite_number
from dormouse.run.files import LR_PLOT

HOLDS = "holds"
REVERSES = "reverses"
NOT_MEASURED = "not measured"
NO_SIGN = "no sign claimed"  # a tie, undecided or invalid verdict claims no direction
UNBRACKETED_MARK = "†"


def lr_key(lr: float) -> str:
    return repr(float(lr))


def ran_lrs(tune: dict[str, Any]) -> list[float]:
    """Every lr any arm ran (the grid and each arm's extensions), ascending: the table's columns."""
    return sorted({float(k) for by_lr in tune["table"].values() for k in by_lr})


def arm_flags(tune: dict[str, Any], arm: str) -> dict[str, Any]:
    """What the stage recorded about one arm's tuning; empty for an arm it did not tune (the A/A arm) or a record
    without bracketing."""
    return (tune.get("arms") or {}).get(arm) or {}


def unbracketed_side(results: ComparisonResults, arm: str) -> str | None:
    """``"low"``/``"high"`` when the arm's chosen lr is still at that edge of what it ran; else None."""
    return arm_flags(results.tune or {}, arm).get("unbracketed")


def mean_at(tune: dict[str, Any], arm: str, lr: float) -> float | None:
    """The arm's mean final tune bpb at ``lr``; None when it never ran there or a run there diverged or did not
    finish."""
    values = (tune["table"].get(arm) or {}).get(lr_key(lr)) or []
    if not values or not all(is_finite_number(v) for v in values):
        return None
    return fmean(float(v) for v in values)


@dataclass(frozen=True)
class LrCurve:
    """One arm's learning-rate curve as the plot draws it."""

    runs: list[tuple[float, float]] = field(default_factory=list)  # (lr, final bpb), one per finished tune run
    diverged: list[float] = field(default_factory=list)  # the lr of each tune run that diverged
    means: list[tuple[float, float]] = field(default_factory=list)  # (lr, mean bpb) where every run finished
    chosen: float | None = None
    confirmatory: tuple[float, float] | None = None  # (mean, sd) over the confirmatory replicates, at ``chosen``


def lr_curves(results: ComparisonResults) -> dict[str, LrCurve]:
    """Per tuned arm (the tune table's order): every tune run, the chosen lr, the confirmatory mean ± sd."""
    tune = results.tune or {}
    out: dict[str, LrCurve] = {}
    for arm, by_lr in tune["table"].items():
        runs, diverged, means = [], [], []
        for key in sorted(by_lr, key=float):
            lr = float(key)
            runs += [(lr, float(v)) for v in by_lr[key] if is_finite_number(v)]
            diverged += [lr for v in by_lr[key] if v == "diverged"]
            m = mean_at(tune, arm, lr)
            if m is not None:
                means.append((lr, m))
        chosen = tune["chosen"].get(arm)
        a = results.arms.get(arm)
        conf = ((float(a.bpb_mean), float(a.bpb_sd) if is_finite_number(a.bpb_sd) else 0.0)
                if a is not None and is_finite_number(a.bpb_mean) else None)
        out[arm] = LrCurve(runs, diverged, means, None if chosen is None else float(chosen), conf)
    return out


@dataclass(frozen=True)
class SignCheck:
    """Whether a compared arm's verdict keeps its sign at the baseline's chosen lr, in the tune runs."""

    arm: str
    verdict: str
    diff_mean: float | None  # the confirmatory mean Δ (each arm at its own lr)
    lr: float  # the baseline's chosen lr
    arm_mean: float | None  # the arm's mean tune bpb there (None: never ran there, or diverged)
    baseline_mean: float | None
    outcome: str  # HOLDS, REVERSES, NOT_MEASURED, or NO_SIGN for a verdict without a direction
    why: str = ""  # for NOT_MEASURED: which arm never ran there, or diverged there

    @property
    def tune_diff(self) -> float | None:
        """Arm minus baseline, mean tune bpb at the baseline's lr."""
        if self.arm_mean is None or self.baseline_mean is None:
            return None
        return self.arm_mean - self.baseline_mean


def sign_checks(results: ComparisonResults) -> list[SignCheck]:
    """One per compared arm, in the results' order; empty without a tune stage or the baseline's choice. ``better``
    holds where the tune difference is below 0, ``worse`` above; exactly 0 holds neither."""
    tune, base = results.tune, results.baseline
    if not tune or tune["chosen"].get(base) is None:
        return []
    lr = float(tune["chosen"][base])
    base_mean = mean_at(tune, base, lr)
    out = []
    for arm, a in results.arms.items():
        if a.role != "arm":
            continue
        arm_mean = mean_at(tune, arm, lr)
        verdict = str(a.outcome.verdict)
        if verdict not in (BETTER, WORSE):
            outcome = NO_SIGN if arm_mean is not None and base_mean is not None else NOT_MEASURED
        elif arm_mean is None or base_mean is None:
            outcome = NOT_MEASURED
        else:
            d = arm_mean - base_mean
            outcome = HOLDS if (d < 0 if verdict == BETTER else d > 0) else REVERSES
        why = (_unmeasured(tune, arm, lr) or _unmeasured(tune, base, lr)) if outcome == NOT_MEASURED else ""
        out.append(SignCheck(arm, verdict, a.diff_mean, lr, arm_mean, base_mean, outcome, why))
    return out


def _unmeasured(tune: dict[str, Any], arm: str, lr: float) -> str:
    """Why the arm has no mean tune bpb at ``lr`` ('' when it has one)."""
    values = (tune["table"].get(arm) or {}).get(lr_key(lr)) or []
    if not values:
        return f"{arm} never ran there"
    if "diverged" in values:
        return f"{arm} diverged there"
    return "" if all(is_finite_number(v) for v in values) else f"{arm} did not finish there"


# --- the markdown ---------------------------------------------------------------------------------------

def markdown(results: ComparisonResults, plots: list[str]) -> list[str]:
    tune = results.tune
    if not tune:
        return []
    signs = _sign_section(results)
    return (["## The tune stage", "", _rule(tune), ""] + _table(tune) + _failed_notes(tune) + _flag_notes(tune)
            + ["", _plot_line(plots)] + ([""] + signs if signs else []) + [""])


def _rule(tune: dict[str, Any]) -> str:
    text = (f"Rule ({tune['rule']}, registered): {tune['rule_text']}. Tune seeds: init {tune['init_seeds']}, "
            f"data order {tune['data_seeds']} (disjoint from the confirmatory streams).")
    # the rule text says how bracketing works; this line gives the registered numbers it works with
    registered = ([f"grid ratio {tune['ratio']:g}"] if tune.get("ratio") else []) \
        + ([f"at most {tune['extensions']} added lr(s) per arm"] if tune.get("extensions") else []) \
        + ([f"second seed within {tune['second_seed_gap']:g} bpb"] if tune.get("second_seed_gap") is not None
           else [])
    if tune.get("extensions") or tune.get("second_seed_gap") is not None:
        text += " Registered: " + ", ".join(registered) + "."
    if tune.get("aa_arm_takes"):
        text += f" The A/A arm takes {tune['aa_arm_takes']!r}'s lr."
    return text


def _lrs(xs: list[Any]) -> str:
    return ", ".join(f"{float(x):g}" for x in xs) or "—"


def _cell(tune: dict[str, Any], arm: str, lr: float) -> str:
    values = tune["table"][arm].get(lr_key(lr))
    if not values:
        return "—"  # this arm never ran here (another arm's extension)
    text = ", ".join(v if isinstance(v, str) else "not run" if v is None else f"{v:.4f}" for v in values)
    chosen = tune["chosen"].get(arm)
    return f"**{text}** ←" if chosen is not None and lr_key(chosen) == lr_key(lr) else text


def _spent(tune: dict[str, Any], arm: str) -> str:
    """Runs used / budget; a record without bracketing ran exactly the grid."""
    flags = arm_flags(tune, arm)
    runs = flags.get("runs", sum(v is not None for vs in tune["table"][arm].values() for v in vs))
    budget = flags.get("budget", len(tune["lrs"]) * int(tune["replicates"]))
    return f"{runs} / {budget}"


def _table(tune: dict[str, Any]) -> list[str]:
    """Arm × every lr run -> final bpb per tune run (chosen lr marked), then spending, flags and the chosen lr."""
    lrs = ran_lrs(tune)
    lines = ["| arm | " + " | ".join(f"lr {x:g}" for x in lrs) + " | runs used / budget | extended to | "
             "second seed at | stability-limited | unbracketed | chosen lr |",
             "|---|" + "---|" * (len(lrs) + 6)]
    for arm in tune["table"]:
        flags = arm_flags(tune, arm)
        side = flags.get("unbracketed")
        pick = tune["chosen"].get(arm)
        lines.append(f"| {arm} | " + " | ".join(_cell(tune, arm, lr) for lr in lrs)
                     + f" | {_spent(tune, arm)} | {_lrs(flags.get('extended', []))} | "
                     f"{_lrs(flags.get('second_seed', []))} | {', '.join(flags.get('stability_limited', [])) or '—'}"
                     f" | {f'**{side}** {UNBRACKETED_MARK}' if side else '—'} | "
                     f"{'—' if pick is None else f'{pick:g}'} |")
    return lines


def _failed_notes(tune: dict[str, Any]) -> list[str]:
    """The tune runs that failed without diverging, each with its reason: not +inf, so no lr is judged by them;
    no arm chooses until a rerun retries them."""
    failed = tune.get("failed") or {}
    if not failed:
        return []
    return ["", "**Failed** (a training error that is not a divergence: not counted as +inf, and no arm chooses "
            "until a rerun retries them): " + "; ".join(f"`{name}`: {why}" for name, why in failed.items()) + "."]


def _flag_notes(tune: dict[str, Any]) -> list[str]:
    if "arms" not in tune:
        return ["", "This tune record predates the bracketing stage: every arm ran the registered grid, no flags."]
    return ["", "*Extended to*: lrs added beyond the registered grid. *Second seed at*: lrs run on another tune "
            "seed (the best and a neighbour lay within the registered gap). *Stability-limited*: the chosen lr's "
            f"neighbour on that side diverged. **Unbracketed** {UNBRACKETED_MARK}: after its budget the chosen lr "
            "is still at that edge of what the arm ran, so its optimum may lie beyond it and its verdict holds "
            "at the best lr tried, not at its optimum."] + _bad_mode_note(tune)


def _bad_mode_note(tune: dict[str, Any]) -> list[str]:
    """The lrs dropped from each arm's choice because a tune seed of theirs fell in a registered bad mode."""
    dropped = {arm: flags["bad_mode_lrs"] for arm, flags in tune["arms"].items() if flags.get("bad_mode_lrs")}
    if not dropped:
        return []
    return ["", "*Dropped for a bad mode* (a tune seed above its lr's median at the registered marker): "
            + "; ".join(f"{arm}: {_lrs(lrs)}" for arm, lrs in dropped.items()) + "."]


def _plot_line(plots: list[str]) -> str:
    if LR_PLOT not in plots:
        return "The learning-rate plot was not drawn for this report (its results predate it)."
    return (f"The learning-rate plot: [`{LR_PLOT}`]({LR_PLOT}) (final bpb against lr, log axis, one panel per "
            "arm: every tune run a dot, a diverged run a red triangle at the top edge, the chosen lr a dashed "
            "line, the confirmatory mean ± sd at it a black square with its bar).")


def _sign_section(results: ComparisonResults) -> list[str]:
    checks = sign_checks(results)
    if not checks:
        return []
    tune, base = results.tune or {}, results.baseline
    lr = checks[0].lr
    out = ["### Does each verdict's sign hold at the baseline's lr?", "",
           f"From the tune runs alone ({tune['replicates']} registered replicate(s) per lr, on tune seeds disjoint "
           f"from the confirmatory ones): each arm's mean tune bpb at `{base}`'s chosen lr {lr:g} minus `{base}`'s "
           "there. A check of how far a verdict leans on each arm running at its own lr; it decides nothing.",
           "", f"| arm | verdict | mean Δ (each at its own lr) | arm's lr | tune Δ at lr {lr:g} | sign there |",
           "|---|---|---|---|---|---|"]
    for c in checks:
        diff = "—" if c.tune_diff is None else f"{c.tune_diff:+.4f}"
        pick = tune["chosen"].get(c.arm)
        out.append(f"| `{c.arm}` | {c.verdict} | {'—' if c.diff_mean is None else f'{c.diff_mean:+.4f}'} | "
                   f"{'—' if pick is None else f'{float(pick):g}'} | {diff} | {_outcome_words(c)} |")
    return out


def _outcome_words(c: SignCheck) -> str:
    if c.outcome == REVERSES:
        return f"**{REVERSES}**"
    if c.outcome == NOT_MEASURED:
        return f"{NOT_MEASURED} ({c.why})"
    if c.outcome == NO_SIGN:
        return f"{NO_SIGN} ({c.verdict})"
    return c.outcome


# --- the unbracketed flag beside the verdicts -----------------------------------------------------------

def verdict_mark(results: ComparisonResults, arm: str) -> str:
    """The mark the verdict table puts after an unbracketed arm's name ('' for any other)."""
    return f" {UNBRACKETED_MARK}" if unbracketed_side(results, arm) else ""


def verdict_footnotes(results: ComparisonResults) -> list[str]:
    """The verdict table's footnote for its unbracketed arms (none: no lines)."""
    flagged = [(arm, unbracketed_side(results, arm)) for arm in results.arms if unbracketed_side(results, arm)]
    if not flagged:
        return []
    return ["", f"{UNBRACKETED_MARK} **Unbracketed**: " + "; ".join(f"`{arm}`'s chosen lr is still at the {side} "
            "edge of what it ran" for arm, side in flagged) + " after its tune budget: its optimum may lie "
            "beyond, so its verdict holds at the best lr tried, not at its optimum (the tune stage, below)."]
