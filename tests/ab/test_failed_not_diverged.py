"""A run that fails for a reason other than divergence (here the trainer refusing its run directory: a TrainError
that is not a non-finite loss) is reported as failed with its reason, never counted as diverged: in the tune stage
it is not +inf (which the rule would read as evidence against its lr) and no arm chooses until a rerun retries it;
in the confirmatory looks its arm is invalid with the reason, and the run is not counted as a bad run."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.console import Console

from dormouse.ab.comparison.runner import run_comparison
from dormouse.ab.reporting.results import ComparisonResults
from tests.helpers.fake_train import FakeTrain
from tests.helpers.registrations import registration, write_registry

TUNE = registration("tf", ("rezero", "gr", "rezero_aa"), tail="""\
tune:
  lrs: [0.001, 0.002, 0.004]
  replicates: 1
  init_seed_base: 9001
  data_seed_base: 9101
  rule: lowest_mean_final_bpb
""")
OPTIMUM = {"rezero": 0.002, "gr": 0.002, "rezero_aa": 0.002}
REFUSED = "tune-gr-lr0.002-s9001"  # gr's best lr: read as +inf, gr would choose another


def _tune_fake(refuse: tuple[str, ...] = ()) -> FakeTrain:
    return FakeTrain(lambda r: 2.0 + 0.05 * abs(math.log2(r.lr / OPTIMUM[r.arm])) + 0.001 * (r.seed % 7),
                     refuse=refuse)


def _run(name: str, reg: Path, root: Path, fake: FakeTrain) -> ComparisonResults:
    return run_comparison(name, [], root=root, console=Console(record=True, width=200), train_fn=fake, registry=reg)


def _attempts(comp: Path, run: str) -> list[dict]:
    return json.loads((comp / "launch" / f"{run}.json").read_text())["attempts"]


def test_a_tune_run_refused_by_the_trainer_is_failed_with_its_reason_not_diverged(tmp_path: Path) -> None:
    reg = write_registry(tmp_path, "tf", TUNE)
    results = _run("tf", reg, tmp_path / "ab", _tune_fake(refuse=(REFUSED,)))
    comp = results.plan.comp_dir
    assert _attempts(comp, REFUSED)[-1]["diverged"] is False
    assert results.tune["table"]["gr"]["0.002"] == ["failed"]
    assert list(results.tune["failed"]) == [REFUSED] and "RunDirRefused" in results.tune["failed"][REFUSED]
    assert results.tune["chosen"] == {} and not results.complete
    assert {a.outcome.verdict for a in results.arms.values()} == {"invalid"}
    assert all(REFUSED in a.outcome.sentence and "RunDirRefused" in a.outcome.sentence
               for a in results.arms.values())
    report = (comp / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| gr | "))
    assert "| failed |" in row and "diverged" not in row
    assert "**Failed** (a training error that is not a divergence" in report and f"`{REFUSED}`: " in report
    # a rerun retries it, and gr chooses its best lr: the failure was never evidence about it
    again = _run("tf", reg, tmp_path / "ab", _tune_fake())
    assert again.tune["chosen"] == {"rezero": 0.002, "gr": 0.002, "rezero_aa": 0.002}
    assert "failed" not in again.tune and again.complete


def test_a_confirmatory_run_refused_by_the_trainer_makes_its_arm_invalid_with_its_reason(tmp_path: Path) -> None:
    spec = registration("cf", ("rezero", "gr", "attnres_full", "rezero_aa"), fields="bad_run_ceiling: 2.6")
    reg = write_registry(tmp_path, "cf", spec)
    results = _run("cf", reg, tmp_path / "ab", FakeTrain(refuse=("gr-s2",)))
    gr = results.arms["gr"]
    assert gr.outcome.verdict == "invalid" and "gr-s2: RunDirRefused: planted" in gr.outcome.sentence
    assert gr.incomplete == [next(x for x in gr.incomplete if x.startswith("gr-s2: RunDirRefused"))]
    assert gr.beside["bad_runs"]["n"] == 2 and gr.beside["bad_runs"]["count"] == 0  # the finished runs only
    assert results.arms["attnres_full"].outcome.verdict != "invalid"
    assert _attempts(results.plan.comp_dir, "gr-s2")[-1]["diverged"] is False
    assert "| no: RunDirRefused: planted" in (results.plan.comp_dir / "report.md").read_text()
