"""The bad-mode marker (dormouse/ab/rule/bad_mode.py): a run whose eval bpb at the first eval at or after the
registered share of its steps lies above its arm's median there by more than the margin is flagged; each arm's
count comes with its Clopper–Pearson interval and the flagged init seeds, and seeds flagged in several arms are
named. Planted curves, worked out by hand; the registration's checks; a registration without the marker reports
nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats as sps

from dormouse.ab.reporting.report import bad_mode_lines, render_report
from dormouse.ab.reporting.results import ComparisonResults
from dormouse.ab.rule.bad_mode import Marker, arm_bad_modes, marker_row, shared_seeds
from dormouse.ab.runs.records import RunRecord
from tests.helpers.registrations import refusal, registration

REPO = Path(__file__).resolve().parents[2]
# Evals at 100, 200, 300 of 300 steps; a marker at 0.3 reads the eval at step 100 (90 rounds up to it).
MARKER = Marker(at_fraction=0.3, margin=0.1)


def _run(replicate: int, early: float, final: float, arm: str = "prenorm") -> RunRecord:
    rows = [{"step": 100, "bpb": early}, {"step": 200, "bpb": (early + final) / 2}, {"step": 300, "bpb": final}]
    return RunRecord(arm, 100 + replicate, Path(f"/nowhere/{arm}-s{100 + replicate}"), arm, 300, rows=rows,
                     final=rows[-1], replicate=replicate)


# Five healthy runs at 2.70-2.74 early; replicates 6 and 7 start 0.25 high and close half the gap by the end.
PLANTED = [_run(k, 2.70 + 0.01 * (k - 1), 2.40 + 0.005 * k) for k in range(1, 6)] + [
    _run(6, 2.97, 2.52), _run(7, 2.99, 2.53)]


def test_the_marker_reads_the_first_eval_at_or_after_its_share_of_the_steps() -> None:
    rows = PLANTED[0].rows
    assert marker_row(rows, 90.0)["step"] == 100
    assert marker_row(rows, 100.0)["step"] == 100
    assert marker_row(rows, 100.5)["step"] == 200
    assert marker_row(rows, 301.0) is None
    assert marker_row([{"step": 100, "bpb": float("nan")}], 50.0) is None


def test_a_run_above_its_arms_median_by_more_than_the_margin_is_flagged_with_its_seed() -> None:
    modes = arm_bad_modes(PLANTED, MARKER)
    assert modes is not None and modes.steps == (100,)
    assert modes.median == pytest.approx(2.73)  # the middle of the seven early values
    assert [(f.replicate, f.init_seed) for f in modes.flagged] == [(6, 106), (7, 107)]
    assert [f.excess for f in modes.flagged] == pytest.approx([0.24, 0.26])
    ci = sps.binomtest(2, 7).proportion_ci(method="exact")
    assert (modes.k, modes.n, modes.rate) == (2, 7, pytest.approx(2 / 7))
    assert modes.interval == pytest.approx((ci.low, ci.high))


def test_a_run_within_the_margin_is_not_flagged() -> None:
    # replicate 5 is 0.01 above the median: under any margin above that it is healthy
    assert arm_bad_modes(PLANTED, Marker(0.3, 0.011)).k == 2
    assert arm_bad_modes(PLANTED, Marker(0.3, 0.25)).k == 1  # only replicate 7's 0.26 is left above
    assert arm_bad_modes(PLANTED, Marker(0.3, 0.3)).k == 0


def test_the_marker_reads_the_registered_step_not_the_final_eval() -> None:
    # At the end the bad runs are only 0.105-0.115 above the median: a margin of 0.2 flags them early, not there.
    assert arm_bad_modes(PLANTED, Marker(0.3, 0.2)).k == 2
    assert arm_bad_modes(PLANTED, Marker(1.0, 0.2)).k == 0


def test_an_arm_with_no_run_at_its_marker_eval_has_no_bad_mode_count() -> None:
    assert arm_bad_modes([], MARKER) is None
    assert arm_bad_modes([_run(1, 2.7, 2.4)], Marker(1.0, 0.1)).n == 1


def test_init_seeds_flagged_in_several_arms_are_named() -> None:
    twin = [_run(k, r.rows[0]["bpb"], r.final["bpb"], arm="prenorm_aa") for k, r in enumerate(PLANTED, 1)]
    twin[5] = _run(6, 2.72, 2.41, arm="prenorm_aa")  # replicate 6 is healthy in the twin arm
    arms = {"prenorm": arm_bad_modes(PLANTED, MARKER).to_dict(), "prenorm_aa": arm_bad_modes(twin, MARKER).to_dict(),
            "gr": None}
    assert shared_seeds(arms) == {"107": ["prenorm", "prenorm_aa"]}


@pytest.mark.parametrize(("old", "new", "field"), [
    ("bad_run_ceiling: 2.6", "bad_mode: {at_fraction: 0, margin: 0.1}", "bad_mode.at_fraction"),
    ("bad_run_ceiling: 2.6", "bad_mode: {at_fraction: 1.5, margin: 0.1}", "bad_mode.at_fraction"),
    ("bad_run_ceiling: 2.6", "bad_mode: {at_fraction: 0.3, margin: -0.1}", "bad_mode.margin"),
])
def test_a_marker_outside_its_range_is_refused_naming_the_field(tmp_path: Path, old: str, new: str,
                                                                field: str) -> None:
    spec = registration("bm", ("rezero", "gr", "rezero_aa"), tail="bad_run_ceiling: 2.6\n")
    assert f"field '{field}'" in refusal(tmp_path, spec, "bm", old, new)


def test_a_registration_without_the_marker_reports_no_bad_mode() -> None:
    doc = json.loads((REPO / "docs" / "results" / "residual_cpu2" / "results.json").read_text(encoding="utf-8"))
    results = ComparisonResults.from_json(doc)
    assert results.bad_mode is None and "bad_mode" not in results.to_json()
    assert all("bad_modes" not in a for a in results.to_json()["arms"].values())
    assert bad_mode_lines(results) == [] and "Bad modes" not in render_report(results, [])
