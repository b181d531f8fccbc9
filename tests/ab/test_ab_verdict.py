"""The verdict path as the runner and the report apply it (protocol 2): planted paired results go through
the comparison's plan, the replayed looks (``looks.progress``) and ``report.analyze``; the expected
verdicts are worked out here by hand.

With 3 replicates and one look, the superiority test of one arm is a paired t-test with 2 degrees of
freedom at Bonferroni's α / n_arms (the whole α is spent at the only look), whose two-sided p-value has a
closed form, p = 1 − t / √(t² + 2) (the Student-t CDF for ν = 2), so the planted numbers' p-values are
computed here without calling the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.registry import parse_spec, validate_spec
from dormouse.ab.reporting.report import render_report
from dormouse.ab.reporting.results import ComparisonResults, analyze
from dormouse.ab.rule.looks import progress
from dormouse.ab.rule.sequential import Design
from dormouse.ab.runs.job import Run
from dormouse.ab.runs.records import RunRecord, load_record
from dormouse.arms.registry import ARMS
from dormouse.config.schema import arm_name
from tests.helpers.registrations import registration, write_registry

SPEC = registration("t", ("rezero", "gr", "attnres_full", "attnres_block"), aa_arm=None,
                    fields="bad_run_ceiling: 2.15", fixed="[preset=tiny, train.device=cpu]")
BASE = {1: 2.00, 2: 2.10, 3: 2.20}


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Any:
    reg = write_registry(tmp_path_factory.mktemp("comparison"), "t", SPEC)
    return build_plan("t", [], tmp_path_factory.mktemp("ab"), registry=reg)


def planted_reader(plan: Any, diffs: dict[str, list[float]], failed: tuple[str, ...] = ()) -> Any:
    """Planted runs: the baseline at BASE, each arm at BASE + its diffs; ``failed`` runs have no final
    eval and failed in this invocation."""
    def read(run: Run) -> RunRecord:
        if run.name in failed:
            return RunRecord(run.arm, run.seed, run.run_dir, arm_name(run.cfg), 10, error="planted failure",
                             replicate=run.replicate)
        bpb = BASE[run.replicate] + (diffs[run.arm][run.replicate - 1] if run.arm in diffs else 0.0)
        row: dict[str, Any] = {"step": 10, "bpb": bpb, "bpb@1": bpb + 0.1, "bpb@2": bpb, "tok/s": 1000.0}
        return RunRecord(run.arm, run.seed, run.run_dir, arm_name(run.cfg), 10, rows=[row], final=row,
                         provenance={"device": "cpu"}, replicate=run.replicate)

    return read


def planted(plan: Any, diffs: dict[str, list[float]], failed: tuple[str, ...] = ()) -> dict[str, Any]:
    """Analyse planted final bpb (:func:`planted_reader`): the results.json content."""
    read = planted_reader(plan, diffs, failed)
    state = progress(plan, read, failed=set(failed))
    results, _ = analyze(plan, state, read)
    return results.to_json()


def test_the_report_states_the_paired_differences_the_looks_decided_on(plan: Any) -> None:
    """Δ (arm − baseline per replicate) is computed once, by the looks, and carried to the report: the
    differences a decision took are the ones reported, never a second computation of them."""
    diffs = {"gr": [-0.10, -0.11, -0.09], "attnres_full": [0.0, 0.001, -0.001], "attnres_block": [0.02, 0.0, 0.01]}
    read = planted_reader(plan, diffs)
    state = progress(plan, read)
    assert {a: state.diffs[a] for a in diffs} == {a: pytest.approx(d) for a, d in diffs.items()}
    state.diffs["gr"] = [d + 1.0 for d in state.diffs["gr"]]  # the looks' Δ changed: the report follows it
    gr = analyze(plan, state, read)[0].to_json()["arms"]["gr"]
    assert gr["diffs"] == state.diffs["gr"]
    assert gr["diff_mean"] == pytest.approx(sum(state.diffs["gr"]) / 3)


def test_the_registry_states_the_designs_own_checks() -> None:
    """The design owns its checks (dormouse.ab.rule.sequential.Design); the registry states them for the file,
    one line per bad field, and adds none of its own for α, the SESOI or the looks."""
    text = SPEC.replace("sesoi: 0.01", "sesoi: 0").replace("alpha: 0.05", "alpha: 0.7").replace(
        "looks: [3]", "looks: [3, 3]")
    spec = parse_spec(text, "t.yaml")
    lines = [ln for ln in validate_spec(spec, "t.yaml") if any(f"'{k}'" in ln for k in ("sesoi", "alpha", "looks"))]
    design = Design(alpha=0.7, sesoi=0.0, looks=(3, 3), n_arms=3)
    assert sorted(lines) == sorted(f"t.yaml: field '{name}': {what}" for name, what in design.field_problems())
    assert [line.split("'")[1] for line in lines] == ["sesoi", "alpha", "looks"]  # the file's order


def p_two_sided_df2(xs: list[float]) -> float:
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    t = abs(m) / (sd / math.sqrt(n))
    return 1 - t / math.sqrt(t * t + 2)


# gr: mean −0.05, sd c with c = 0.05·√3 / 7, so t = 7.0 and p = 1 − 7/√51 = 0.0198: significant at α/2
# (0.025) but not at α/3 (0.0167). The family size decides this arm.
_C = 0.05 * math.sqrt(3) / 7
ON_THE_FAMILY_EDGE = [-0.05 - _C, -0.05, -0.05 + _C]


def test_a_failed_arm_stays_in_the_multiplicity_family(plan: Any) -> None:
    """An arm whose runs failed is invalid and keeps its share of α: the others are judged at α / 3, the
    registered family, not at α / 2 (a failed arm dropping out would shrink the family)."""
    p = p_two_sided_df2(ON_THE_FAMILY_EDGE)
    assert 0.05 / 3 < p < 0.05 / 2, p  # the planted case: decided by the family size
    diffs = {"gr": ON_THE_FAMILY_EDGE, "attnres_full": [0.0, 0.001, -0.001], "attnres_block": [0.02, 0.0, 0.01]}
    whole = planted(plan, diffs)
    failed = planted(plan, diffs, failed=("attnres_block-s2",))
    assert failed["arms"]["attnres_block"]["verdict"] == "invalid"
    assert "planted failure" in failed["arms"]["attnres_block"]["sentence"]
    assert failed["n_arms"] == whole["n_arms"] == 3
    for results in (whole, failed):
        gr = results["arms"]["gr"]
        assert gr["decision"]["p"] == pytest.approx(p, rel=1e-9)
        assert gr["verdict"] == "undecided", (
            f"gr {gr['verdict']} at p {p:.4f} with family {gr['decision']['n_arms']} "
            f"(deviation={gr['verdict']} bound=undecided at α/3 = {0.05 / 3:.4f})")
        assert gr["decision"]["n_arms"] == 3
        assert gr["kept"] == "rezero"  # undecided: the simpler arm stays


def test_each_verdict_states_what_was_tested_and_keeps_by_the_registry_order(plan: Any) -> None:
    diffs = {"gr": [-0.10, -0.11, -0.09],  # better
             "attnres_full": [0.10, 0.11, 0.09],  # worse
             "attnres_block": [0.001, -0.001, 0.002]}  # tie: TOST interval well inside ±0.01
    results = planted(plan, diffs)
    verdicts = {a: r["verdict"] for a, r in results["arms"].items()}
    assert verdicts == {"rezero": "baseline", "gr": "better", "attnres_full": "worse", "attnres_block": "tie"}
    kept = {a: r["kept"] for a, r in results["arms"].items()}
    assert kept == {"rezero": None, "gr": "gr", "attnres_full": "rezero", "attnres_block": "rezero"}
    report = render_report(ComparisonResults.from_json(results), [])
    lines = {a: next(ln for ln in report.splitlines() if ln.startswith(f"- `{a}`")) for a in diffs}
    assert "gr has lower final bpb than rezero" in lines["gr"] and "lies below 0" in lines["gr"]
    assert "attnres_full has higher final bpb" in lines["attnres_full"]
    assert "differ by less than the SESOI 0.01 bpb" in lines["attnres_block"]
    assert (f"the simpler arm is kept (the registry's order: {', then '.join(ARMS)})"
            in lines["attnres_block"])
    for arm in diffs:  # results.json holds every number the sentence states
        d = results["arms"][arm]["decision"]
        assert f"[{d['interval'][0]:+.4f}, {d['interval'][1]:+.4f}]" in results["arms"][arm]["sentence"] \
            or f"[{d['eq_interval'][0]:+.4f}, {d['eq_interval'][1]:+.4f}]" in results["arms"][arm]["sentence"]


def test_beside_the_verdict_bad_runs_and_depth_are_reported_not_decided(plan: Any) -> None:
    results = planted(plan, {"gr": [-0.10, -0.11, -0.09], "attnres_full": [0.0, 0.2, 0.0],
                             "attnres_block": [0.0, 0.0, 0.0]})
    full = results["arms"]["attnres_full"]
    # bad_run_ceiling 2.15: attnres_full ends at 2.00, 2.30, 2.20 -> 2 of 3 above it; the baseline 1 of 3.
    assert full["bad_runs"]["count"] == 2 and full["bad_runs"]["n"] == 3
    assert results["arms"]["rezero"]["bad_runs"]["count"] == 1
    assert results["arms"]["gr"]["bpb_by_depth"]["bpb@1"]["diff_mean"] == pytest.approx(-0.10)
    report = render_report(ComparisonResults.from_json(results), [])
    assert "## Δ at every depth (secondary" in report
    assert "2/3" in next(ln for ln in report.splitlines() if ln.startswith("| `attnres_full`"))


def test_the_metric_is_the_registered_final_eval_not_the_best(tmp_path: Path) -> None:
    """A run whose bpb rose after an earlier eval is scored at its registered final step, never at its
    best eval (that would be early stopping chosen after the fact)."""
    rows = [{"step": 10, "bpb": 2.40}, {"step": 20, "bpb": 2.10}, {"step": 30, "bpb": 2.25}]
    run = tmp_path / "gr-s1"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec = load_record("gr", 1, run, "gr", 30)
    assert rec.final is not None and rec.final["step"] == 30
    assert rec.final["bpb"] == 2.25, f"read {rec.final['bpb']} (deviation={rec.final['bpb'] - 2.25:+.2f} bound=0)"
    assert load_record("gr", 1, run, "gr", 40).final is None  # the registered step was never reached
