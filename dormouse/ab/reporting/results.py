"""From finished runs to verdicts: the typed content of ``results.json`` (docs/ab-protocol.md, "Outputs"), read from
the run directories through :func:`dormouse.ab.rule.looks.progress`, so a resumed comparison reports the same as one run
in a sitting. Δ is the looks' own, and every number a verdict compared is recorded so it can be checked by hand. No
branch on an arm's name: "the simpler arm" is the earlier in ``ARMS``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from dormouse.ab.comparison.budget import ArmBudget, budget_of
from dormouse.ab.comparison.plan import ComparisonPlan
from dormouse.ab.reporting.jsonable import jsonable
from dormouse.ab.reporting.matched import View, matched_diffs, other_view, view_words
from dormouse.ab.rule import stats
from dormouse.ab.rule.bad_mode import Marker, arm_bad_modes, shared_seeds
from dormouse.ab.rule.bad_runs import is_bad
from dormouse.ab.rule.contrast import contrast_card
from dormouse.ab.rule.contrast import to_dict as contrast_dict
from dormouse.ab.rule.looks import INVALID, UNDECIDED, Progress, mean_reference, paired_differences, reference_runs
from dormouse.ab.rule.sequential import BETTER, TIE, WORSE, decide, nearest_skew_line
from dormouse.ab.runs.job import Run, recorded_fingerprints
from dormouse.ab.runs.records import RunRecord, is_finite_number
from dormouse.ab.tune.regret import Regret, fragile, regret_bound
from dormouse.arms.registry import ARMS
from dormouse.config.schema import arm_name
from dormouse.run.plugins import PROVENANCE_KEY
from dormouse.run.reader import Finding

# The order of an arm's verdict fields in results.json: a compared arm's, and the baseline's or A/A arm's.
_DECIDED_KEYS = ("verdict", "decision", "look", "sentence", "kept")
_HELPER_KEYS = ("verdict", "kept", "decision", "look", "sentence")
# The keys an arm's entry spreads its ``beside``, ``cost`` and ``ratios`` into (from_json gathers them back).
_BESIDE_KEYS = ("poi", "poi_interval", "poi_k", "hodges_lehmann", "hodges_lehmann_interval",
                "hodges_lehmann_confidence", "bad_runs", "tune_regret", "fragile_to_tuning",
                "bad_modes")
_COST_KEYS = ("params", "arm_params", "tok_s", "peak_mem_bytes", "devices", "steps", "flops_per_token", "flops",
              "arm_flops_counted", "wall_s")
_RATIO_KEYS = ("params_ratio", "tok_s_ratio", "peak_mem_ratio", "flops_ratio", "wall_ratio")


@dataclass
class ArmVerdict:
    """What the rule said of one arm: verdict, decision, deciding look (1-based), sentence and the arm kept."""

    verdict: str
    decision: dict[str, Any] | None = None
    look: int | None = None
    sentence: str | None = None
    kept: str | None = None

    def __post_init__(self) -> None:
        self.decision = jsonable(self.decision)


@dataclass
class ArmResult:
    """One arm's entry of ``results.json``: runs, Δ, what is reported beside, cost and verdict. Its values are JSON
    values (NaN as None, lists for tuples), so an entry read back equals the one written."""

    role: str  # baseline | aa | arm
    kind: str | None  # the mechanism the arm's config selects
    overrides: list[str]
    replicates: list[int]
    init_seeds: list[int]
    final_bpb: dict[str, float]  # replicate -> final bpb
    bpb_mean: float | None
    bpb_sd: float | None
    diffs: list[float]  # Δ per replicate, from the looks
    beside: dict[str, Any]  # P(improvement), Hodges–Lehmann, bad runs: reported, never decided on
    bpb_by_depth: dict[str, Any]
    findings: list[str]
    incomplete: list[str]
    cost: dict[str, Any]  # _COST_KEYS: parameters, throughput, memory, steps, FLOPs, wall-clock
    ratios: dict[str, float | None]  # _RATIO_KEYS, each to the baseline's
    outcome: ArmVerdict
    other_view: dict[str, Any] = field(default_factory=dict)  # Δ in the matched view not decided on (matched.py)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "outcome":
                setattr(self, f.name, jsonable(getattr(self, f.name)))

    @property
    def diff_mean(self) -> float | None:
        return stats.mean(self.diffs) if self.diffs else None

    @property
    def diff_sd(self) -> float | None:
        return stats.sd(self.diffs)

    @property
    def counter_check(self) -> str:
        return "pass" if not self.findings else "fail"

    def to_json(self) -> dict[str, Any]:
        said = asdict(self.outcome)
        return jsonable({
            "role": self.role, "kind": self.kind, "overrides": self.overrides, "replicates": self.replicates,
            "init_seeds": self.init_seeds, "final_bpb": self.final_bpb, "bpb_mean": self.bpb_mean,
            "bpb_sd": self.bpb_sd, "diffs": self.diffs, "diff_mean": self.diff_mean, "diff_sd": self.diff_sd,
            **self.beside, "bpb_by_depth": self.bpb_by_depth,
            "counter_check": self.counter_check, "findings": self.findings,
            "incomplete": self.incomplete, **self.cost, **self.ratios, "other_view": self.other_view,
            **{k: said[k] for k in (_DECIDED_KEYS if self.role == "arm" else _HELPER_KEYS)},
        })

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmResult:
        """The inverse of :meth:`to_json` (the derived ``diff_mean``, ``diff_sd`` and ``counter_check`` dropped; a
        field the entry lacks reads as empty)."""
        return cls(
            role=d["role"], kind=d.get("kind"), overrides=d.get("overrides") or [],
            replicates=d.get("replicates") or [], init_seeds=d.get("init_seeds") or [],
            final_bpb=d.get("final_bpb") or {}, bpb_mean=d.get("bpb_mean"), bpb_sd=d.get("bpb_sd"),
            diffs=d.get("diffs") or [], beside={k: v for k, v in d.items() if k in _BESIDE_KEYS},
            bpb_by_depth=d.get("bpb_by_depth") or {}, findings=d.get("findings") or [],
            incomplete=d.get("incomplete") or [], cost={k: d.get(k) for k in _COST_KEYS},
            ratios={k: d.get(k) for k in _RATIO_KEYS}, outcome=ArmVerdict(**{k: d.get(k) for k in _DECIDED_KEYS}),
            other_view=d.get("other_view") or {})


@dataclass(kw_only=True)
class ComparisonResults:
    """The content of ``results.json``, field by field in its order (``protocol`` first, always 2); ``launch`` and
    ``plots`` are set by whoever knows them and left out of the file while None. ``plan`` and ``state`` are what an
    analysis in this process came from (None for results read from a file), never part of the file."""

    name: str
    description: str
    metric: str
    baseline: str
    aa_arm: str | None
    sesoi: float
    alpha: float
    alpha_holdback: float
    looks: list[int]
    family: list[str]
    n_arms: int
    replicates: list[dict[str, Any]]  # index, init_seed, data_seed, aa_data_seed
    bad_run_ceiling: float | None
    bad_run_replacements: int
    pilot_sd: float
    expected_effect: float | None
    looks_taken: list[dict[str, Any]]  # look (1-based), n, arms, verdicts
    next_look: int | None  # 1-based
    complete: bool  # no run pending and every arm's runs complete
    overrides: list[str]
    fixed: list[str]
    budget: dict[str, Any] | None = None  # the registered budget and what it gave each arm (budget.py)
    reference: dict[str, Any] | None = None  # a registered reference and each verdict against either set
    bad_mode: dict[str, Any] | None = None  # the registered marker and the init seeds flagged in several arms
    multiplicity: str | None = None  # the registered correction over the family; None: bonferroni
    contrast: dict[str, Any] | None = None  # the registered contrast between two arms (rule/contrast.py to_dict)
    registration: dict[str, Any]
    design_card: dict[str, Any] | None
    aa_calibration: dict[str, Any] | None
    skewness: dict[str, Any] | None  # the pooled skewness of the paired differences (_skewness)
    code: dict[str, Any]
    tune: dict[str, Any] | None
    notes: list[str]
    arms: dict[str, ArmResult]
    runs: list[dict[str, Any]]
    generated: str
    command: str  # how it was run: the report's footer names it so
    launch: dict[str, Any] | None = None
    plots: list[str] | None = None
    plan: ComparisonPlan | None = field(default=None, compare=False, repr=False)
    state: Progress | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.compare and f.name != "arms":  # plan and state are not document fields
                setattr(self, f.name, jsonable(getattr(self, f.name)))

    def to_json(self) -> dict[str, Any]:
        """``results.json``, exactly (NaN as null)."""
        doc: dict[str, Any] = {"protocol": 2}
        for name in _DOCUMENT_FIELDS:
            value = getattr(self, name)
            if name in ("launch", "plots", "bad_mode", "multiplicity", "contrast") and value is None:
                continue
            doc[name] = {n: a.to_json() for n, a in value.items()} if name == "arms" else value
        return jsonable(doc)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ComparisonResults:
        """The inverse of :meth:`to_json`: a protocol-2 ``results.json`` as the typed results (a field the file
        lacks reads as None, the hold-back and the replacements as the registration's defaults)."""
        kw = {name: doc.get(name) for name in _DOCUMENT_FIELDS}
        kw["alpha_holdback"] = doc.get("alpha_holdback", 1.0)
        kw["bad_run_replacements"] = doc.get("bad_run_replacements", 0)
        kw["arms"] = {n: ArmResult.from_json(a) for n, a in doc["arms"].items()}
        return cls(**kw)


_DOCUMENT_FIELDS = tuple(f.name for f in fields(ComparisonResults) if f.compare)


# --- analysis -------------------------------------------------------------------------------------------

def _mean_of(values: list[float]) -> float | None:
    vals = [v for v in values if is_finite_number(v)]
    return float(np.mean(vals)) if vals else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def _cost(records: list[RunRecord], budget: ArmBudget | None) -> dict[str, Any]:
    """Parameters, throughput (median tok/s over the eval windows: robust to the warm-up window), peak memory and
    wall-clock (the final eval's ``time_s``), averaged over the arm's runs; steps and FLOPs from its budget."""
    params = _mean_of([(r.final or {}).get("params", r.provenance.get("params", math.nan)) for r in records])
    arm_params = _mean_of([r.provenance.get("arm_params", math.nan) for r in records])
    tok_s = _mean_of([float(np.median([x["tok/s"] for x in r.rows if is_finite_number(x.get("tok/s"))]))
                      for r in records if any(is_finite_number(x.get("tok/s")) for x in r.rows)])
    peak = _mean_of([max(x.get("peak_mem_bytes", 0) or 0 for x in r.rows) for r in records if r.rows])
    devices = sorted({str(r.provenance.get("device", "?")) for r in records})
    wall = _mean_of([float(r.final["time_s"]) for r in records if r.final and is_finite_number(r.final.get("time_s"))])
    spent = {} if budget is None else {
        "steps": budget.steps, "flops_per_token": budget.flops_per_step / budget.tokens_per_step,
        "flops": budget.flops, "arm_flops_counted": budget.arm_counted}
    return {"params": params, "arm_params": arm_params, "tok_s": tok_s, "peak_mem_bytes": peak or None,
            "devices": devices, **spent, "wall_s": wall}


def _ratios(cost: dict[str, Any], base_cost: dict[str, Any], cpu: bool) -> dict[str, float | None]:
    return {"params_ratio": _ratio(cost["params"], base_cost["params"]),
            "tok_s_ratio": _ratio(cost["tok_s"], base_cost["tok_s"]),
            # On CPU the figure is the process's max RSS, which only grows across the runs of one
            # process: a ratio would compare run order, not arms.
            "peak_mem_ratio": None if cpu else _ratio(cost["peak_mem_bytes"], base_cost["peak_mem_bytes"]),
            "flops_ratio": _ratio(cost.get("flops"), base_cost.get("flops")),
            "wall_ratio": _ratio(cost["wall_s"], base_cost["wall_s"])}


def simpler(kind_a: str, kind_b: str) -> str:
    rank = {k: i for i, k in enumerate(ARMS)}
    return min(kind_a, kind_b, key=lambda k: rank.get(k, len(rank)))


def _by_depth(recs: list[RunRecord], base: dict[int, RunRecord], role: str) -> dict[str, Any]:
    """Secondary, never decided on: mean final bpb at every depth and, for a compared arm, Δ's mean and sd."""
    keys = sorted({k for r in recs if r.final for k in r.final if k.startswith("bpb@")}, key=lambda k: int(k[4:]))
    out: dict[str, Any] = {}
    for k in keys:
        d = paired_differences(recs, base, k) if role != "baseline" else []
        out[k] = {"bpb_mean": _mean_of([float(r.final[k]) for r in recs if r.final and k in r.final]),
                  "diff_mean": stats.mean(d) if d else None, "diff_sd": stats.sd(d)}
    return out


def _other_view(view: View | None, recs: list[RunRecord], base: dict[int, RunRecord]) -> dict[str, Any]:
    """Δ in the matched view the budget does not decide on, with what is reported beside Δ; descriptive."""
    if view is None:
        return {}
    diffs = matched_diffs(view, recs, base)
    return {**view_words(view), "diffs": diffs, "diff_mean": stats.mean(diffs) if diffs else None,
            "diff_sd": stats.sd(diffs), **_beside(diffs)}


def _beside(diffs: list[float]) -> dict[str, Any]:
    """Reported beside the verdict, never decided on: P(improvement) with its Clopper–Pearson interval, and the
    Hodges–Lehmann Δ with its signed-rank interval."""
    poi = stats.prob_improvement(diffs) if diffs else None
    hl = stats.hodges_lehmann(diffs) if diffs else None
    return {"poi": None if poi is None else poi.estimate, "poi_interval": None if poi is None else poi.interval,
            "poi_k": None if poi is None else poi.k,
            "hodges_lehmann": None if hl is None else hl.estimate,
            "hodges_lehmann_interval": None if hl is None else hl.interval,
            "hodges_lehmann_confidence": None if hl is None else hl.confidence}


def _bad_runs(finals: list[float], ceiling: float | None,
              replaced: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """Runs above the ceiling, counted over every run the arm made (replaced ones too, so spares hide nothing), and
    under the policy each replacement."""
    rate = None if ceiling is None else stats.bad_run_rate(finals, ceiling)
    if rate is None:
        return None
    out = {"count": rate.k, "n": rate.n, "rate": rate.estimate, "interval": rate.interval, "ceiling": ceiling}
    if replaced is not None:
        out["replaced"] = replaced
    return out


def _replacements(arm: str, recs: dict[int, RunRecord], base: dict[int, RunRecord], state: Progress,
                  ceiling: float | None) -> list[dict[str, Any]]:
    def bad(runs: dict[int, RunRecord], k: int) -> bool:
        r = runs.get(k)
        return r is not None and r.final is not None and is_bad(float(r.final["bpb"]), ceiling)

    return [{"replicate": k, "spare": s, "bad": [who for who, runs in (("arm", recs), ("baseline", base))
                                                 if bad(runs, k)]}
            for k, s in state.replaced.get(arm, [])]


def _kept(verdict: str, arm: str, base: str, kind: str, base_kind: str) -> str | None:
    """The arm kept: a better arm; the baseline after worse; the simpler after a tie or no decision; none if
    invalid."""
    if verdict == BETTER:
        return arm
    if verdict in (TIE, UNDECIDED):
        return base if simpler(kind, base_kind) == base_kind else arm
    if verdict == WORSE:
        return base
    return None


def _decided(arm: str, kind: str | None, state: Progress, base: str, base_kind: str) -> ArmVerdict:
    """A compared arm's verdict, its sentence, the look that decided it, and the arm kept."""
    decision = state.decisions.get(arm)
    verdict = state.verdict(arm)
    if verdict == INVALID:
        sentence = f"{arm} is invalid: {state.invalid[arm]}"
    elif decision is None:
        sentence = f"{arm} was not decided: its first look has not been taken"
    else:
        sentence = decision.sentence(arm, base)
    return ArmVerdict(verdict, None if decision is None else decision.to_dict(),
                      None if decision is None else decision.look + 1, sentence,
                      _kept(verdict, arm, base, kind or "?", base_kind))


# The A/A row points at the check by the name the report's paragraph and the console's caption
# (dormouse.ab.comparison.status.assumption_caption) both give it, and both print it below the verdict table.
AA_ROW_SENTENCE = "the A/A calibration check, stated below the table"


def _helper(arm: str, role: str, state: Progress) -> ArmVerdict:
    if arm in state.invalid:
        return ArmVerdict(INVALID, sentence=state.invalid[arm])
    return ArmVerdict(role, sentence="the reference" if role == "baseline" else AA_ROW_SENTENCE)


def _arm_result(arm: str, role: str, ran: list[RunRecord], state: Progress, base: dict[int, RunRecord],
                spec: Any) -> dict[str, Any]:
    """One arm's numbers that do not depend on the decision; ``ran`` is every run it made, its numbers over the runs
    its analysis uses."""
    recs = [r for r in ran if r.replicate in state.used.get(arm, ())]
    replaced = (_replacements(arm, {r.replicate: r for r in ran}, base, state, spec.bad_run_ceiling)
                if spec.bad_run_replacements > 0 and role != "baseline" else None)
    finals = {r.replicate: float(r.final["bpb"]) for r in recs if r.final}
    diffs = list(state.diffs.get(arm, [])) if role != "baseline" else []
    beside = _beside(diffs) if role != "baseline" else {}
    beside["bad_runs"] = _bad_runs([float(r.final["bpb"]) for r in ran if r.final], spec.bad_run_ceiling, replaced)
    if spec.bad_mode is not None:  # over every run the arm made, as the bad runs are
        modes = arm_bad_modes(ran, _marker(spec))
        beside["bad_modes"] = None if modes is None else modes.to_dict()
    return dict(
        role=role, kind=recs[0].kind if recs else None, overrides=list(spec.arms[arm]),
        replicates=[r.replicate for r in recs], init_seeds=[r.seed for r in recs],
        final_bpb={str(k): v for k, v in finals.items()}, bpb_mean=_mean_of(list(finals.values())),
        bpb_sd=stats.sd(list(finals.values())), diffs=diffs, beside=beside,
        bpb_by_depth=_by_depth(recs, base, role),
        findings=[_finding_text(f, r.run_dir.parent) for r in ran for f in r.findings],
        incomplete=[f"{r.run_dir.name}: {r.error or 'no final eval at step ' + str(r.steps)}"
                    for r in ran if not r.complete])


def _regrets(plan: ComparisonPlan, state: Progress, by_arm: dict[str, list[RunRecord]]) -> dict[str, Regret | None]:
    """Each arm's tuning regret bound (the A/A arm runs at its baseline's lr: its baseline's); none untuned. One
    tune seed per lr: the sd of a seed from the arm's confirmatory runs."""
    tune = state.tune
    if tune is None or not tune.settled:
        return {}
    out = {arm: regret_bound({lr: [v for v in vs if v is not None] for lr, vs in tune.table[arm].items()},
                             tune.chosen[arm], [float(r.final["bpb"]) for r in by_arm[arm] if r.final])
           for arm in tune.table if arm in tune.chosen}
    return {arm: out.get(plan.lr_source(arm)) for arm in plan.arms}


def _tuning(arm: str, role: str, said: ArmVerdict, regrets: dict[str, Regret | None], spec: Any) -> dict[str, Any]:
    """The arm's regret bound and, for a decided arm, whether its verdict is fragile to tuning (descriptive)."""
    if not regrets:
        return {}
    own = regrets.get(arm)
    flag = (fragile(said.verdict, said.decision, float(spec.sesoi), own, regrets.get(spec.baseline))
            if role == "arm" else None)
    return {"tune_regret": None if own is None else own.to_dict(), "fragile_to_tuning": flag}


def _marker(spec: Any) -> Marker:
    return Marker(float(spec.bad_mode.at_fraction), float(spec.bad_mode.margin))


def _bad_mode(spec: Any, arms: dict[str, ArmResult]) -> dict[str, Any] | None:
    """The registered marker, and the init seeds flagged in more than one arm (None without a marker)."""
    if spec.bad_mode is None:
        return None
    return {**asdict(_marker(spec)), "shared_seeds": shared_seeds({n: a.beside.get("bad_modes")
                                                                   for n, a in arms.items()})}


def _tune(plan: ComparisonPlan, state: Progress) -> dict[str, Any] | None:
    """The tune stage as results.json holds it (None without one)."""
    if state.tune is None:
        return None
    from dormouse.ab.tune.stage import to_dict  # the tune wing loads only for a tuned comparison

    return to_dict(plan, state.tune)


def analyze(plan: ComparisonPlan, state: Progress, read: Callable[[Run], RunRecord], *,
            registration: dict[str, Any] | None = None, design_card: dict[str, Any] | None = None,
            launch: dict[str, Any] | None = None) -> tuple[ComparisonResults, list[RunRecord]]:
    """Apply the protocol to the runs the looks used; returns (the results, the records read)."""
    spec = plan.spec
    base, aa = spec.baseline, spec.aa_arm
    records = [read(p) for p in plan.runs if state.ran(p)]
    by_arm = {a: [r for r in records if r.arm == a] for a in spec.arms}
    base_runs = {r.replicate: r for r in by_arm[base]}
    reference = reference_runs(plan, by_arm)  # a tested arm's Δ is against it (the baseline unless registered)
    regrets = _regrets(plan, state, by_arm)
    base_kind = arm_name(next(p.cfg for p in plan.runs if p.arm == base))  # what the registration selects
    base_cost = _cost(by_arm[base], plan.budgets.get(base))
    view = (other_view(budget_of(spec).unit, {a: b.flops_per_step for a, b in plan.budgets.items()})
            if plan.budgets else None)
    cpu = any(str(r.provenance.get("device", "")).startswith("cpu") for r in records)
    arms: dict[str, ArmResult] = {}
    for arm in spec.arms:
        role = "baseline" if arm == base else "aa" if arm == aa else "arm"
        numbers = _arm_result(arm, role, by_arm[arm], state, base_runs if role != "arm" else reference, spec)
        cost = _cost(by_arm[arm], plan.budgets.get(arm))
        used = [r for r in by_arm[arm] if r.replicate in state.used.get(arm, ())]
        said = (_decided(arm, numbers["kind"], state, base, base_kind) if role == "arm"
                else _helper(arm, role, state))
        numbers["beside"].update(_tuning(arm, role, said, regrets, spec))
        arms[arm] = ArmResult(**numbers, cost=cost, ratios=_ratios(cost, base_cost, cpu), outcome=said,
                              other_view=(_other_view(view, used, base_runs if role == "aa" else reference)
                                          if role != "baseline" else {}))
    results = ComparisonResults(
        **_registered(plan), bad_mode=_bad_mode(spec, arms), looks_taken=_looks_taken(state),
        next_look=None if state.next_look is None else state.next_look + 1,
        complete=not state.pending and all(not a.incomplete for a in arms.values())
        and (state.tune is None or state.tune.settled),
        registration=registration or {}, design_card=design_card,
        aa_calibration=_calibration(arms, aa, float(spec.pilot_sd)), skewness=_skewness(arms, design_card),
        code=_code(records), tune=_tune(plan, state), reference=_reference(plan, state, by_arm),
        contrast=_contrast(plan, state),
        notes=_notes(cpu, state), arms=arms,
        runs=[_run_json(r) for r in sorted(records, key=lambda r: (r.replicate, plan.arms.index(r.arm)))],
        generated=datetime.now().isoformat(timespec="seconds"), command=f"dormouse ab {plan.reg.argument}",
        launch=launch, plan=plan, state=state)
    return results, records


def _contrast(plan: ComparisonPlan, state: Progress) -> dict[str, Any] | None:
    """The registered contrast as results.json holds it, with what is reported beside it and its design card."""
    if state.contrast is None:
        return None
    card = contrast_card(plan.spec)
    return {**contrast_dict(plan.spec, state.contrast), "beside": _beside(state.contrast.diffs),
            "card": {"card": card.to_dict(), "text": card.to_text()}}


def _registered(plan: ComparisonPlan) -> dict[str, Any]:
    """The registered design as results.json states it."""
    spec = plan.spec
    return {"name": spec.name, "description": spec.description, "metric": spec.metric, "baseline": spec.baseline,
            "aa_arm": spec.aa_arm, "sesoi": spec.sesoi, "alpha": spec.alpha, "alpha_holdback": spec.alpha_holdback,
            "looks": list(plan.looks), "family": list(spec.tested), "n_arms": plan.design().n_arms,
            "replicates": [vars(r) for r in plan.replicates], "bad_run_ceiling": spec.bad_run_ceiling,
            "bad_run_replacements": spec.bad_run_replacements, "pilot_sd": spec.pilot_sd,
            "expected_effect": spec.expected_effect, "overrides": list(plan.overrides), "fixed": list(spec.fixed),
            "multiplicity": spec.multiplicity,
            "budget": {**asdict(budget_of(spec)), "arms": {a: b.to_dict() for a, b in plan.budgets.items()}}}


_SETS = ("baseline", "aa", "mean")  # what the sensitivity table decides each arm against


def _reference(plan: ComparisonPlan, state: Progress, by_arm: dict[str, list[RunRecord]]) -> dict[str, Any] | None:
    """Under a registered ``reference``: each tested arm's verdict against the baseline's runs, the A/A arm's, and
    their per-replicate mean, at the look that decided it on the replicates it used; only the registered set's is
    the verdict, the others show how much the choice of pre-norm runs moves it."""
    spec = plan.spec
    if getattr(spec, "reference", None) is None or spec.aa_arm is None:
        return None
    sets = {"baseline": {r.replicate: r for r in by_arm[spec.baseline]},
            "aa": {r.replicate: r for r in by_arm[spec.aa_arm]},
            "mean": mean_reference(by_arm[spec.baseline], by_arm[spec.aa_arm])}
    table: dict[str, Any] = {}
    for arm, d in state.decisions.items():
        recs = [r for r in by_arm[arm] if r.replicate in state.used.get(arm, ())]
        row = {}
        for name in _SETS:
            diffs = paired_differences(recs, sets[name])
            said = (decide(plan.design(), d.look, {arm: diffs})[arm].verdict if len(diffs) == len(recs)
                    else INVALID)
            row[name] = {"diff_mean": stats.mean(diffs) if diffs else None, "verdict": said}
        table[arm] = row
    return {"registered": spec.reference, "sensitivity": table}


def _looks_taken(state: Progress) -> list[dict[str, Any]]:
    return [{"look": lk.index + 1, "n": lk.n, "arms": lk.arms,
             "verdicts": {a: d.verdict for a, d in lk.decisions.items()}} for lk in state.looks]


def _calibration(arms: dict[str, ArmResult], aa: str | None, pilot_sd: float) -> dict[str, Any] | None:
    """The A/A check against the registered pilot sd (a check, never a verdict), with the compared arms' paired sds
    as numbers."""
    if aa is None:
        return None
    a = arms[aa]
    compared = {n: r.diffs for n, r in arms.items() if r.role == "arm" and r.outcome.verdict != INVALID}
    check = None if a.outcome.verdict == INVALID else stats.aa_calibration(a.diffs, pilot_sd, compared)
    if check is None:
        return {"agrees": None, "pilot_sd": pilot_sd, "sentence": "The check could not be made: the A/A arm is "
                "invalid, or it has fewer than 2 paired replicates."}
    return {**asdict(check), "sentence": check.sentence()}


def _skewness(arms: dict[str, ArmResult], design_card: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pooled skewness of the valid arms' differences and the design card's skew line it falls under; reported,
    never decided on."""
    diffs = {n: r.diffs for n, r in arms.items() if r.role != "baseline" and r.outcome.verdict != INVALID}
    pooled = stats.pooled_skewness(diffs)
    if pooled is None:
        return None
    line = nearest_skew_line(pooled.estimate, ((design_card or {}).get("card") or {}).get("skew_lines") or [])
    sentence = (f"pooled skewness of the paired differences {pooled.estimate:+.2f} ({pooled.n} differences of "
                f"{', '.join(pooled.arms)}, each arm centred and scaled by its own sd; se ≈ {pooled.se:.2f} for "
                "normal data)" + (f": {line}" if line else ""))
    return {**asdict(pooled), "estimator": "scipy.stats.skew(bias=False) of the pooled per-arm standardised "
            "differences", "line": line, "sentence": sentence}


def _code(records: list[RunRecord]) -> dict[str, Any]:
    """The commit and code fingerprint every run used (from the runs' attempt records)."""
    per_run: dict[str, Any] = {}
    for r in records:
        fps = [f for f in recorded_fingerprints(r.run_dir.parent, r.run_dir.name) if f]
        per_run[r.run_dir.name] = {"commit": sorted({str(f.get("commit")) for f in fps}),
                                   "fingerprint": sorted({str(f.get("sha256")) for f in fps})}
    commits = sorted({c for v in per_run.values() for c in v["commit"]})
    prints = sorted({c for v in per_run.values() for c in v["fingerprint"]})
    # the plugins the runs' arms came from (provenance: module, file, sha256), each once
    plugins = {json.dumps(p, sort_keys=True): p for r in records for p in r.provenance.get(PROVENANCE_KEY) or []}
    return {"commits": commits, "fingerprints": prints, "runs": per_run, "plugins": list(plugins.values())}


def _notes(cpu: bool, state: Progress) -> list[str]:
    notes = []
    if state.tune is not None and not state.tune.settled and state.pending:
        notes.append(f"The tune stage is not finished: {len(state.pending)} tune run(s) to train; rerun "
                     "`dormouse ab` to continue.")
    elif state.pending:
        notes.append(f"Look {int(state.next_look or 0) + 1} is not taken yet: {len(state.pending)} run(s) to train; "
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
