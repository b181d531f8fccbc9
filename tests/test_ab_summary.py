"""The console summary of `dormouse ab`: Holm-adjusted p and the verdict's reason, never cut to '…'."""

from __future__ import annotations

from rich.console import Console

from dormouse.ab.runner import verdict_table


def results() -> dict:
    base = {"role": "baseline", "bpb_mean": 2.4, "diff_mean": None, "t_interval": None, "p_holm": None,
            "verdict": "baseline", "kept": None, "reason": "the reference"}
    gr = {"role": "arm", "bpb_mean": 2.35, "diff_mean": -0.05, "t_interval": [-0.07, -0.03], "p_holm": 0.0154,
          "verdict": "better", "kept": "gr", "reason": "interval below 0; |mean Δ| 0.0500 ≥ δ 0.0100; Holm p 0.0154"}
    return {"name": "t", "delta": 0.01, "delta_source": "registered min_effect",
            "arms": {"rezero": base, "gr_with_a_long_arm_name": gr}}


def render(width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(verdict_table(results()))
    return console.export_text()


def test_summary_shows_holm_p_and_the_reason():
    text = render(200)
    assert "Holm p" in text and "0.0154" in text and "reason" in text
    assert "interval below 0; |mean Δ| 0.0500 ≥ δ 0.0100; Holm p 0.0154" in text
    assert "the reference" in text


def test_a_narrow_terminal_wraps_values_instead_of_cutting_them():
    text = render(80)
    assert "…" not in text
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))
    assert "0.0154" in text and "gr_with_a_long_arm_name" in first_column
