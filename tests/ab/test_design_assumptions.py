"""What the decision rule assumes, stated and checked: the design card's lines for
skewed paired differences, the registered α hold-back, the pooled skewness beside the verdicts, and the A/A
calibration check (an interval for the A/A paired sd against the registered pilot sd, with its power).

Independent oracles: the audit's figures at residual_cpu2's design and on its published differences,
scipy's chi-square distribution written out here, and Monte Carlo. Each Monte-Carlo tolerance is argued from
its standard error √(p(1 − p)/n) next to the assertion. Each gate's perturbation is in
tests/falsification/perturbations_assumptions.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from scipy import stats as sps

from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.registry import parse_spec, validate_spec
from dormouse.ab.comparison.status import verdict_table
from dormouse.ab.reporting.report import render_report
from dormouse.ab.reporting.results import ComparisonResults, analyze
from dormouse.ab.rule import sequential as sq
from dormouse.ab.rule import stats
from dormouse.ab.rule.looks import progress
from dormouse.ab.runs.job import Run
from dormouse.ab.runs.records import RunRecord
from dormouse.config.schema import arm_name
from tests.helpers.registrations import registration, write_registry

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED2 = ROOT / "docs" / "results" / "residual_cpu2" / "results.json"
ALPHA = 0.05
# residual_cpu2's design, as the audit simulated it
CPU2 = sq.Design(ALPHA, 0.03, (4, 7, 10), 4)


def _published() -> dict[str, Any]:
    return json.loads(PUBLISHED2.read_text(encoding="utf-8"))


# --- the design card's skew lines -----------------------------------------------------------------------

@pytest.mark.parametrize("skew", [-1.0, -0.5, 0.5, 1.0])
def test_skewed_draws_have_mean_zero_sd_one_and_the_asked_signed_skewness(skew: float) -> None:
    """The standardised Pearson type III: mean 0, sd 1, skewness g with g's sign. n = 200 000 draws: the
    mean's se is 1/√n = 0.0022 (tolerance 0.01 ≈ 4.5 se); the sample skewness's se for a gamma of skewness
    |g| ≤ 1 (excess kurtosis 1.5 g²) is below √(15/n) ≈ 0.009, so a 0.05 tolerance is > 5 se, and a generator
    that drops the sign is off by 2|g| ≥ 1."""
    z = sq.standard_draws(np.random.default_rng(5), (200_000,), skew)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    g = float(sps.skew(z))
    assert abs(g - skew) < 0.05, f"sample skewness deviation={g:.3f} bound={skew}±0.05"


def test_at_skew_zero_the_draws_and_the_card_are_todays() -> None:
    """Skew 0 draws exactly the normal variates the card always drew, so an existing card does not move: the
    published residual_cpu2 card recomputed now gives the same rates, to the last digit."""
    a = sq.standard_draws(np.random.Generator(np.random.PCG64(3)), (2, 5), 0.0)
    assert np.array_equal(a, np.random.Generator(np.random.PCG64(3)).standard_normal((2, 5)))
    saved = _published()["design_card"]["card"]
    design = sq.Design(saved["design"]["alpha"], saved["design"]["sesoi"], tuple(saved["design"]["looks"]),
                       saved["design"]["n_arms"])
    card = sq.design_card(design, saved["pilot_sd"], saved["expected_effect"], saved["n_sim"], saved["seed"])
    for key in ("type_i", "tie_at_zero", "tie_at_sesoi", "power_sesoi", "power_expected", "expected_n"):
        assert getattr(card, key) == saved[key], key


def test_the_card_agrees_with_the_audit_under_skew_at_residual_cpu2s_design() -> None:
    """The audit's figures at looks (4, 7, 10), 4 arms, α 0.05, SESOI 0.03, sd 0.03: skew +0.5: type-I 0.048,
    P(tie | SESOI) 0.054; +1: 0.071, 0.074; +2: 0.116, 0.106. At n_sim 6000 per scenario our se is at most
    √(0.116·0.884/6000) = 0.0041; the audit's (unstated, assumed no larger than the card's 20 000: 0.0023) adds
    to √(0.0041² + 0.0023²) = 0.0047; 3 se = 0.014. The tie line is the worse of ±SESOI, whose max of two
    estimates is biased up by ≤ 0.6 se, inside the tolerance."""
    audit = {0.5: (0.048, 0.054), 1.0: (0.071, 0.074), 2.0: (0.116, 0.106)}
    lines = sq.skew_lines(CPU2, [0.03] * 4, 6000, 77, skews=tuple(audit))
    for line in lines:
        type_i, tie = audit[line.skew]
        g = line.skew
        assert abs(line.type_i - type_i) < 0.014, f"skew {g} type-I deviation={line.type_i:.4f} bound={type_i}"
        assert abs(line.tie_at_sesoi - tie) < 0.014, f"skew {g} tie deviation={line.tie_at_sesoi:.4f} bound={tie}"


def test_the_card_states_its_skew_lines_in_text_and_json() -> None:
    """Four lines, each with the worse of ±SESOI: a right skew makes +SESOI the worse side, a left skew
    −SESOI (at skew ±0.5 the two sides are about 0.053 and 0.025; at n_sim 2000 × 2 arms the se of each is
    ≈ 0.0035, so the gap is > 5 se of the difference)."""
    card = sq.design_card(sq.Design(ALPHA, 0.03, (4, 8), 2), 0.03, -0.06, n_sim=2000, seed=9)
    assert [x.skew for x in card.skew_lines] == list(sq.CARD_SKEWS) == [-1.0, -0.5, 0.5, 1.0]
    assert [x.tie_side for x in card.skew_lines] == ["−SESOI", "−SESOI", "+SESOI", "+SESOI"]
    saved = json.loads(json.dumps(card.to_dict()))["skew_lines"]
    assert [x["skew"] for x in saved] == [-1.0, -0.5, 0.5, 1.0]
    assert all({"type_i", "tie_at_sesoi", "tie_side", "type_i_se", "tie_se"} <= set(x) for x in saved)
    text = card.to_text()
    assert "the bounds are exact for normal differences" in text
    for g in ("-1.0", "-0.5", "+0.5", "+1.0"):
        assert f"skew {g}: type-I (family)" in text


def test_the_nearest_skew_line_is_the_smallest_at_or_above_the_measured_skewness() -> None:
    lines = [{"skew": -1.0, "type_i": 0.07, "tie_at_sesoi": 0.075}, {"skew": -0.5, "type_i": 0.049,
             "tie_at_sesoi": 0.053}, {"skew": 0.5, "type_i": 0.051, "tie_at_sesoi": 0.056},
             {"skew": 1.0, "type_i": 0.071, "tie_at_sesoi": 0.074}]
    said = sq.nearest_skew_line(-0.23, lines)
    assert "|skew| ≤ 0.5 line applies: type-I ≤ 0.051, P(tie | |Δ| = SESOI) ≤ 0.056" in said  # worse of ±0.5
    assert "|skew| ≤ 1 line" in sq.nearest_skew_line(0.7, lines)
    assert "beyond the card's largest line" in sq.nearest_skew_line(-1.6, lines)
    assert sq.nearest_skew_line(0.2, []) == ""  # a card made before the skew lines: nothing to point at


# --- the α hold-back ------------------------------------------------------------------------------------

def test_the_holdback_computes_the_boundaries_at_the_held_back_alpha() -> None:
    held = sq.Design(ALPHA, 0.03, (4, 7, 10), 4, alpha_holdback=0.7)
    plain = sq.Design(0.035, 0.03, (4, 7, 10), 4)
    for a, b in zip(sq.boundaries(held), sq.boundaries(plain)):
        assert a.sup_t == pytest.approx(b.sup_t, rel=1e-9) and a.eq_t == pytest.approx(b.eq_t, rel=1e-9)
    d = sq.decide(held, 2, {"a": [0.01, -0.02, 0.0, 0.03, -0.01, 0.02, 0.0, 0.01, -0.01, 0.02]})["a"]
    assert d.boundary.sup_t == pytest.approx(sq.boundaries(plain)[2].sup_t, rel=1e-9)
    assert d.alpha == ALPHA  # the claim stays the registered α
    assert "boundaries at α 0.035 = 0.05 × 0.7, held back for skew" in d.sentence("a", "b")
    assert "held back" not in sq.decide(CPU2, 0, {"a": [0.01, -0.02, 0.0, 0.03]})["a"].sentence("a", "b")


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, math.nan])
def test_a_holdback_outside_zero_one_is_refused_naming_the_field(bad: float) -> None:
    problems = sq.Design(ALPHA, 0.03, (4,), 2, alpha_holdback=bad).problems()
    assert [p.split(":")[0] for p in problems] == ["alpha_holdback"], problems
    text = SPEC.replace("alpha_holdback: 0.7", f"alpha_holdback: {bad}")
    lines = validate_spec(parse_spec(text, "t.yaml"), "t.yaml")
    assert [ln.split("'")[1] for ln in lines] == ["alpha_holdback"], lines


def test_the_holdback_keeps_skew_half_within_alpha_where_the_full_alpha_does_not() -> None:
    """The audit: ×0.7 keeps skew 0.5 within α. At skew +0.5 the full α's worse P(tie | |Δ| = SESOI) is about
    0.055 (the card's line); at n_sim 40 000 its se is √(0.055·0.945/40 000) = 0.0011, so > α is 4.5 se clear.
    Held back ×0.7 the rates are about 0.038 and 0.042, 7 se and more below α: ≤ α holds with room."""
    full = sq.skew_lines(CPU2, [0.03] * 4, 40_000, 11, skews=(0.5,))[0]
    held = sq.skew_lines(sq.Design(ALPHA, 0.03, (4, 7, 10), 4, 0.7), [0.03] * 4, 40_000, 11, skews=(0.5,))[0]
    assert max(full.type_i, full.tie_at_sesoi) > ALPHA, f"full α deviation={full.tie_at_sesoi:.4f} bound>{ALPHA}"
    assert held.type_i <= ALPHA, f"held type-I deviation={held.type_i:.4f} bound={ALPHA}"
    assert held.tie_at_sesoi <= ALPHA, f"held tie deviation={held.tie_at_sesoi:.4f} bound={ALPHA}"


# --- the pooled skewness --------------------------------------------------------------------------------

def test_the_pooled_skewness_reproduces_the_audits_minus_0_23_on_residual_cpu2() -> None:
    """The audit measured −0.23 on residual_cpu2's paired differences (every arm's, the A/A arm's included),
    to two decimals: our estimate must round to it."""
    arms = _published()["arms"]
    pooled = stats.pooled_skewness({a: v["diffs"] for a, v in arms.items() if v["role"] != "baseline"})
    assert pooled.n == 41 and round(pooled.estimate, 2) == -0.23, pooled


def test_the_pooled_skewness_centres_and_scales_each_arm_by_its_own() -> None:
    """Two arms with mirrored shapes (one skewed right at sd 1, one skewed left at sd 100 and mean 5): each
    standardised by its own mean and sd they cancel to 0 exactly; pooled raw, the wide arm's left skew would
    dominate. The oracle is scipy.stats.skew(bias=False) on the hand-standardised values."""
    right = np.array([0.0, 0.1, 0.2, 0.3, 2.0])
    left = 5.0 - 100.0 * right
    pooled = stats.pooled_skewness({"a": right, "b": left})
    assert abs(pooled.estimate) < 1e-9, f"pooled skewness deviation={pooled.estimate:.3g} bound=0"
    lopsided = stats.pooled_skewness({"a": right, "b": 2 * right})
    z = np.concatenate([(x - x.mean()) / x.std(ddof=1) for x in (right, 2 * right)])
    assert lopsided.estimate == pytest.approx(float(sps.skew(z, bias=False)), rel=1e-12)
    assert stats.pooled_skewness({"a": [0.1, 0.2]}) is None  # fewer than 3 differences: no skewness


# --- the A/A calibration check --------------------------------------------------------------------------

def _chi2_excludes(s: np.ndarray, df: int, sigma0: float) -> tuple[np.ndarray, np.ndarray]:
    """Written out from the chi-square pivot df·s²/σ² ~ χ²_df: the 95 % interval for σ lies above σ0 when
    the pivot at σ0 exceeds its upper 2.5 % point, below σ0 when it is under its lower 2.5 % point."""
    pivot = df * s**2 / sigma0**2
    return pivot > sps.chi2.ppf(0.975, df), pivot < sps.chi2.ppf(0.025, df)


def test_the_aa_interval_is_the_chi_square_interval_and_says_which_side() -> None:
    aa = [0.01, -0.02, 0.03, 0.0, -0.01, 0.02]
    s, df = float(np.std(aa, ddof=1)), 5
    check = stats.aa_calibration(aa, 0.02, {"gr": [0.1, 0.2, 0.0]})
    lo, hi = check.interval
    assert sps.chi2.sf(df * s**2 / lo**2, df) == pytest.approx(0.025) and sps.chi2.cdf(df * s**2 / hi**2, df) \
        == pytest.approx(0.025)
    assert check.agrees and check.side is None and "the design's assumption holds" in check.sentence()
    assert [(a.arm, a.n) for a in check.arms] == [("gr", 3)] and check.arms[0].sd == pytest.approx(0.1)
    larger = stats.aa_calibration(aa, lo * 0.9)
    assert not larger.agrees and larger.side == "larger" and "power is lower than the design card says" \
        in larger.sentence()
    smaller = stats.aa_calibration(aa, hi * 1.1)
    assert not smaller.agrees and smaller.side == "smaller" and "pessimistic" in smaller.sentence()
    assert stats.aa_calibration([0.1], 0.02) is None  # one A/A replicate: no spread


def test_the_aa_checks_false_alarms_are_split_between_both_sides_at_the_pilot_sd() -> None:
    """At σ = pilot sd the check fails in 5 %: 2.5 % "larger" and 2.5 % "smaller". n_sim 4000: the se of
    0.025 is √(0.025·0.975/4000) = 0.0025, so each side must lie in 0.025 ± 0.01 (4 se). A one-sided check
    (one side never flagged, or the whole 5 % on one side) leaves that band."""
    rng = np.random.default_rng(21)
    sides = [stats.aa_calibration(rng.normal(0.0, 0.03, 10), 0.03).side for _ in range(4000)]
    for side in ("larger", "smaller"):
        rate = sides.count(side) / len(sides)
        assert abs(rate - 0.025) < 0.01, f"false alarms '{side}' deviation={rate:.4f} bound=0.025±0.01"


def test_the_aa_checks_stated_power_is_its_chi_square_power() -> None:
    """The closed form against Monte Carlo at the A/A arm's n = 10 (9 df), at the true sd × √2, × 2 and ÷ √2
    (variance ratio 2, 4, 1/2) and × 1 (the false-alarm rate 0.05). 20 000 samples each: se ≤ 0.0035, tolerance
    0.014 (4 se). The powers the check states are these (the audit's F test had 5 % and 24 % at ratio 2 and 4)."""
    rng = np.random.default_rng(8)
    stated = stats.aa_calibration(rng.normal(0.0, 1.0, 10), 1.0).power
    for name, ratio in {**stats.CALIBRATION_POWER_AT, "sd × 1": 1.0}.items():
        s = rng.normal(0.0, ratio, (20_000, 10)).std(axis=1, ddof=1)
        above, below = _chi2_excludes(s, 9, 1.0)
        mc = float((above | below).mean())
        power = stated.get(name, stats.sd_interval_power(ratio, 9))
        assert abs(power - mc) < 0.014, f"power at {name} deviation={power:.4f} bound={mc:.4f}±0.014"
    assert stated["sd × √2"] == pytest.approx(0.393, abs=1e-3) and stated["sd × 2"] == pytest.approx(0.855, abs=1e-3)


# --- results.json, the report and the console -----------------------------------------------------------

SPEC = registration("t", ("rezero", "rezero_aa", "gr"), aa_arm="rezero_aa", looks="[4]",
                    fields="alpha_holdback: 0.7", fixed="[preset=tiny, train.device=cpu]")
DIFFS = {"gr": [-0.10, -0.11, -0.09, -0.12], "rezero_aa": [0.004, -0.012, 0.009, 0.001]}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """results.json of planted final bpb: the baseline at 2.0 + replicate/10, each arm at that + DIFFS."""
    reg = write_registry(tmp_path_factory.mktemp("comparison"), "t", SPEC)
    plan = build_plan("t", [], tmp_path_factory.mktemp("ab"), registry=reg)

    def read(run: Run) -> RunRecord:
        bpb = 2.0 + run.replicate / 10 + (DIFFS[run.arm][run.replicate - 1] if run.arm in DIFFS else 0.0)
        row: dict[str, Any] = {"step": 10, "bpb": bpb, "tok/s": 1000.0}
        return RunRecord(run.arm, run.seed, run.run_dir, arm_name(run.cfg), 10, rows=[row], final=row,
                         provenance={"device": "cpu"}, replicate=run.replicate)

    card = sq.design_card(plan.design(), 0.01, -0.02, n_sim=500, seed=1)
    results, _ = analyze(plan, progress(plan, read), read,
                         design_card={"card": card.to_dict(), "text": card.to_text()})
    return json.loads(json.dumps(results.to_json()))


def test_results_carry_the_holdback_the_skewness_and_the_aa_interval(planted: dict[str, Any]) -> None:
    assert planted["alpha_holdback"] == 0.7 and planted["alpha"] == 0.05
    assert "boundaries at α 0.035 = 0.05 × 0.7, held back for skew" in planted["arms"]["gr"]["sentence"]
    skew = planted["skewness"]
    z = np.concatenate([(np.array(d) - np.mean(d)) / np.std(d, ddof=1) for d in DIFFS.values()])
    assert skew["estimate"] == pytest.approx(float(sps.skew(z, bias=False)), abs=1e-9) and skew["n"] == 8
    assert "line applies" in skew["sentence"] or "beyond the card's largest line" in skew["sentence"]
    cal = planted["aa_calibration"]
    assert cal["pilot_sd"] == 0.01 and cal["aa_n"] == 4 and cal["agrees"] in (True, False)
    assert [a["arm"] for a in cal["arms"]] == ["gr"]


def test_the_report_and_console_print_the_assumptions_beside_the_verdicts(planted: dict[str, Any]) -> None:
    report = render_report(ComparisonResults.from_json(planted), [])
    assert "**A/A calibration check**" in report and "registered pilot sd 0.01" in report
    assert "**Skewness**: pooled skewness of the paired differences" in report
    assert "(boundaries at α 0.035 = 0.05 × 0.7, held back for skew)" in report
    console = Console(width=400, record=True, color_system=None)
    console.print(verdict_table(ComparisonResults.from_json(planted)))
    text = console.export_text()
    assert "A/A calibration check: The A/A paired sd" in text and "Skewness: pooled skewness" in text
    assert "over 1 arm(s) (boundaries at α 0.035 = 0.05 × 0.7, held back for skew)" in text


def test_the_console_prints_the_aa_check_its_aa_row_points_at(planted: dict[str, Any]) -> None:
    """The A/A row's sentence names the check and where it is; the console prints that check, under that
    name, below the table, at a terminal's 80 columns too (the report prints it under the verdicts)."""
    aa = planted["aa_arm"]
    said = planted["arms"][aa]["sentence"]
    assert "A/A calibration check" in said and "below the table" in said
    console = Console(width=80, record=True, color_system=None)
    console.print(verdict_table(ComparisonResults.from_json(planted)))
    text = console.export_text()
    assert text.index("A/A calibration check: The A/A paired sd") > text.rindex("└")


def test_a_published_results_json_with_the_old_aa_check_still_renders() -> None:
    """residual_cpu2's results.json holds the F test's dict and no skewness: its report says what it said."""
    old = _published()
    report = render_report(ComparisonResults.from_json(old), old.get("plots") or [])
    assert old["aa_calibration"]["sentence"] in report and "its spread agrees with the compared arms'" in report
    assert "**Skewness**" not in report and "held back" not in report
    console = Console(width=400, record=True, color_system=None)
    console.print(verdict_table(ComparisonResults.from_json(old)))
    assert "A/A calibration check: The A/A spread agrees" in console.export_text()
