"""`dormouse ab STUDY`: a registered study's file checked field by field, its points derived (α/P, the axis, the
seed streams), the points run by the comparison machinery with a fake train function writing planted runs, the
interaction decided from what each point decision used, resumption, and refusal of a changed study file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from dormouse.ab.comparison.command import ab_design, ab_plan, ab_run, ab_status
from dormouse.ab.comparison.registry import ABSpecError, ComparisonError, load_spec
from dormouse.ab.lifecycle import carry
from dormouse.ab.lifecycle.publish import publish_study
from dormouse.ab.reporting.results import ArmResult
from dormouse.ab.study.registry import load_study
from dormouse.ab.study.report import decision_diffs
from tests.helpers.ab_exit import exit_code
from tests.helpers.fake_train import FakeTrain
from tests.helpers.registrations import registration, write_registry

STUDY = registration("st", ("prenorm", "gr", "attnres_full", "prenorm_aa"), sesoi=0.02, looks="[4]",
                     expected_effect=0.01, description="a test study", tail="""\
study:
  axis: model.max_iter
  points: [1, 4]
  seed_stride: 1000
  smallest_change: 0.05
  expected_change: -0.1
""")

# Planted Δ against the baseline at max_iter 1 and 4: gr gains 0.12 with depth (grows), attnres_full stays at
# +0.01 (flat), the A/A repeat at 0.
DELTA = {"prenorm": {1: 0.0, 4: 0.0}, "gr": {1: 0.0, 4: -0.12}, "attnres_full": {1: 0.01, 4: 0.01},
         "prenorm_aa": {1: 0.0, 4: 0.0}}
JITTER = (0.0015, -0.001, 0.0004, -0.0009, 0.0002)


def study_fake() -> FakeTrain:
    """Final bpb 2 + the planted Δ at the run's max_iter + a jitter that grows with the arm's place in DELTA."""
    return FakeTrain(lambda r: 2.0 + DELTA[r.arm][r.max_iter]
                     + JITTER[r.seed % len(JITTER)] * (1 + list(DELTA).index(r.arm)))


@pytest.fixture()
def registry(tmp_path: Path) -> Path:
    return write_registry(tmp_path, "st", STUDY)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, FakeTrain]:
    """(registry, root, the fake that ran it): the study run to its end once; the tests below read it and
    change nothing in it (module-scoped)."""
    root = tmp_path_factory.mktemp("st")
    reg = write_registry(root, "st", STUDY)
    fake = study_fake()
    code, text = _ab(reg, root / "ab", fake)
    assert code == 0, text
    return reg, root / "ab", fake


def _ab(registry: Path, root: Path, fake: FakeTrain | None = None, verb: Callable[..., int] = ab_run,
        **kw) -> tuple[int, str]:
    """``verb`` asked of study st, as the CLI ends it: its exit code, and what it said on stdout and stderr."""
    out, err = Console(record=True, width=200), Console(record=True, width=200)
    overrides = [] if verb is ab_status else [kw.pop("overrides", [])]
    if verb is ab_run:
        kw["train_fn"] = fake
    code = exit_code(verb, "st", *overrides, root=root, console=out, registry=registry, err=err, **kw)
    return code, out.export_text() + err.export_text()


def test_each_point_is_the_template_at_alpha_over_p_with_the_axis_and_its_own_seed_streams(registry: Path) -> None:
    study = load_study("st", registry)
    points = study.points()
    assert [p.name for p in points] == ["max_iter-1", "max_iter-4"]
    for i, p in enumerate(points):
        spec = p.reg.spec
        assert spec.alpha == pytest.approx(0.05 / 2)
        assert spec.fixed[-1] == f"model.max_iter={p.value}"
        assert (spec.init_seed_base, spec.data_seed_base, spec.aa_data_seed_base) == (1 + 1000 * i, 101 + 1000 * i,
                                                                                       201 + 1000 * i)
        assert study.sha256 in p.reg.text  # a point's stamp follows the study file's bytes


def test_a_study_runs_every_point_then_decides_each_arms_change(finished: tuple[Path, Path, FakeTrain]) -> None:
    _, root, fake = finished
    sdir = root / "st"
    r = json.loads((sdir / "results.json").read_text())
    assert r["complete"]
    assert {k: v["verdict"] for k, v in r["interaction"].items()} == {"gr": "grows", "attnres_full": "flat"}
    assert r["calibration"]["verdict"] in ("flat", "undecided")
    assert r["interaction"]["gr"]["estimate"] == pytest.approx(-0.12, abs=0.01)
    # every point ran in its own directory at its own depth, and no two points share a seed
    depths = {(c.run.dir.rsplit("/", 1)[-1], int(c.model.max_iter)) for c in fake.configs}
    assert depths == {("max_iter-1", 1), ("max_iter-4", 4)}
    seeds = [(int(c.train.seed), c.run.dir) for c in fake.configs]
    by_seed: dict[int, set[str]] = {}
    for s, d in seeds:
        by_seed.setdefault(s, set()).add(d)
    assert all(len(d) == 1 for d in by_seed.values())
    for name in ("report.md", "delta_vs_axis.png", "bpb_by_depth_points.png", "design.json"):
        assert (sdir / name).is_file(), name
    assert "**grows**" in (sdir / "report.md").read_text()


def test_a_rerun_trains_nothing_and_a_changed_study_file_is_refused(finished: tuple[Path, Path, FakeTrain],
                                                                     tmp_path: Path) -> None:
    registry, root, _ = finished
    again = study_fake()
    assert _ab(registry, root, again)[0] == 0
    assert again.calls == []
    changed = write_registry(tmp_path, "st", STUDY.replace("smallest_change: 0.05", "smallest_change: 0.04"))
    code, text = _ab(changed, root, again)
    assert code == 2 and "changed since the first run" in text
    assert again.calls == []


def test_status_plan_and_design_answer_without_training(registry: Path, tmp_path: Path) -> None:
    fake = study_fake()
    code, text = _ab(registry, tmp_path / "ab", fake, verb=ab_status)
    assert code == 2 and "not started" in text
    code, text = _ab(registry, tmp_path / "ab", fake, verb=ab_plan)
    assert code == 0 and "max_iter-4" in text and not (tmp_path / "ab" / "st").exists()
    code, text = _ab(registry, tmp_path / "ab", fake, verb=ab_design)
    assert code == 0 and "Study card" in text and (tmp_path / "ab" / "st" / "design.json").is_file()
    assert fake.calls == []


def test_status_tells_a_started_point_without_results_from_a_point_not_started(
        finished: tuple[Path, Path, FakeTrain], tmp_path: Path) -> None:
    """A point whose comparison started but has no results.json (the runner has not passed it in this sitting,
    or it was restored from a carry, which leaves derived files out) says it started, never "not started" nor
    that no look was decided (its looks may have been); a point with no stamp says "not started"."""
    registry, root, _ = finished
    shutil.copytree(root, tmp_path / "ab")  # a copy of the finished study: this test takes parts of it away
    fake = study_fake()
    (tmp_path / "ab" / "st" / "max_iter-4" / "results.json").unlink()
    code, text = _ab(registry, tmp_path / "ab", fake, verb=ab_status)
    assert code == 0
    assert "study st: max_iter-4: started, no results written yet" in text
    assert "max_iter-4: not started" not in text and "no look decided" not in text
    (tmp_path / "ab" / "st" / "max_iter-4").rename(tmp_path / "elsewhere")
    code, text = _ab(registry, tmp_path / "ab", fake, verb=ab_status)
    assert code == 0 and "study st: max_iter-4: not started" in text
    assert fake.calls == []


@pytest.mark.parametrize("edit, field", [
    (("train.device=cpu,", "train.device=cpu, model.max_iter=3,"), "fixed"),
    (("axis: model.max_iter", "axis: train.seed"), "study.axis"),
    (("axis: model.max_iter", "axis: train.lr"), "study.axis"),
    (("points: [1, 4]", "points: [4, 1]"), "study.points"),
    (("points: [1, 4]", "points: [4]"), "study.points"),
    (("seed_stride: 1000", "seed_stride: 100"), "study.seed_stride"),
    (("expected_change: -0.1", "expected_change: 0"), "study.expected_change"),
    (("smallest_change: 0.05", "smallest_change: -0.05"), "study.smallest_change"),
    (("  seed_stride: 1000\n", ""), "study.seed_stride"),
])
def test_a_bad_study_field_is_refused_naming_it(registry: Path, edit: tuple[str, str], field: str) -> None:
    text = STUDY.replace(*edit)
    assert text != STUDY
    (registry / "st.yaml").write_text(text)
    with pytest.raises(ABSpecError) as exc:
        load_study("st", registry)
    assert any(f"field '{field}'" in line for line in exc.value.lines), exc.value.lines


def test_a_cli_override_of_the_axis_is_refused(registry: Path, tmp_path: Path) -> None:
    code, text = _ab(registry, tmp_path / "ab", study_fake(), overrides=["model.max_iter=2"])
    assert code == 2 and "the axis of study st" in text


def test_a_study_is_not_loaded_as_one_comparison(registry: Path) -> None:
    with pytest.raises(ABSpecError, match="is a registered study"):
        load_spec("st", registry)


def test_the_interaction_reads_what_each_point_decision_used() -> None:
    arm = ArmResult.from_json({"role": "arm", "diffs": [0.1, 0.2, 0.3, 0.4], "decision": {"n": 2}})
    assert decision_diffs(arm) == [0.1, 0.2]
    aa = ArmResult.from_json({"role": "aa", "diffs": [0.1, 0.2]})
    assert decision_diffs(aa) == [0.1, 0.2]  # the A/A arm: every difference it ran


@pytest.mark.parametrize("name", ["smoke_study", "depth_cpu"])
def test_the_registered_studies_load(name: str) -> None:
    study = load_study(name)
    assert len(study.points()) == len(study.values) >= 2


def test_a_carried_study_resumes_elsewhere_without_redoing_a_finished_run(
        finished: tuple[Path, Path, FakeTrain], tmp_path: Path) -> None:
    registry, root, _ = finished
    saved = tmp_path / "carry"
    carry.save("st", root, saved, registry)
    names = {p.relative_to(saved).as_posix() for p in saved.rglob("*") if p.is_file()}
    assert {"registration.json", "max_iter-1/registration.json", "max_iter-4/gr-s1001/metrics.jsonl"} <= names
    assert not any("checkpoints" in n for n in names)
    fresh = tmp_path / "fresh"  # another machine: nothing but what was committed
    carry.restore("st", fresh, saved)
    second = study_fake()
    code, text = _ab(registry, fresh, second)
    assert code == 0 and second.calls == [], text


def test_a_finished_study_is_published_point_by_point_with_one_provenance(
        finished: tuple[Path, Path, FakeTrain], tmp_path: Path) -> None:
    registry, root, _ = finished
    with pytest.raises(ComparisonError, match="the study is not complete"):  # not run yet
        publish_study(tmp_path / "ab" / "st", tmp_path / "out", "st", "dormouse ab st", registry)
    sdir = root / "st"
    prov = publish_study(sdir, tmp_path / "out", "st", "dormouse ab st", registry)
    assert prov is not None and set(prov["points"]) == {"max_iter-1", "max_iter-4"}
    runs = {p: len(json.loads((sdir / p / "results.json").read_text())["runs"]) for p in prov["points"]}
    assert {p: sum(v["run_cpus"].values()) for p, v in prov["points"].items()} == runs
    assert sum(prov["run_cpus"].values()) == sum(runs.values())
    for rel in ("report.md", "results.json", "registration.json", "design.json", "delta_vs_axis.png",
                "provenance.json", "max_iter-4/report.md", "max_iter-4/provenance.json", "max_iter-1/launch"):
        assert (tmp_path / "out" / rel).exists(), rel
