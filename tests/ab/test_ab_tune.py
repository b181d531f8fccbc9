"""The tune stage of a registration (issue 25 item 1; dormouse/ab/tune.py): the choice rule, the seed
streams kept clear of the confirmatory ones, the tune pairs run first, each arm's confirmatory pairs at
its chosen lr (the A/A arm at its baseline's), a resume that recomputes the same choice without re-running
tune pairs, and the report's tuning table.

The fake trainer's final bpb is a V in log2(lr) around a per-arm optimum, so the expected choice is worked
out here by hand; ``attnres_full``'s best lr (8e-3) diverges, so its choice is the next best.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from dormouse.ab import tune
from dormouse.ab.command import ab_command
from dormouse.ab.plan import build_plan
from dormouse.ab.records import RunRecord
from dormouse.ab.registry import ComparisonError, load_spec
from dormouse.ab.runner import plan_pairs, run_comparison
from dormouse.ab.tune_rule import choose
from dormouse.errors import TrainError
from dormouse.run.files import ComparisonFiles, RunFiles
from tests.helpers.planted_run import append_eval, append_log, done_line, eval_rows, write_run_header
from tests.helpers.registrations import refusal

SPEC = """\
protocol: 2
name: tt
baseline: rezero
aa_arm: rezero_aa
sesoi: 0.01
alpha: 0.05
looks: [3]
init_seed_base: 1
data_seed_base: 101
aa_data_seed_base: 201
pilot_sd: 0.01
expected_effect: -0.02
fixed: [preset=tiny, train.steps=20, train.eval_every=10, train.device=cpu, logging.progress=off]
arms:
  rezero: []
  gr: [model.use_gr=true]
  attnres_full: [model.use_attnres=true]
  rezero_aa: []
tune:
  lrs: [0.001, 0.002, 0.004, 0.008]
  replicates: 2
  init_seed_base: 9001
  data_seed_base: 9101
  rule: lowest_mean_final_bpb
"""
# Each arm's best lr under the fake trainer. The A/A arm's own would be 0.001: if it were tuned on its own
# it would not run at its baseline's lr.
OPTIMUM = {"rezero": 0.002, "gr": 0.004, "attnres_full": 0.008, "rezero_aa": 0.001}
DIVERGES = {("attnres_full", 0.008)}
EXPECTED = {"rezero": 0.002, "gr": 0.004, "attnres_full": 0.004, "rezero_aa": 0.002}


class TuneFake:
    """Stands in for dormouse.train.loop.train: a run directory with eval lines, metrics and a done line, final bpb
    2 + 0.05·|log2(lr / optimum)| + a small seed term; raises the loop's TrainError (non-finite loss, diverged)
    where it diverges."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, cfg: DictConfig) -> None:
        name, lr, seed = str(cfg.run.name), float(cfg.train.lr), int(cfg.train.seed)
        arm = name.split("-lr")[0].removeprefix("tune-") if name.startswith("tune-") else name.rsplit("-s", 1)[0]
        self.calls.append(name)
        run_dir = Path(cfg.run.dir) / name
        write_run_header(run_dir, cfg, {"params": 1000})
        if (arm, lr) in DIVERGES:
            raise TrainError("non-finite loss (loss nan) at step 3; last good checkpoint: none; lower train.lr",
                             diverged=True)
        append_log(run_dir, "# dormouse: fake")
        for row in eval_rows(cfg, 2.0 + 0.05 * abs(math.log2(lr / OPTIMUM[arm])) + 0.001 * (seed % 7)):
            append_eval(run_dir, cfg, row)
        append_log(run_dir, done_line(cfg))


@pytest.fixture()
def registry(tmp_path: Path) -> Path:
    reg = tmp_path / "registry"
    reg.mkdir()
    (reg / "tt.yaml").write_text(SPEC)
    return reg


def run(registry: Path, root: Path, fake: TuneFake) -> Path:
    return run_comparison("tt", [], root=root, console=Console(record=True, width=200), train_fn=fake,
                          registry=registry).plan.comp_dir


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TuneFake, Path]:
    """One comparison run to its end (module-scoped: the tests below read it)."""
    reg = tmp_path_factory.mktemp("registry")
    (reg / "tt.yaml").write_text(SPEC)
    fake = TuneFake()
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

def test_the_plan_holds_each_tuned_arm_at_each_lr_and_no_aa_tune_pair(registry: Path, tmp_path: Path) -> None:
    plan = build_plan("tt", [], tmp_path / "ab", registry=registry)
    got = {(p.arm, float(p.cfg.train.lr), int(p.cfg.train.seed), int(p.cfg.train.data_seed)) for p in plan.tune_pairs}
    assert got == {(a, lr, 9001 + j, 9101 + j) for a in ("rezero", "gr", "attnres_full")
                   for lr in (0.001, 0.002, 0.004, 0.008) for j in range(2)}
    assert len(plan.tune_pairs) == 24 and plan.lr_pending
    assert not {p.name for p in plan.tune_pairs} & {p.name for p in plan.pairs}


def test_plan_shows_the_tune_pairs_and_says_the_lrs_are_chosen_by_the_stage(registry: Path, tmp_path: Path) -> None:
    console = Console(record=True, width=250)
    assert ab_command("tt", [], root=tmp_path / "ab", registry=registry, console=console, plan=True) == 0
    out = console.export_text()
    assert "tune stage: 24 runs first" in out and "tune stage (runs first, not in the card above): 24 runs" in out
    assert "takes the lr chosen for the baseline 'rezero'" in out
    assert "confirmatory train.lr: chosen by the tune stage once its runs finish (0 of 24 settled)" in out
    assert "tune run tune-gr-lr0.004-s9002: train.lr=0.004 train.seed=9002 train.data_seed=9102" in out


def test_a_registration_without_tune_plans_no_tune_pair(registry: Path, tmp_path: Path) -> None:
    (registry / "tt.yaml").write_text(SPEC.split("tune:")[0])
    plan = build_plan("tt", [], tmp_path / "ab", registry=registry)
    assert plan.tune_pairs == [] and not plan.lr_pending


# --- the run --------------------------------------------------------------------------------------------

def test_the_tune_pairs_run_before_any_confirmatory_pair(finished: tuple[Path, TuneFake, Path]) -> None:
    _, fake, _ = finished
    first_confirmatory = next(i for i, c in enumerate(fake.calls) if not c.startswith("tune-"))
    assert all(c.startswith("tune-") for c in fake.calls[:first_confirmatory])
    assert sum(c.startswith("tune-") for c in fake.calls) == 24


def test_the_choice_is_recorded_with_the_aa_arm_at_its_baselines_lr(finished: tuple[Path, TuneFake, Path]) -> None:
    comp, _, _ = finished
    record = json.loads((comp / "tune.json").read_text())
    assert record["chosen"] == EXPECTED
    assert record["table"]["attnres_full"]["0.008"] == ["diverged", "diverged"]
    # no bracketing registered (issue 34's fields at their defaults): the grid only, and each arm's flags
    assert (record["extensions"], record["second_seed_gap"], record["ratio"]) == (0, None, 2.0)
    assert set(record["arms"]) == {"rezero", "gr", "attnres_full"}
    assert record["arms"]["attnres_full"] == {"runs": 8, "budget": 8, "extended": [], "second_seed": [],
                                              "stability_limited": ["high"], "unbracketed": None}
    assert all(a["unbracketed"] is None and a["runs"] == 8 for a in record["arms"].values())


def test_confirmatory_pairs_run_at_their_arms_chosen_lr(finished: tuple[Path, TuneFake, Path]) -> None:
    comp, _, _ = finished
    ran = {}
    for arm in EXPECTED:
        for seed in (1, 2, 3):
            ran[(arm, seed)] = float(OmegaConf.load(comp / f"{arm}-s{seed}" / "config.yaml").train.lr)
    assert ran == {(arm, seed): EXPECTED[arm] for arm in EXPECTED for seed in (1, 2, 3)}


def test_a_resume_recomputes_the_same_choice_without_rerunning_tune_pairs(
        finished: tuple[Path, TuneFake, Path]) -> None:
    comp, _, reg = finished
    before = (comp / "tune.json").read_text()
    import shutil

    shutil.rmtree(comp / "gr-s2")
    again = TuneFake()
    run(reg, comp.parent, again)
    assert again.calls == ["gr-s2"]
    assert float(OmegaConf.load(comp / "gr-s2" / "config.yaml").train.lr) == EXPECTED["gr"]
    assert (comp / "tune.json").read_text() == before


def test_each_attempt_records_whether_its_run_diverged(finished: tuple[Path, TuneFake, Path]) -> None:
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
    """Runs written before attempts recorded divergence stay readable: their error file holds the loop's
    TrainError message. Once an attempt records how it ended, that record is what counts."""
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


def test_a_recorded_choice_the_runs_no_longer_give_is_refused(finished: tuple[Path, TuneFake, Path]) -> None:
    comp, _, reg = finished
    path = comp / "tune.json"
    saved = path.read_text()
    record = json.loads(saved)
    record["chosen"]["gr"] = 0.001
    path.write_text(json.dumps(record))
    try:
        with pytest.raises(ComparisonError, match="the tune runs changed after the choice"):
            run(reg, comp.parent, TuneFake())
    finally:
        path.write_text(saved)


def test_the_report_shows_the_tuning_table_and_the_rule(finished: tuple[Path, TuneFake, Path]) -> None:
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


def test_status_shows_the_stage_and_the_chosen_lrs(finished: tuple[Path, TuneFake, Path]) -> None:
    comp, _, reg = finished
    console = Console(record=True, width=250)
    assert ab_command("tt", [], root=comp.parent, registry=reg, console=console, status=True) == 0
    out = console.export_text()
    assert "confirmatory train.lr (chosen by the tune stage): rezero=0.002, gr=0.004, attnres_full=0.004, " \
           "rezero_aa=0.002" in out
    assert "tune-rezero-lr0.001-s9001" in out


def test_design_says_the_tune_stages_cost_beside_the_card(registry: Path, tmp_path: Path) -> None:
    console = Console(record=True, width=250)
    assert ab_command("tt", [], root=tmp_path / "ab", registry=registry, console=console, design=True) == 0
    out = console.export_text()
    assert "tune stage (runs first, not in the card above): 24 runs (3 arms × 4 lrs × 2 replicate(s))" in out


def test_plan_pairs_carries_the_recorded_choice(finished: tuple[Path, TuneFake, Path]) -> None:
    """scripts/rerun_pair.py composes a published pair through plan_pairs: it must run at the chosen lr."""
    comp, _, reg = finished
    pairs = plan_pairs(load_spec("tt", reg), [], comp)
    assert {p.arm: float(p.cfg.train.lr) for p in pairs} == EXPECTED
