"""The bad-mode marker on the published depth study (docs/results/depth_cpu/): every point's carried runs run
through the analysis and the report (no training) under the study's registration with a marker added. The marker
finds exactly the six pre-norm runs of max_iter-4 whose bpb at step 800 sits in a second cluster (2.92–3.02
against 2.70–2.78), replicates 8 and 11 in both pre-norm sets; the verdicts stay the published ones.

Why 30 % and 0.14 bpb. The bad runs are decided early, so the marker reads the first eval at or after 30 % of the
2400 steps: step 800, the study's first eval, where the clusters are already apart. There the study's 174 other runs
lie around their arm's median with a pooled sd of 0.023 bpb, and the six lie 0.143–0.277 above theirs. A margin of
0.14 is 6 of those sds (a healthy run crosses it with probability ~1e-9 under normal run-to-run noise, so a flag
is a second mode, not the first one's tail) and sits under the smallest of the six (0.143: prenorm_aa replicate 4,
against a median its arm's four bad runs lift by ~0.03). The one run between 3.5 and 6 sds is max_iter-2's pre-norm
replicate 3 (0.137 at step 800, ending 0.088 above its median; its A/A twin is its arm's highest too): the
end-of-training margin of 0.08 (3.5 sds) flags it as well, and the last test pins that count.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.registry import BadModeSpec
from dormouse.ab.reporting.report import render_report
from dormouse.ab.reporting.results import ComparisonResults, analyze
from dormouse.ab.rule.bad_mode import Marker, arm_bad_modes
from dormouse.ab.rule.looks import progress, read_run
from dormouse.ab.runs.records import RunRecord
from dormouse.ab.study.registry import load_study

REPO = Path(__file__).resolve().parents[2]
NAME = "depth_cpu"
PUBLISHED = REPO / "docs" / "results" / NAME
CARRIED = PUBLISHED / "carry"
MARKER = BadModeSpec(at_fraction=0.3, margin=0.14)
PRENORM = ("prenorm", "prenorm_aa")
# (point, arm, replicate): the bad mode of the audit of the published study
SIX = {("max_iter-4", "prenorm", 8), ("max_iter-4", "prenorm", 11)} | {
    ("max_iter-4", "prenorm_aa", k) for k in (1, 4, 8, 11)}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[ComparisonResults, list[RunRecord]]]:
    """Each point analysed from its carried runs, its registration with the marker added."""
    study = load_study(NAME)
    root = tmp_path_factory.mktemp("ab") / study.name
    out = {}
    for point in study.points():
        reg = dataclasses.replace(point.reg, spec=dataclasses.replace(point.reg.spec, bad_mode=MARKER))
        shutil.copytree(CARRIED / point.name, root / point.name)
        plan = build_plan(reg, [], root)
        out[point.name] = analyze(plan, progress(plan, read_run), read_run)
    return out


def _flagged(analysed: dict[str, tuple[ComparisonResults, list[RunRecord]]]) -> set[tuple[str, str, int]]:
    return {(point, arm, f["replicate"]) for point, (r, _) in analysed.items() for arm, a in r.arms.items()
            for f in (a.beside.get("bad_modes") or {}).get("flagged", [])}


def test_the_marker_finds_the_six_pre_norm_runs_of_the_bad_mode(analysed: dict[str, Any]) -> None:
    assert _flagged(analysed) == SIX
    for point, (r, _) in analysed.items():
        for arm, a in r.arms.items():
            assert a.beside["bad_modes"]["steps"] == [800], (point, arm)
            assert a.beside["bad_modes"]["n"] == 12, (point, arm)
    flagged = [f for r, _ in analysed.values() for arm in PRENORM for f in r.arms[arm].beside["bad_modes"]["flagged"]]
    assert 2.91 < min(f["bpb"] for f in flagged) and max(f["bpb"] for f in flagged) < 3.02
    ci = sps.binomtest(6, 72).proportion_ci(method="exact")  # the pre-norm runs of the three points together
    assert (round(ci.low, 2), round(ci.high, 2)) == (0.03, 0.17)


def test_the_report_names_the_shared_init_seeds_and_each_arms_rate(analysed: dict[str, Any]) -> None:
    results, _ = analysed["max_iter-4"]
    assert results.bad_mode["shared_seeds"] == {"3108": ["prenorm", "prenorm_aa"], "3111": ["prenorm", "prenorm_aa"]}
    assert all(not analysed[p][0].bad_mode["shared_seeds"] for p in ("max_iter-2", "max_iter-8"))
    doc = results.to_json()
    assert doc["bad_mode"]["at_fraction"] == 0.3 and doc["arms"]["prenorm_aa"]["bad_modes"]["k"] == 4
    report = render_report(ComparisonResults.from_json(json.loads(json.dumps(doc))), [])
    assert "## Bad modes (reported, never decided on)" in report
    assert "| `prenorm_aa` | 800 | 2.7720 | 4 of 12 | 33 % [10, 65] % |" in report
    assert "3108 (prenorm, prenorm_aa); 3111 (prenorm, prenorm_aa)." in report


def test_the_marker_changes_no_verdict(analysed: dict[str, Any]) -> None:
    for point, (r, _) in analysed.items():
        published = json.loads((PUBLISHED / point / "results.json").read_text(encoding="utf-8"))
        assert {a: x.outcome.verdict for a, x in r.arms.items()} == {
            a: x["verdict"] for a, x in published["arms"].items()}, point
        assert {a: x.diffs for a, x in r.arms.items()} == {a: x["diffs"] for a, x in published["arms"].items()}


def test_at_the_end_of_training_margin_the_marker_also_flags_max_iter_2_replicate_3(analysed: dict[str, Any]) -> None:
    wide = Marker(at_fraction=0.3, margin=0.08)
    flagged = {(point, arm, f.replicate) for point, (_, records) in analysed.items() for arm in PRENORM
               for f in arm_bad_modes([x for x in records if x.arm == arm], wide).flagged}
    assert flagged == SIX | {("max_iter-2", "prenorm", 3)}


def test_each_arm_of_every_point_reports_its_tuning_regret_from_its_confirmatory_spread(analysed: dict[str, Any]
                                                                                          ) -> None:
    """One tune seed per lr: each arm's regret bound takes the sd of a seed from its 12 confirmatory runs (11 df)."""
    for point, (r, _) in analysed.items():
        for arm, a in r.arms.items():
            regret = a.beside["tune_regret"]
            assert regret is not None and regret["spread_from"] == "confirmatory" and regret["df"] == 11, (point, arm)
            assert regret["upper"] >= 0.0
        report = render_report(r, [])
        assert "Tuning regret" in report and "the sd of its confirmatory runs" in report
