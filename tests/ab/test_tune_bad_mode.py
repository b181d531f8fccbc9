"""Under a registered bad-mode marker, a tune lr one seed of which falls in a bad mode (its early bpb far above the
lr's other seeds) is marked and dropped from the choice: its mean would carry the bad mode into the lr choice."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console

from dormouse.ab.comparison.runner import run_comparison
from dormouse.ab.rule.bad_mode import Marker, bad_mode_lrs
from dormouse.ab.runs.records import RunRecord
from dormouse.ab.tune.rule import Bracketing, next_step
from tests.helpers.fake_train import FakeTrain, PlantedRun
from tests.helpers.registrations import registration, write_registry

MARKER = Marker(at_fraction=0.5, margin=0.1)
TUNE = """\
tune:
  lrs: [0.001, 0.002, 0.004]
  replicates: 3
  init_seed_base: 9001
  data_seed_base: 9101
"""


def run(lr: float, seed: int, early: float, final: float) -> RunRecord:
    """A 100-step tune run with evals at 50 and 100."""
    rows = [{"step": 50, "bpb": early}, {"step": 100, "bpb": final}]
    return RunRecord("gr", seed, Path(f"tune-gr-lr{lr}-s{seed}"), "gr", 100, rows=rows, final=rows[-1])


def test_an_lr_with_a_seed_in_a_bad_mode_is_marked_from_its_own_seeds_median() -> None:
    """At 2e-3 the seeds read 2.50, 2.52 and 2.80 at step 50: the median 2.52, the third 0.28 above it. At 4e-3 the
    lr is simply worse (2.90 ± 0.01) and its seeds agree with each other: not a bad mode."""
    by_lr = {2e-3: [run(2e-3, 1, 2.50, 2.00), run(2e-3, 2, 2.52, 2.01), run(2e-3, 3, 2.80, 2.05)],
             4e-3: [run(4e-3, s, 2.90 + 0.01 * s, 2.3) for s in (1, 2, 3)]}
    assert bad_mode_lrs(by_lr, MARKER) == frozenset({2e-3})
    assert bad_mode_lrs(by_lr, None) == frozenset()
    assert bad_mode_lrs({2e-3: by_lr[2e-3][2:]}, MARKER) == frozenset()  # one seed: no median to stand out from


def test_a_dropped_lr_is_never_chosen_and_the_choice_says_so() -> None:
    rule = Bracketing(grid=(1e-3, 2e-3, 4e-3), replicates=3)
    values = {(lr, j): v for lr, v in ((1e-3, 2.10), (2e-3, 2.02), (4e-3, 2.30)) for j in range(3)}
    assert next_step(rule, values).choice.lr == 2e-3
    choice = next_step(rule, values, frozenset({2e-3})).choice
    assert choice.lr == 1e-3 and choice.bad_mode_lrs == (2e-3,)
    assert choice.to_dict()["bad_mode_lrs"] == [2e-3]
    every = next_step(rule, values, frozenset({1e-3, 2e-3, 4e-3})).choice  # all dropped: the plain rule, all marked
    assert every.lr == 2e-3 and every.bad_mode_lrs == (1e-3, 2e-3, 4e-3)


# GR's tune runs (seeds 9001..9003 at each lr): at 0.002 the third seed sits 0.4 above the other two (at step 10 as
# at the end, the fake's curves are parallel), so its mean 2.137 still beats 0.001's 2.15; the baseline's are plain.
GR_TUNE = {0.001: (2.15, 2.15, 2.15), 0.002: (2.00, 2.01, 2.40), 0.004: (2.20, 2.20, 2.20)}


def planted(run: PlantedRun) -> float:
    if run.name.startswith("tune-gr-"):
        return GR_TUNE[run.lr][run.seed - 9001]
    return 2.0 + 0.1 * abs(math.log2(run.lr / 0.002)) + 0.01 * (run.seed % 100)


def test_the_tune_stage_drops_an_lr_whose_seed_falls_in_a_bad_mode_and_the_report_says_so(tmp_path: Path) -> None:
    """Through the whole comparison: GR's lr is chosen among the lrs without a bad-mode seed (0.001, not the
    lower-mean 0.002), the results carry the dropped lr, and the report's tune section names it."""
    text = registration("bm", ("prenorm", "gr", "prenorm_aa"), looks="[2]", sesoi=0.05,
                        fields="bad_mode:\n  at_fraction: 0.5\n  margin: 0.1", tail=TUNE)
    results = run_comparison("bm", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                             train_fn=FakeTrain(planted), registry=write_registry(tmp_path, "bm", text))
    assert results.tune["chosen"]["gr"] == 0.001 and results.tune["chosen"]["prenorm"] == 0.002
    assert results.tune["arms"]["gr"]["bad_mode_lrs"] == [0.002]
    assert "bad_mode_lrs" not in results.tune["arms"]["prenorm"]
    report = (results.plan.comp_dir / "report.md").read_text()
    assert "gr: 0.002" in report.split("## The tune stage")[1]
    plain = registration("bm", ("prenorm", "gr", "prenorm_aa"), looks="[2]", sesoi=0.05, tail=TUNE)
    unmarked = run_comparison("bm", [], root=tmp_path / "plain", console=Console(record=True, width=200),
                              train_fn=FakeTrain(planted), registry=write_registry(tmp_path, "bm", plain))
    assert unmarked.tune["chosen"]["gr"] == 0.002  # without the marker the bad seed's lr wins on its mean
