"""A registered reference: ``reference: baseline_and_aa`` decides each tested arm against the per-replicate mean of the
baseline and its A/A repeat (both pre-norm runs already paid for), the A/A − baseline difference staying the
calibration check; the report shows each verdict against either set."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from dormouse.ab.comparison.registry import ABSpecError, load_spec
from dormouse.ab.comparison.runner import run_comparison
from tests.helpers.fake_train import FakeTrain, PlantedRun
from tests.helpers.registrations import registration, write_registry

# Per replicate (init seed 1..4): the baseline, its A/A repeat and GR. GR sits 0.05 below the baseline and 0.05
# above the A/A runs, so against their mean (the registered reference) GR's Δ is exactly 0 in every replicate.
PLANTED = {"prenorm": [2.00, 2.10, 2.20, 2.30], "prenorm_aa": [1.90, 2.00, 2.10, 2.20],
           "gr": [1.95, 2.05, 2.15, 2.25]}


def planted(run: PlantedRun) -> float:
    return PLANTED[run.arm][run.seed - 1]


def spec(reference: str = "baseline_and_aa", **kw: str) -> str:
    return registration("r", ("prenorm", "gr", "prenorm_aa"), looks="[4]", sesoi=0.02,
                        fields=f"reference: {reference}", **kw)


def test_a_mean_reference_decides_against_the_mean_of_the_baseline_and_its_aa_repeat(tmp_path: Path) -> None:
    results = run_comparison("r", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                             train_fn=FakeTrain(planted), registry=write_registry(tmp_path, "r", spec()))
    gr, aa = results.arms["gr"], results.arms["prenorm_aa"]
    assert gr.diffs == pytest.approx([0.0] * 4, abs=1e-12)  # against the mean, not the baseline's −0.05
    assert aa.diffs == pytest.approx([-0.1] * 4)  # the calibration: A/A − baseline, as always
    rows = results.reference["sensitivity"]["gr"]
    assert rows["baseline"]["diff_mean"] == pytest.approx(-0.05) and rows["baseline"]["verdict"] == "better"
    assert rows["aa"]["diff_mean"] == pytest.approx(0.05) and rows["aa"]["verdict"] == "worse"
    assert rows["mean"]["diff_mean"] == pytest.approx(0.0) and rows["mean"]["verdict"] == gr.outcome.verdict
    report = (results.plan.comp_dir / "report.md").read_text()
    assert "## Reference sensitivity" in report and "vs their mean (registered)" in report


def test_without_a_registered_reference_every_arm_is_decided_against_the_baseline(tmp_path: Path) -> None:
    text = registration("r", ("prenorm", "gr", "prenorm_aa"), looks="[4]", sesoi=0.02)
    results = run_comparison("r", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                             train_fn=FakeTrain(planted), registry=write_registry(tmp_path, "r", text))
    assert results.arms["gr"].diffs == pytest.approx([-0.05] * 4) and results.reference is None


@pytest.mark.parametrize("field, aa_arm, why", [
    ("reference: both", "last", "is not one of baseline, baseline_and_aa"),
    ("reference: baseline_and_aa", None, "needs an aa_arm"),
])
def test_a_bad_reference_is_refused_naming_the_field(tmp_path: Path, field: str, aa_arm: str | None,
                                                     why: str) -> None:
    arms = ("prenorm", "gr", "prenorm_aa") if aa_arm else ("prenorm", "gr")
    text = registration("r", arms, fields=field, aa_arm=aa_arm)
    with pytest.raises(ABSpecError) as exc:
        load_spec("r", write_registry(tmp_path, "r", text))
    assert any("field 'reference'" in ln and why in ln for ln in exc.value.lines), exc.value.lines
