"""The console summary of `dormouse ab`: each arm's verdict, its look and the sentence that says what was
tested, never cut to '…'."""

from __future__ import annotations

from rich.console import Console

from dormouse.ab.comparison.status import verdict_table
from dormouse.ab.reporting.results import ComparisonResults

SENTENCE = ("gr_with_a_long_arm_name has lower final bpb than rezero: at look 1 of 2 (3 paired replicates), the "
            "99.1667 % repeated confidence interval of the mean paired difference -0.0500 is [-0.0700, -0.0300]")


def results() -> ComparisonResults:
    base = {"role": "baseline", "bpb_mean": 2.4, "decision": None, "look": None,
            "verdict": "baseline", "kept": None, "sentence": "the reference"}
    gr = {"role": "arm", "bpb_mean": 2.35, "diffs": [-0.04, -0.05, -0.06], "decision": {"interval": [-0.07, -0.03]},
          "look": 1, "verdict": "better", "kept": "gr", "sentence": SENTENCE}
    return ComparisonResults.from_json({"name": "t", "sesoi": 0.01, "alpha": 0.05, "n_arms": 3, "looks": [3, 6],
                                        "arms": {"rezero": base, "gr_with_a_long_arm_name": gr}})


def render(width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(verdict_table(results()))
    return console.export_text()


def test_summary_shows_the_look_the_interval_and_what_was_tested():
    text = render(400)
    assert "SESOI ±0.01 bpb, α 0.05 over 3 arm(s), looks [3, 6]" in text
    assert "[-0.0700, -0.0300]" in text and SENTENCE in text and "the reference" in text


def test_a_narrow_terminal_wraps_values_instead_of_cutting_them():
    text = render(80)
    assert "…" not in text
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))
    assert "-0.0300" in text and "gr_with_a_long_arm_name" in first_column
