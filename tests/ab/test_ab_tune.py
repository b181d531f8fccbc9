"""The tune stage of a registration (dormouse/ab/tune/stage.py): the choice rule, the seed
streams kept clear of the confirmatory ones, the tune runs run first, each arm's confirmatory runs at
its chosen lr (the A/A arm at its baseline's), a resume that recomputes the same choice without re-running
tune runs, and the report's tuning table.

The fake trainer's final bpb is a V in log2(lr) around a per-arm optimum, so the expected choice is worked
out here by hand; ``attnres_full``'s best lr (8e-3) diverges, so its choice is the next best.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rich.console import Console

from dormouse.ab.comparison.command import ab_design, ab_plan, ab_status
from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.registry import ComparisonError, load_spec
from dormouse.ab.comparison.runner import plan_runs, run_comparison
from dormouse.ab.runs.records import RunRecord
from dormouse.ab.tune import stage as tune
from dormouse.ab.tune.rule import choose
from dormouse.run.files import ComparisonFiles, RunFiles
from tests.helpers.fake_train import FakeTrain
from tests.helpers.registrations import refusal, registration, write_registry

SPEC = registration("tt", ("rezero", "gr", "attnres_full", "rezero_aa"), tail="""\
tune:
  lrs: [0.001, 0.002, 0.004, 0.008]
  replicates: 2
  init_seed_base: 9001
  data_seed_base: 9101
  rule: lowest_mean_final_bpb
""")
# Each arm's best lr under the fake trainer. The A/A arm's own would be 0.001: if it were tuned on its own
# it would not run at its baseline's lr.
OPTIMUM = {"rezero": 0.002, "gr": 0.004, "attnres_full": 0.008, "rezero_aa": 0.001}
DIVERGES = {("attnres_full", 0.008)}
EXPECTED = {"rezero": 0.002, "gr": 0.004, "attnres_full": 0.004, "rezero_aa": 0.002}


def tune_fake() -> FakeTrain:
    """Final bpb 2 + 0.05·|log2(lr / optimum)| + a small seed term; the runs in DIVERGES raise the loop's
    diverged TrainError."""
    return FakeTrain(lambda r: 2.0 + 0.05 * abs(math.log2(r.lr / OPTIMUM[r.arm])) + 0.001 * (r.seed % 7),
                     diverges=lambda r: (r.arm, r.lr) in DIVERGES)


@pytest.fixture()
def registry(tmp_path: Path) -> Path:
    return write_registry(tmp_path, "tt", SPEC)


def run(registry: Path, root: Path, fake: FakeTrain) -> Path:
    return run_comparison("tt", [], root=root, console=Console(record=True, width=200), train_fn=fake,
                          registry=registry).plan.comp_dir


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FakeTrain, Path]:
    """One comparison run to its end (module-scoped: the tests below read it)."""
    reg = write_registry(tmp_path_factory.mktemp("tt"), "tt", SPEC)
    fake = tune_fake()
    return run(reg, tmp_path_factory.mktemp("ab"), fake), fake, reg


# --- the rule -------------------------------------------------------------------------------------------

def test_the_rule_takes_the_lowest_mean_final_bpb() -> None:
    assert choose({0.001: [2.0, 2.2], 0.002: [1.9, 2.0], 0.004: [2.1, 2.1]}) == 0.002


def test_the_rule_breaks_a_tie_toward_the_smaller_lr() -> None:
    assert choose({0.004: [2.0, 2.0], 0.001: [1.5, 2.5], 0.002: [3.0, 3.0]}) == 0.001


def test_a_diverged_run_counts_as_infinite_bpb() -> None:
    # 0.004 has the lowest single run but one of its runs diverged: its mean is +inf.
    assert choose({0.001: [2.2, 2.2], 0.004: [math.inf, 1.0]}) == 0.001


# --- the registration -----------------------------------------------------------------------------------

def _refusal(tmp_path: Path, old: str, new: str) -> str:
    return refusal(tmp_path, SPEC, "tt", old, new)


def test_tune_init_seeds_overlapping_the_confirmatory_stream_are_refused(tmp_path: Path) -> None:
    msg = _refusal(tmp_path, "  init_seed_base: 9001", "  init_seed_base: 3")
    assert "field 'tune.init_seed_base'" in msg and "'init_seed_base' seeds 1..3" in msg


def test_tune_data_seeds_overlapping_the_aa_stream_are_refused(tmp_path: Path) -> None:
    msg = _refusal(tmp_path, "  data_seed_base: 9101", "  data_seed_base: 200")
    assert "field 'tune.data_seed_base'" in msg and "'aa_data_seed_base' seeds 201..203" in msg


def test_tune_data_seeds_overlapping_the_data_stream_are_refused(tmp_path: Path) -> None:
    msg = _refusal(tmp_path, "  data_seed_base: 9101", "  data_seed_base: 103")
    assert "field 'tune.data_seed_base'" in msg and "'data_seed_base' seeds 101..103" in msg


def test_disjoint_tune_seeds_are_accepted(registry: Path) -> None:
    assert load_spec("tt", registry).spec.tune.replicates == 2


def test_an_arm_or_cli_setting_the_tuned_lr_is_refused(tmp_path: Path, registry: Path) -> None:
    assert "field 'arms.gr': override 'train.lr=0.01' sets train.lr" in _refusal(
        tmp_path, "gr: [model.use_gr=true]", "gr: [model.use_gr=true, train.lr=0.01]")
    with pytest.raises(ComparisonError, match="tune stage chooses"):
        build_plan("tt", ["train.lr=0.01"], tmp_path / "ab", registry=registry)


def test_a_bad_grid_or_rule_is_refused_naming_the_field(tmp_path: Path) -> None:
    assert "field 'tune.lrs'" in _refusal(tmp_path, "lrs: [0.001, 0.002, 0.004, 0.008]", "lrs: [0.001, 0.001]")
    assert "field 'tune.rule'" in _refusal(tmp_path, "rule: lowest_mean_final_bpb", "rule: best_looking")


# --- the plan -------------------------------------------------------------------------------------------

def test_the_plan_holds_each_tuned_arm_at_each_lr_and_no_aa_tune_run(registry: Path, tmp_path: Path) -> None:
    plan = build_plan("tt", [], tmp_path / "ab", registry=registry)
    got = {(p.arm, float(p.cfg.train.lr), int(p.cfg.train.seed), int(p.cfg.train.data_seed)) for p in plan.tune_runs}
    assert got == {(a, lr, 9001 + j, 9101 + j) for a in ("rezero", "gr", "attnres_full")
                   for lr in (0.001, 0.002, 0.004, 0.008) for j in range(2)}
    assert len(plan.tune_runs) == 24 and plan.lr_pending
    assert not {p.name for p in plan.tune_runs} & {p.name for p in plan.runs}


def test_plan_shows_the_tune_runs_and_says_the_lrs_are_chosen_by_the_stage(registry: Path, tmp_path: Path) -> None:
    console = Console(record=True, width=250)
    assert ab_plan("tt", [], root=tmp_path / "ab", registry=registry, console=console) == 0
    out = console.export_text()
    assert "tune stage: 24 runs first" in out and "tune stage (runs first, not in the card above): 24 runs" in out
    assert "takes the lr chosen for the baseline 'rezero'" in out
    assert "confirmatory train.lr: chosen by the tune stage once its runs finish (0 of 24 settled)" in out
    assert "tune run tune-gr-lr0.004-s9002: train.lr=0.004 train.seed=9002 train.data_seed=9102" in out


def test_a_registration_without_tune_plans_no_tune_run(registry: Path, tmp_path: Path) -> None:
    (registry / "tt.yaml").write_text(SPEC.split("tune:")[0])
    plan = build_plan("tt", [], tmp_path / "ab", registry=registry)
    assert plan.tune_runs == [] and not plan.lr_pending


# --- the run --------------------------------------------------------------------------------------------

def test_the_tune_runs_run_before_any_confirmatory_run(finished: tuple[Path, FakeTrain, Path]) -> None:
    _, fake, _ = finished
    first_confirmatory = next(i for i, c in enumerate(fake.names) if not c.startswith("tune-"))
    assert all(c.startswith("tune-") for c in fake.names[:first_confirmatory])
    assert sum(c.startswith("tune-") for c in fake.names) == 24


def test_the_choice_is_recorded_with_the_aa_arm_at_its_baselines_lr(finished: tuple[Path, FakeTrain, Path]) -> None:
    comp, _, _ = finished
    record = json.loads((comp / "tune.json").read_text())
    assert record["chosen"] == EXPECTED
    assert record["table"]["attnres_full"]["0.008"] == ["diverged", "diverged"]
    # no bracketing registered (its fields at their defaults): the grid only, and each arm's flags
    assert (record["extensions"], record["second_seed_gap"], record["ratio"]) == (0, None, 2.0)
    assert set(record["arms"]) == {"rezero", "gr", "attnres_full"}
    assert record["arms"]["attnres_full"] == {"runs": 8, "budget": 8, "extended": [], "second_seed": [],
                                              "stability_limited": ["high"], "unbracketed": None}
    assert all(a["unbracketed"] is None and a["runs"] == 8 for a in record["arms"].values())


def test_confirmatory_runs_run_at_their_arms_chosen_lr(finished: tuple[Path, FakeTrain, Path]) -> None:
    comp, _, _ = finished
    ran = {}
    for arm in EXPECTED:
        for seed in (1, 2, 3):
            ran[(arm, seed)] = float(OmegaConf.load(comp / f"{arm}-s{seed}" / "config.yaml").train.lr)
    assert ran == {(arm, seed): EXPECTED[arm] for arm in EXPECTED for seed in (1, 2, 3)}


def test_a_resume_recomputes_the_same_choice_without_rerunning_tune_runs(
        finished: tuple[Path, FakeTrain, Path]) -> None:
    comp, _, reg = finished
    before = (comp / "tune.json").read_text()
    import shutil

    shutil.rmtree(comp / "gr-s2")
    again = tune_fake()
    run(reg, comp.parent, again)
    assert again.names == ["gr-s2"]
    assert float(OmegaConf.load(comp / "gr-s2" / "config.yaml").train.lr) == EXPECTED["gr"]
    assert (comp / "tune.json").read_text() == before


def test_each_attempt_records_whether_its_run_diverged(finished: tuple[Path, FakeTrain, Path]) -> None:
    comp, _, _ = finished
    said = {}
    for record in sorted((comp / "launch").glob("*.json")):
        cfg = OmegaConf.load(comp / record.stem / "config.yaml")
        arm = record.stem.split("-lr")[0].removeprefix("tune-") if record.stem.startswith("tune-") else None
        said[record.stem] = ((arm, float(cfg.train.lr)) in DIVERGES,
                             json.loads(record.read_text())["attempts"][-1]["diverged"])
    assert sum(expected for expected, _ in said.values()) == 2
    assert all(expected == recorded for expected, recorded in said.values()), said


def test_a_run_from_before_the_record_is_read_as_diverged_from_its_error_file(tmp_path: Path) -> None:
    """A run whose attempts do not record divergence is read from its error file, which holds the loop's
    TrainError message; once an attempt records how it ended, that record is what counts."""
    run_dir = tmp_path / "tune-gr-lr0.008-s101"
    run_dir.mkdir()
    RunFiles(run_dir).ab_error.write_text("Traceback (most recent call last):\n  ...\ndormouse.errors.TrainError: "
                                          "non-finite loss (loss nan) at step 3; last good checkpoint: none\n")
    launch = ComparisonFiles(tmp_path).launch_record(run_dir.name)
    launch.parent.mkdir()
    attempt = {"launcher": "sequential", "state": "failed", "note": "TrainError: non-finite loss (loss nan)"}
    launch.write_text(json.dumps({"attempts": [attempt]}))
    rec = RunRecord("gr", 101, run_dir, "gr", 10)
    assert tune.diverged(rec) and tune.tune_value(rec) == math.inf
    launch.write_text(json.dumps({"attempts": [attempt, {**attempt, "note": "OSError: disk full", "diverged": False}]}))
    assert not tune.diverged(rec) and tune.tune_value(rec) is None


def test_a_recorded_choice_the_runs_no_longer_give_is_refused(finished: tuple[Path, FakeTrain, Path]) -> None:
    comp, _, reg = finished
    path = comp / "tune.json"
    saved = path.read_text()
    record = json.loads(saved)
    record["chosen"]["gr"] = 0.001
    path.write_text(json.dumps(record))
    try:
        with pytest.raises(ComparisonError, match="the tune runs changed after the choice"):
            run(reg, comp.parent, tune_fake())
    finally:
        path.write_text(saved)


def test_the_report_shows_the_tuning_table_and_the_rule(finished: tuple[Path, FakeTrain, Path]) -> None:
    comp, _, _ = finished
    report = (comp / "report.md").read_text()
    assert "## The tune stage" in report and "ties go to the smaller lr" in report
    row = next(line for line in report.splitlines() if line.startswith("| attnres_full |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "attnres_full" and cells[-1] == "0.004"
    assert cells[4] == "diverged, diverged"  # lr 0.008
    assert cells[3].startswith("**") and cells[3].endswith("←")  # lr 0.004, the chosen one, marked
    assert sum("←" in c for c in cells) == 1
    assert json.loads((comp / "results.json").read_text())["tune"]["chosen"] == EXPECTED


def test_status_shows_the_stage_and_the_chosen_lrs(finished: tuple[Path, FakeTrain, Path]) -> None:
    comp, _, reg = finished
    console = Console(record=True, width=250)
    assert ab_status("tt", root=comp.parent, registry=reg, console=console) == 0
    out = console.export_text()
    assert "confirmatory train.lr (chosen by the tune stage): rezero=0.002, gr=0.004, attnres_full=0.004, " \
           "rezero_aa=0.002" in out
    assert "tune-rezero-lr0.001-s9001" in out


def test_design_says_the_tune_stages_cost_beside_the_card(registry: Path, tmp_path: Path) -> None:
    console = Console(record=True, width=250)
    assert ab_design("tt", [], root=tmp_path / "ab", registry=registry, console=console) == 0
    out = console.export_text()
    assert "tune stage (runs first, not in the card above): 24 runs (3 arms × 4 lrs × 2 replicate(s))" in out


def test_plan_runs_carries_the_recorded_choice(finished: tuple[Path, FakeTrain, Path]) -> None:
    """`dormouse ab rerun` (dormouse/ab/lifecycle/rerun.py) composes a published run through plan_runs: it
    must run at the chosen lr."""
    comp, _, reg = finished
    runs = plan_runs(load_spec("tt", reg), [], comp)
    assert {p.arm: float(p.cfg.train.lr) for p in runs} == EXPECTED
