"""The report's tune section and the learning-rate plot (dormouse/ab/tune/report.py,
dormouse/ab/reporting/plots.py ``draw_lr``), from hand-made ``results.json`` documents with and without the bracketing
stage's keys, and from the published residual_cpu2 result (which lacks them)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dormouse.ab.reporting.plots import draw_lr, plot_lr, write_plots
from dormouse.ab.reporting.report import render_report
from dormouse.ab.reporting.results import ComparisonResults
from dormouse.ab.tune import report as tune_report
from dormouse.ab.tune.report import HOLDS, NO_SIGN, NOT_MEASURED, REVERSES, sign_checks
from dormouse.run.files import LR_PLOT

PUBLISHED2 = Path(__file__).resolve().parents[2] / "docs" / "results" / "residual_cpu2" / "results.json"


def _arm(role: str, verdict: str, diff: float | None, mean: float, sd: float) -> dict[str, Any]:
    return {"role": role, "verdict": verdict, "diffs": [] if diff is None else [diff], "bpb_mean": mean, "bpb_sd": sd}


def bracketed() -> ComparisonResults:
    """A comparison whose tune stage extended, re-seeded and flagged. The baseline chose 0.002 (mean of its
    two seeds there 2.41); at 0.002 ``up`` (better) ran 2.38: -0.03, holds; ``down`` (worse) ran 2.39: -0.02,
    reverses; ``flat`` (tie) ran 2.43: +0.02, no sign claimed; ``div`` (better) diverged there: not measured."""
    tune = {
        "rule": "lowest_mean_final_bpb", "rule_text": "the lr with the lowest mean final bpb",
        "lrs": [0.001, 0.002, 0.004], "replicates": 1, "init_seeds": [9001, 9002], "data_seeds": [9101, 9102],
        "extensions": 2, "second_seed_gap": 0.03, "ratio": 2.0,
        "table": {
            "base": {"0.001": [2.50], "0.002": [2.40, 2.42], "0.004": [2.43, 2.44]},
            "up": {"0.001": [2.60], "0.002": [2.38], "0.004": [2.35], "0.008": [2.30]},
            "down": {"0.0005": [2.36], "0.001": [2.37], "0.002": [2.39], "0.004": ["diverged"]},
            "flat": {"0.001": [2.45], "0.002": [2.43], "0.004": [2.44]},
            "div": {"0.001": [2.35], "0.002": ["diverged"], "0.004": ["diverged"]},
        },
        "chosen": {"base": 0.002, "up": 0.008, "down": 0.0005, "flat": 0.002, "div": 0.001, "base_aa": 0.002},
        "aa_arm_takes": "base",
        "arms": {
            "base": {"runs": 5, "budget": 6, "extended": [], "second_seed": [0.002, 0.004],
                     "stability_limited": [], "unbracketed": None},
            "up": {"runs": 4, "budget": 6, "extended": [0.008], "second_seed": [], "stability_limited": [],
                   "unbracketed": "high"},
            "down": {"runs": 4, "budget": 6, "extended": [0.0005], "second_seed": [], "stability_limited": [],
                     "unbracketed": "low"},
            "flat": {"runs": 3, "budget": 6, "extended": [], "second_seed": [], "stability_limited": [],
                     "unbracketed": None},
            "div": {"runs": 3, "budget": 6, "extended": [], "second_seed": [], "stability_limited": ["high"],
                    "unbracketed": None},
        },
    }
    arms = {"base": _arm("baseline", "baseline", None, 2.41, 0.01), "up": _arm("arm", "better", -0.05, 2.36, 0.02),
            "down": _arm("arm", "worse", 0.04, 2.45, 0.015), "flat": _arm("arm", "tie", 0.001, 2.411, 0.01),
            "div": _arm("arm", "better", -0.06, 2.35, 0.01), "base_aa": _arm("aa", "tie", 0.002, 2.412, 0.01)}
    return ComparisonResults.from_json({"name": "t", "baseline": "base", "tune": tune, "arms": arms})


def _rows(lines: list[str]) -> dict[str, list[str]]:
    """The tune table's rows by arm (first cell), cells stripped."""
    rows = {}
    for line in lines:
        if line.startswith("| ") and not line.startswith("| arm |"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.setdefault(cells[0], cells)
    return rows


def test_the_table_has_every_lr_any_arm_ran_and_each_arms_spend_and_flags() -> None:
    lines = tune_report.markdown(bracketed(), [LR_PLOT])
    header = next(ln for ln in lines if ln.startswith("| arm | lr"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "arm", "lr 0.0005", "lr 0.001", "lr 0.002", "lr 0.004", "lr 0.008", "runs used / budget", "extended to",
        "second seed at", "stability-limited", "unbracketed", "chosen lr"]
    rows = _rows(lines[:lines.index("### Does each verdict's sign hold at the baseline's lr?")])
    assert rows["base"][1:7] == ["—", "2.5000", "**2.4000, 2.4200** ←", "2.4300, 2.4400", "—", "5 / 6"]
    assert rows["base"][8] == "0.002, 0.004" and rows["base"][10] == "—"
    assert rows["up"][5] == "**2.3000** ←" and rows["up"][7] == "0.008" and rows["up"][10] == "**high** †"
    assert rows["down"][1] == "**2.3600** ←" and rows["down"][4] == "diverged" and rows["down"][10] == "**low** †"
    assert rows["div"][9] == "high" and rows["div"][3] == "diverged" and rows["div"][-1] == "0.001"
    assert all(sum("←" in c for c in r) == 1 for r in rows.values())
    assert "at most 2 added lr(s) per arm" in lines[2] and "within 0.03 bpb" in lines[2]
    assert f"[`{LR_PLOT}`]({LR_PLOT})" in "\n".join(lines)


def test_the_sign_at_the_baselines_lr_holds_reverses_or_is_not_measured() -> None:
    checks = {c.arm: c for c in sign_checks(bracketed())}
    assert list(checks) == ["up", "down", "flat", "div"]  # the baseline and the A/A arm are not compared
    assert {a: c.outcome for a, c in checks.items()} == {"up": HOLDS, "down": REVERSES, "flat": NO_SIGN,
                                                          "div": NOT_MEASURED}
    assert all(c.lr == 0.002 for c in checks.values())
    assert checks["up"].tune_diff == pytest.approx(2.38 - 2.41)
    assert checks["down"].tune_diff == pytest.approx(2.39 - 2.41)
    assert checks["flat"].tune_diff == pytest.approx(2.43 - 2.41)
    assert checks["div"].tune_diff is None and checks["div"].why == "div diverged there"
    text = "\n".join(tune_report.markdown(bracketed(), []))
    assert "| `down` | worse | +0.0400 | 0.0005 | -0.0200 | **reverses** |" in text
    assert "| `flat` | tie | +0.0010 | 0.002 | +0.0200 | no sign claimed (tie) |" in text
    assert "decides nothing" in text and "disjoint" in text


def test_an_arm_that_never_ran_at_the_baselines_lr_is_not_measured() -> None:
    """The baseline's choice an extension (0.008) no other arm reached; a worse arm that would hold at
    0.004 does not count as holding at 0.008."""
    r = bracketed()
    r.tune["table"]["base"]["0.008"] = [2.39]
    r.tune["chosen"]["base"] = 0.008
    checks = {c.arm: c for c in sign_checks(r)}
    assert checks["down"].outcome == NOT_MEASURED and checks["down"].why == "down never ran there"
    assert checks["up"].outcome == HOLDS and checks["up"].tune_diff == pytest.approx(2.30 - 2.39)


def test_the_published_result_without_the_new_keys_renders_with_no_flags() -> None:
    results = ComparisonResults.from_json(json.loads(PUBLISHED2.read_text()))
    assert "arms" not in results.tune
    lines = tune_report.markdown(results, results.plots)
    rows = _rows(lines[:lines.index("### Does each verdict's sign hold at the baseline's lr?")])
    assert rows["gr"][1:] == ["2.4605", "2.4299", "**2.3980** ←", "3 / 3", "—", "—", "—", "—", "0.0045"]
    assert "predates the bracketing stage" in "\n".join(lines)
    assert "was not drawn" in "\n".join(lines)  # its plots list has no lr plot
    # By hand from its tune table: prenorm chose 0.003 (2.441428); gr 2.429872 there, rezero 2.535615,
    # attnres_full 2.515377, attnres_block 2.551688: every verdict keeps its sign.
    checks = {c.arm: c for c in sign_checks(results)}
    assert {a: c.outcome for a, c in checks.items()} == dict.fromkeys(
        ["rezero", "gr", "attnres_full", "attnres_block"], HOLDS)
    assert checks["gr"].tune_diff == pytest.approx(2.4298715400866993 - 2.441428100419962, abs=1e-12)
    report = render_report(results, results.plots)
    assert "## The tune stage" in report and "†" not in report


def test_an_unbracketed_arm_is_marked_in_the_verdict_table_with_a_footnote() -> None:
    results = ComparisonResults.from_json(json.loads(PUBLISHED2.read_text()))
    results.tune["arms"] = {"gr": {"runs": 3, "budget": 3, "extended": [], "second_seed": [],
                                      "stability_limited": [], "unbracketed": "high"}}
    report = render_report(results, results.plots).splitlines()
    verdicts = report[report.index("## Verdicts"):report.index("## What was tested")]
    assert next(ln for ln in verdicts if ln.startswith("| `gr`")).startswith("| `gr` † |")
    assert not any(ln.startswith("| `rezero` †") for ln in verdicts)
    note = next(ln for ln in verdicts if ln.startswith("† **Unbracketed**"))
    assert "`gr`'s chosen lr is still at the high edge" in note


def _points(fig: Any, gid: str) -> list[tuple[float, float]]:
    line = next((a for ax in fig.axes for a in ax.get_lines() if a.get_gid() == gid), None)
    return [] if line is None else list(zip(map(float, line.get_xdata()), map(float, line.get_ydata())))


def test_the_lr_plot_draws_every_tune_run_the_choice_and_the_confirmatory_mean() -> None:
    r = bracketed()
    fig = draw_lr(r)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == [
        "base", "up (unbracketed: high)", "down (unbracketed: low)", "flat", "div"]
    finished = {a: sum(isinstance(v, float) for vs in t.values() for v in vs) for a, t in r.tune["table"].items()}
    assert finished == {"base": 5, "up": 4, "down": 3, "flat": 3, "div": 1}
    for arm, n in finished.items():
        assert len(_points(fig, f"tune-runs:{arm}")) == n, arm
    assert sorted(_points(fig, "tune-runs:base")) == [(0.001, 2.5), (0.002, 2.4), (0.002, 2.42), (0.004, 2.43),
                                                     (0.004, 2.44)]
    # Diverged runs: at their lr, on the panel's top edge.
    assert [x for x, _ in _points(fig, "tune-diverged:div")] == [0.002, 0.004]
    assert [x for x, _ in _points(fig, "tune-diverged:down")] == [0.004]
    ax = next(a for a in fig.axes if a.get_title() == "div")
    assert all(y == ax.get_ylim()[1] for _, y in _points(fig, "tune-diverged:div"))
    assert all(y < ax.get_ylim()[1] for _, y in _points(fig, "tune-runs:div"))
    for arm, a in r.arms.items():
        if arm in r.tune["table"]:
            chosen = r.tune["chosen"][arm]
            assert {x for x, _ in _points(fig, f"chosen:{arm}")} == {chosen}
            assert _points(fig, f"confirmatory:{arm}") == [(chosen, a.bpb_mean)]
    ax_up = next(a for a in fig.axes if a.get_title().startswith("up"))
    bars = next(c for c in ax_up.containers if c.lines[0].get_gid() == "confirmatory:up")
    (segment,) = bars.lines[2][0].get_segments()
    assert [float(y) for _, y in segment] == pytest.approx([2.36 - 0.02, 2.36 + 0.02])
    assert ax_up.get_xscale() == "log"


def test_the_lr_plot_is_written_for_a_comparison_with_a_tune_stage_only(tmp_path: Path) -> None:
    r = bracketed()
    assert plot_lr(r, tmp_path / LR_PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    base = {**r.to_json(), "sesoi": 0.01, "looks": [3], "runs": [], "aa_arm": "base_aa", "tune": None}
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    with_tune = write_plots(tmp_path / "a", ComparisonResults.from_json({**copy.deepcopy(base), "tune": r.tune}), [])
    assert LR_PLOT in [p.name for p in with_tune] and (tmp_path / "a" / LR_PLOT).is_file()
    assert LR_PLOT not in [p.name for p in write_plots(tmp_path / "b", ComparisonResults.from_json(base), [])]


def test_the_lr_plot_is_the_same_image_each_time(tmp_path: Path) -> None:
    a, b = plot_lr(bracketed(), tmp_path / "a.png"), plot_lr(bracketed(), tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()
