"""The published depth study (docs/results/depth_cpu/) is the registered one (conf/ab/depth_cpu.yaml), and every
verdict in it follows from its runs by the registered rules.

Each point is checked as a published protocol-2 comparison (tests/helpers/published_comparison.py: its
registration, the replicates its looks needed, the tune choice with its bracketing, every look replayed), and
the study's primary question is recomputed from the carried runs' final bpb by the contrast written out from
docs/ab-protocol.md (tests/helpers/published_study.py), not by ``dormouse.ab.study.interaction``.

Until the study is published (it runs over several sittings; what resuming needs is carried in
docs/results/depth_cpu/carry/) these tests are skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dormouse.ab.study.registry import load_study
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


# The README's primary-question table: | arm | Δ at each point … | L (se s) | [interval] | [TOST interval] | verdict |
_README_ARM = {"GR": "gr", "Full AttnRes": "attnres_full", "Block AttnRes": "attnres_block",
               "pre-norm A/A (not in the family)": "prenorm_aa"}
_NUMBER = re.compile(r"[-+]?\d+\.\d+")


def _readme_primary_rows() -> dict[str, list[str]]:
    text = (PUBLISHED / "README.md").read_text(encoding="utf-8").replace("\u2212", "-")
    section = published.readme_section(text, "## The primary question")
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in _README_ARM]
    return {_README_ARM[r[0]]: r[1:] for r in rows}


def test_the_readme_states_the_change_the_carried_runs_give() -> None:
    """Every number and verdict of the README's primary-question table is the oracle's, recomputed from the
    carried runs (tests/helpers/published_study.py), to the 4 decimals shown."""
    mine = published_study.check_interaction(load_study(NAME), PUBLISHED)
    rows = _readme_primary_rows()
    assert set(rows) == set(mine), f"the README's table has rows {sorted(rows)}; the study has {sorted(mine)}"
    for arm, cells in rows.items():
        want = mine[arm]
        *deltas, change, interval, tost, verdict = cells
        stated = [float(_NUMBER.findall(c)[0]) for c in deltas] + [float(x) for x in _NUMBER.findall(change)[:2]]
        stated += [float(x) for x in _NUMBER.findall(interval) + _NUMBER.findall(tost)]
        measured = [*want["means"], want["estimate"], want["se"], *want["interval"], *want["eq_interval"]]
        assert len(stated) == len(measured), (arm, cells)
        for got, exp in zip(stated, measured):
            assert abs(got - exp) <= 5.1e-5, f"{arm}: the README says {got}, the runs give {exp:.6f}: deviation=" \
                                             f"{abs(got - exp):.2e} bound=5.1e-05"
        assert want["verdict"] in verdict.replace("*", "").split(), (arm, verdict, want["verdict"])
