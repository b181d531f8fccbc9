"""The published depth study (docs/results/depth_cpu/) is the registered one (conf/ab/depth_cpu.yaml), and every
verdict in it follows from its runs by the registered rules.

Each point is checked as a published protocol-2 comparison (tests/helpers/published_comparison.py: its
registration, the replicates its looks needed, the tune choice with its bracketing, every look replayed), and
the study's primary question is recomputed from the carried runs' final bpb by the contrast written out from
docs/ab-protocol.md (tests/helpers/published_study.py), not by ``dormouse.ab.interaction``.

Until the study is published (it runs over several sittings; what resuming needs is carried in
docs/results/depth_cpu/carry/) these tests are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dormouse.ab.study import load_study
from tests.helpers import published_comparison as published
from tests.helpers import published_study

REPO = Path(__file__).resolve().parents[2]
NAME = "depth_cpu"
PUBLISHED = REPO / "docs" / "results" / NAME
CARRIED = PUBLISHED / "carry"  # <point>/<run>: each finished run's config, provenance, log and metrics
POINTS = [p.name for p in load_study(NAME).points()]

pytestmark = pytest.mark.skipif(not (PUBLISHED / "results.json").is_file(),
                                reason=f"{NAME} is not published yet (its finished runs are carried in {CARRIED})")


def _point(name: str) -> dict[str, Any]:
    return published_study.read_json(PUBLISHED / name / "results.json")


def test_the_published_study_and_its_points_come_from_the_registered_file() -> None:
    published_study.check_study_registration(load_study(NAME), PUBLISHED)


@pytest.mark.parametrize("point", POINTS)
def test_each_point_ran_the_replicates_its_looks_needed_and_passed_its_counter_check(point: str) -> None:
    spec = next(p for p in load_study(NAME).points() if p.name == point).reg.spec
    published.check_replicates(_point(point), spec, CARRIED / point)


@pytest.mark.parametrize("point", POINTS)
def test_each_point_trained_every_arm_at_the_learning_rate_its_bracketed_tune_stage_chose(point: str) -> None:
    spec = next(p for p in load_study(NAME).points() if p.name == point).reg.spec
    published.check_tune_choice(_point(point), spec, CARRIED / point)


@pytest.mark.parametrize("point", POINTS)
def test_each_points_verdicts_follow_the_registered_group_sequential_rule(point: str) -> None:
    verdicts = published.replay_looks(_point(point))
    study = published_study.read_json(PUBLISHED / "results.json")
    row = next(p for p in study["points"] if p["name"] == point)
    assert {a: row["arms"][a]["verdict"] for a in verdicts} == {a: v for a, (v, _) in verdicts.items()}


def test_the_studys_interaction_follows_the_registered_contrast() -> None:
    published_study.check_interaction(load_study(NAME), PUBLISHED)


def test_every_model_at_or_above_the_bpb_ceiling_is_named_in_the_publication() -> None:
    over: dict[tuple[str, int], float] = {}  # (arm, seed): the points' seeds differ, so the key is unique
    for point in POINTS:
        over |= published.over_the_ceiling(_point(point))
    ceiling = _point(POINTS[0])["bad_run_ceiling"]
    named = published.named_at_or_above_the_ceiling(PUBLISHED / "README.md", ceiling)
    assert named == over, f"models at or above {ceiling} bpb: {over}; named in the README: {named}"


def test_the_publication_names_its_command_commit_machine_and_time() -> None:
    text = (PUBLISHED / "README.md").read_text(encoding="utf-8")
    for needle in (f"dormouse ab {NAME}", "commit", "torch", "cores", "wall", "study card", "tune", "bit for bit"):
        assert needle in text, f"docs/results/{NAME}/README.md does not say {needle!r}"
    prov = json.loads((PUBLISHED / "provenance.json").read_text(encoding="utf-8"))
    assert prov["command"] == f"dormouse ab {NAME} --jobs 2" and not prov["commit"].endswith("+dirty")
    assert prov["running_s"] <= prov["wall_s"] and set(prov["points"]) == set(POINTS)
    for point in POINTS:
        assert json.loads((PUBLISHED / point / "provenance.json").read_text())["commit"] == prov["commit"], point
        published.assert_report_plots_exist(PUBLISHED / point)
    results = published_study.read_json(PUBLISHED / "results.json")
    for plot in ("delta_vs_axis.png", "bpb_by_depth_points.png"):
        assert (PUBLISHED / plot).is_file(), plot
    assert results["complete"] is True
