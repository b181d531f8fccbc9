"""The verdict rule as the report applies it (issue 10, gate 7): planted paired results go through
``analyze`` and ``render_report``; the expected verdicts, p-values and sentences are worked out here by hand.

Three seeds give a paired t-test with 2 degrees of freedom, whose two-sided p-value has a closed form,
p = 1 - t / sqrt(t^2 + 2) (the Student-t CDF for nu = 2), so the planted numbers' p-values are computed
here without calling the code under test.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from dormouse.ab.records import RunRecord
from dormouse.ab.registry import ComparisonSpec
from dormouse.ab.report import analyze, render_report

BASE = {1: 2.00, 2: 2.10, 3: 2.20}
KINDS = {"rezero": "rezero", "gr": "gr", "attnres_full": "attnres", "attnres_block": "attnres",
         "attnres_wide": "attnres"}


def spec(arms: list[str]) -> ComparisonSpec:
    return ComparisonSpec(name="t", description="", metric="bpb", baseline="rezero", aa_arm=None,
                          min_effect=0.01, seeds=[1, 2, 3], fixed=[],
                          arms={a: [] if a == "rezero" else [f"x.{a}=1"] for a in ["rezero", *arms]},
                          extension="Add seeds 4-6 once.", extension_comparison="t_ext")


def record(arm: str, seed: int, bpb: float) -> RunRecord:
    row: dict[str, Any] = {"step": 10, "bpb": bpb, "bpb@1": bpb, "tok/s": 1000.0}
    return RunRecord(arm, seed, Path(f"/planted/{arm}-s{seed}"), KINDS[arm], 10, rows=[row], final=row,
                     provenance={"device": "cpu"})


def planted(diffs: dict[str, list[float]]) -> dict[str, Any]:
    records = [record("rezero", s, b) for s, b in BASE.items()]
    records += [record(arm, s, BASE[s] + d) for arm, ds in diffs.items() for s, d in zip(BASE, ds)]
    return analyze(spec(list(diffs)), records)


def p_two_sided_df2(xs: list[float]) -> float:
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    t = abs(m) / (sd / math.sqrt(n))
    return 1 - t / math.sqrt(t * t + 2)


def test_verdict_follows_holm_not_the_raw_p() -> None:
    """gr's raw p is < 0.05 (interval below 0, |mean| = 0.05 >= delta), but with 3 arms Holm multiplies the
    smallest p by 3, past 0.05: the registered rule says not better -- and not a tie (the interval reaches
    far past -delta), so undecided."""
    diffs = {"gr": [-0.035, -0.05, -0.065], "attnres_full": [0.02, -0.02, 0.03],
             "attnres_block": [0.0, 0.004, -0.002]}
    p_gr = p_two_sided_df2(diffs["gr"])  # t = 0.05 / (0.015 / sqrt 3) = 5.774 -> p = 0.0287
    assert p_gr == pytest.approx(0.028713, abs=1e-5)
    assert p_gr < 0.05 < 3 * p_gr  # the planted case: raw significant, Holm not
    results = planted(diffs)
    gr = results["arms"]["gr"]
    assert gr["p"] == pytest.approx(p_gr, rel=1e-9)
    assert gr["p_holm"] == pytest.approx(3 * p_gr, rel=1e-9)  # the smallest of 3: times m = 3
    assert gr["t_interval"][1] < 0  # the raw test alone would have called it better
    assert gr["verdict"] == "undecided", (
        f"verdict {gr['verdict']} with raw p {gr['p']:.4f} and Holm p {gr['p_holm']:.4f} "
        f"(deviation={gr['verdict']} bound=undecided)")
    assert gr["kept"] == "rezero"  # the simpler arm stays
    assert f"Holm-adjusted p {3 * p_gr:.3g} ≥ 0.05" in gr["reason"]


def test_each_verdict_states_its_rule_and_the_command_of_the_extension() -> None:
    diffs = {"gr": [-0.10, -0.11, -0.09],  # better: p = 0.0033, Holm x4 = 0.013
             "attnres_full": [0.10, 0.11, 0.09],  # worse
             "attnres_block": [0.001, -0.001, 0.002],  # tie: interval ~(-0.0031, +0.0045) inside +-0.01
             "attnres_wide": [0.03, -0.03, 0.02]}  # undecided: contains 0, reaches +-0.08
    results = planted(diffs)
    verdicts = {a: r["verdict"] for a, r in results["arms"].items()}
    assert verdicts == {"rezero": "baseline", "gr": "better", "attnres_full": "worse", "attnres_block": "tie",
                        "attnres_wide": "undecided"}
    kept = {a: r["kept"] for a, r in results["arms"].items()}
    want = {"rezero": None, "gr": "gr", "attnres_full": "rezero", "attnres_block": "rezero",
            "attnres_wide": "rezero"}
    wrong = {a: kept[a] for a in want if kept[a] != want[a]}
    assert not wrong, f"kept arms {wrong}, expected {want} (deviation={len(wrong)} bound=0)"
    report = render_report(results, [])
    lines = {a: next(ln for ln in report.splitlines() if ln.startswith(f"- `{a}`"))
             for a in diffs}
    assert "rule: better = interval lies below 0, |mean Δ| ≥ δ and Holm p < α" in lines["gr"]
    assert "rule: worse = interval lies above 0" in lines["attnres_full"]
    assert "rule: tie = the interval lies inside (−δ, +δ)" in lines["attnres_block"]
    assert "the mechanism is rejected; the simpler arm is kept" in lines["attnres_block"]
    assert "rule: undecided" in lines["attnres_wide"]
    assert "Registered extension: Add seeds 4-6 once. Run it with `dormouse ab t_ext`." in lines["attnres_wide"]
    assert "Stays for now: `rezero`" in lines["attnres_wide"]
    assert "rejected" not in lines["attnres_wide"]  # undecided never rejects the mechanism
    assert "`undecided` otherwise" in report  # the decision bullet states the registered rule


_INTERVAL = re.compile(r"t-interval \[([+-][\d.]+), ([+-][\d.]+)\] (lies below 0|lies above 0|contains 0|does)")
_SIZE = re.compile(r"\|mean Δ\| ([\d.]+) (≥|<) δ ([\d.]+)")
_HOLM = re.compile(r"Holm-adjusted p ([\d.e+-]+) (<|≥) ([\d.]+)")


@pytest.mark.parametrize("diffs", [
    {"gr": [-0.03, 0.004, -0.02]},  # mean < 0, interval contains 0
    {"gr": [-0.015, -0.004, -0.012]},  # below 0, |mean| < delta, not inside the band
    {"gr": [0.05, 0.02, 0.08], "attnres_full": [0.0, 0.001, -0.001], "attnres_block": [0.2, -0.2, 0.1]},
])
def test_no_verdict_sentence_contradicts_its_numbers(diffs: dict[str, list[float]]) -> None:
    """Every comparison a sentence states ("lies below 0", "|mean Δ| x ≥ δ y", "Holm p < α") is checked
    against the numbers in results.json."""
    results = planted(diffs)
    for arm, r in results["arms"].items():
        if r["role"] == "baseline":
            continue
        text = r["reason"]
        lo, hi = r["t_interval"]
        m = _INTERVAL.search(text)
        assert m, text
        assert (float(m.group(1)), float(m.group(2))) == (round(lo, 4), round(hi, 4)), text
        side, delta = m.group(3), results["delta"]
        # the number that would contradict the claim, and the claim's bound on it
        offending, bound, holds = {"lies below 0": (hi, "<0", hi < 0), "lies above 0": (lo, ">0", lo > 0),
                                   "contains 0": (min(abs(lo), abs(hi)), "lo<=0<=hi", lo <= 0 <= hi),
                                   "does": (max(abs(lo), abs(hi)), f"<{delta:.4f}", -delta < lo and hi < delta),
                                   }[side]
        assert holds, (f"{arm}: '{side}' contradicts the interval [{lo:+.4f}, {hi:+.4f}] "
                       f"(deviation={offending:+.4f} bound={bound})")
        for size in _SIZE.finditer(text):
            big = abs(r["diff_mean"]) >= results["delta"]
            assert (size.group(2) == "≥") == big, f"{arm}: {size.group(0)} contradicts mean {r['diff_mean']}"
        for holm in _HOLM.finditer(text):
            assert (holm.group(2) == "<") == (r["p_holm"] < results["alpha"]), f"{arm}: {holm.group(0)}"


def test_the_registered_extension_only_adds_seeds(tmp_path: Path) -> None:
    from dormouse.ab.registry import ABSpecError, load_spec

    residual, ext = load_spec("residual").spec, load_spec("residual_ext").spec
    assert residual.extension_comparison == "residual_ext"
    assert set(residual.seeds) < set(ext.seeds) == {1, 2, 3, 4, 5, 6}
    assert (residual.arms, residual.fixed, residual.baseline, residual.aa_arm, residual.min_effect) == (
        ext.arms, ext.fixed, ext.baseline, ext.aa_arm, ext.min_effect)
    # An "extension" that changes anything else is refused, naming the field.
    reg = tmp_path / "reg"
    reg.mkdir()
    base = ("name: {name}\nbaseline: a\nmin_effect: 0.01\nseeds: {seeds}\narms:\n  a: []\n  b: [model.use_gr=true]\n"
            "fixed: [{fixed}]\n")
    (reg / "c.yaml").write_text(base.format(name="c", seeds="[1, 2]", fixed="train.steps=10")
                                + "extension_comparison: c_ext\n")
    (reg / "c_ext.yaml").write_text(base.format(name="c_ext", seeds="[1, 2, 3]", fixed="train.steps=20"))
    with pytest.raises(ABSpecError, match="changes 'fixed'"):
        load_spec("c", registry=reg)
    (reg / "c_ext.yaml").write_text(base.format(name="c_ext", seeds="[1, 2, 3]", fixed="train.steps=10"))
    assert load_spec("c", registry=reg).spec.extension_comparison == "c_ext"
