"""The bracketing tune stage end to end: a small registration whose grid puts arms' optima at and beyond its
top edge. The extension runs run, ``--plan`` and ``--status`` show the extension, ``results.json``'s
``tune`` holds each arm's flags, and the report names the extension lr.

The fake trainer (tests/helpers/fake_train.py, planted as in tests/ab/test_ab_tune.py) writes a run whose
final bpb is a V in log2(lr) around a per-arm optimum, or raises the loop's diverged TrainError, so each arm's
path through the rule is worked out here by hand (grid 1e-3, 2e-3, 4e-3, ratio 2; extensions 2; second seed
within 0.03 bpb):

- rezero: optimum 2e-3 with a shallow V (0.01 per step): the grid brackets it; its neighbours lie within the
  gap, so 1e-3, 2e-3 and 4e-3 each get the second seed (tune seed 9002); chosen 2e-3.
- gr: optimum 8e-3: extended to 8e-3 (best) and 16e-3 (worse); chosen 8e-3, bracketed.
- attnres_full: optimum 64e-3, out of reach: extended to 8e-3 and 16e-3, budget spent; unbracketed high.
- attnres_block: optimum 16e-3 but every lr above 5e-3 diverges: extended to 8e-3 (diverged); chosen 4e-3,
  stability-limited high.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from dormouse.ab.comparison.command import ab_plan, ab_status
from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.runner import run_comparison
from tests.helpers.fake_train import FakeTrain
from tests.helpers.registrations import registration, write_registry

SPEC = registration("tb", ("rezero", "gr", "attnres_full", "attnres_block", "rezero_aa"), looks="[2]", tail="""\
tune:
  lrs: [0.001, 0.002, 0.004]
  replicates: 1
  init_seed_base: 9001
  data_seed_base: 9101
  rule: lowest_mean_final_bpb
  extensions: 2
  second_seed_gap: 0.03
""")
OPTIMUM = {"rezero": 0.002, "gr": 0.008, "attnres_full": 0.064, "attnres_block": 0.016, "rezero_aa": 0.002}
SLOPE = {"rezero": 0.01}
DIVERGES_ABOVE = {"attnres_block": 0.005}


def bracket_fake() -> FakeTrain:
    """Final bpb 2 + slope·|log2(lr / optimum)| + a small seed term; above an arm's DIVERGES_ABOVE the loop's
    diverged TrainError (see the module docstring)."""
    return FakeTrain(lambda r: 2.0 + SLOPE.get(r.arm, 0.05) * abs(math.log2(r.lr / OPTIMUM[r.arm]))
                     + 0.001 * (r.seed % 7), diverges=lambda r: r.lr > DIVERGES_ABOVE.get(r.arm, math.inf))


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FakeTrain, Path, str]:
    """The comparison run to its end; ``--plan`` asked before it started (module-scoped: read below)."""
    reg = write_registry(tmp_path_factory.mktemp("tb"), "tb", SPEC)
    root = tmp_path_factory.mktemp("ab")
    console = Console(record=True, width=250)
    assert ab_plan("tb", [], root=root, registry=reg, console=console) == 0
    fake = bracket_fake()
    run_console = Console(record=True, width=250)
    comp = run_comparison("tb", [], root=root, console=run_console, train_fn=fake, registry=reg).plan.comp_dir
    return comp, fake, reg, console.export_text() + "\n" + run_console.export_text()


def test_the_extension_and_second_seed_runs_run_after_the_grid(finished: tuple[Path, FakeTrain, Path, str]) -> None:
    _, fake, _, _ = finished
    tune_calls = [c for c in fake.names if c.startswith("tune-")]
    assert set(tune_calls) == {
        *(f"tune-{a}-lr{lr:g}-s9001" for a in ("rezero", "gr", "attnres_full", "attnres_block")
          for lr in (0.001, 0.002, 0.004)),
        "tune-rezero-lr0.001-s9002", "tune-rezero-lr0.002-s9002", "tune-rezero-lr0.004-s9002",
        "tune-gr-lr0.008-s9001", "tune-gr-lr0.016-s9001", "tune-attnres_full-lr0.008-s9001",
        "tune-attnres_full-lr0.016-s9001", "tune-attnres_block-lr0.008-s9001"}
    first_confirmatory = next(i for i, c in enumerate(fake.names) if not c.startswith("tune-"))
    assert first_confirmatory == len(tune_calls)


def test_results_json_holds_each_arms_choice_and_flags(finished: tuple[Path, FakeTrain, Path, str]) -> None:
    comp, _, _, _ = finished
    tune = json.loads((comp / "results.json").read_text())["tune"]
    assert tune["extensions"] == 2 and tune["second_seed_gap"] == 0.03 and tune["ratio"] == 2.0
    assert tune["init_seeds"] == [9001, 9002] and tune["data_seeds"] == [9101, 9102]
    assert tune["chosen"] == {"rezero": 0.002, "gr": 0.008, "attnres_full": 0.016, "attnres_block": 0.004,
                              "rezero_aa": 0.002}
    arms = tune["arms"]
    assert set(arms) == {"rezero", "gr", "attnres_full", "attnres_block"}
    assert {a: v["budget"] for a, v in arms.items()} == dict.fromkeys(arms, (3 + 2) * 2)
    assert arms["rezero"] == {"runs": 6, "budget": 10, "extended": [], "second_seed": [0.001, 0.002, 0.004],
                              "stability_limited": [], "unbracketed": None}
    assert arms["gr"]["extended"] == [0.008, 0.016] and arms["gr"]["unbracketed"] is None
    assert arms["attnres_full"]["extended"] == [0.008, 0.016] and arms["attnres_full"]["unbracketed"] == "high"
    assert arms["attnres_block"]["stability_limited"] == ["high"] and arms["attnres_block"]["runs"] == 4
    assert tune["table"]["attnres_block"]["0.008"] == ["diverged"]
    assert len(tune["table"]["rezero"]["0.002"]) == 2
    assert json.loads((comp / "tune.json").read_text()) == tune


def test_plan_says_the_rule_and_budget_before_and_the_extension_after(
        finished: tuple[Path, FakeTrain, Path, str]) -> None:
    comp, _, reg, before = finished
    assert "tune rule: up to 2 grid point(s) added per arm" in before
    assert "a second tune seed for the best lr and each neighbour within 0.03 bpb" in before
    assert "budget 10 tune runs per arm at most, the same for every arm" in before
    assert "at most 40 runs with bracketing" in before
    assert "; extension lr(s) 0.008" in before  # the runner's stage line for the extension round
    console = Console(record=True, width=250)
    assert ab_plan("tb", [], root=comp.parent, registry=reg, console=console) == 0
    after = console.export_text()
    assert "tune arm gr: 5 of at most 10 runs settled; extended to 0.008, 0.016; chose 0.008" in after
    assert "tune run tune-gr-lr0.016-s9001: train.lr=0.016 train.seed=9001 train.data_seed=9101 (extension)" in after


def test_status_shows_each_arms_extension_and_flags(finished: tuple[Path, FakeTrain, Path, str]) -> None:
    comp, _, reg, _ = finished
    console = Console(record=True, width=250)
    assert ab_status("tb", root=comp.parent, registry=reg, console=console) == 0
    out = console.export_text()
    assert "tune arm attnres_full: 5 of at most 10 runs settled; extended to 0.008, 0.016; chose 0.016; " \
           "UNBRACKETED (high" in out
    assert "tune arm attnres_block: 4 of at most 10 runs settled; extended to 0.008; chose 0.004; " \
           "stability-limited (high" in out
    assert "tune arm rezero: 6 of at most 10 runs settled; second seed at 0.001, 0.002, 0.004; chose 0.002" in out
    assert "tune-gr-lr0.016-s9001" in out and "(second seed)" in out


def test_the_report_names_the_extension_lr(finished: tuple[Path, FakeTrain, Path, str]) -> None:
    comp, _, _, _ = finished
    report = (comp / "report.md").read_text()
    section = report.split("## The tune stage", 1)[1].split("\n## ", 1)[0]
    # the table's columns are every lr any arm ran: the grid's and the extensions' (0.008, 0.016)
    assert all(f"lr {lr:g}" in section for lr in (0.001, 0.002, 0.004, 0.008, 0.016)), section
    assert "bpb_vs_lr.png" in section and "unbracketed" in section.lower()


def test_every_tune_run_that_may_exist_is_in_the_plan(finished: tuple[Path, FakeTrain, Path, str]) -> None:
    """The runner's kept-run check, the code check and --status walk ``plan.all_runs``: every tune run the
    budget allows (any extension lr, the second seed) must be there, not only the grid's."""
    comp, fake, reg, _ = finished
    plan = build_plan("tb", [], comp.parent, registry=reg)
    names = {p.name for p in plan.all_runs}
    assert {c for c in fake.names if c.startswith("tune-")} <= names
    assert "tune-gr-lr0.00025-s9002" in names and "tune-gr-lr0.016-s9002" in names
    assert len(names) == 4 * (3 + 2 * 2) * 2 + len(plan.runs)
