"""The forest plot: drawn from the results' arms, including arms without a paired Δ."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormouse.ab.reporting.plots import draw_forest, plot_forest
from dormouse.ab.reporting.results import ComparisonResults


def arm(role: str, diff: float | None, rci: list[float] | None, eq: list[float] | None, verdict: str) -> dict:
    decision = None if rci is None else {"interval": rci, "eq_interval": eq}
    return {"role": role, "diffs": [] if diff is None else [diff], "decision": decision, "verdict": verdict,
            "look": 1 if rci else None, "replicates": [1, 2, 3]}


def test_forest_plot_is_written_for_every_kind_of_arm(tmp_path: Path):
    results = ComparisonResults.from_json({"name": "t", "baseline": "rezero", "looks": [3, 6], "sesoi": 0.01, "arms": {
        "rezero": arm("baseline", None, None, None, "baseline"),
        "gr": arm("arm", -0.03, [-0.05, -0.01], [-0.04, -0.02], "better"),
        "attnres": arm("arm", None, None, None, "invalid"),  # failed runs: listed, no bar
        "one_seed": arm("arm", 0.002, None, None, "insufficient"),  # a mean but no interval
        "aa": arm("aa", 0.001, [-0.004, 0.006], [-0.002, 0.004], "tie"),
    }})
    out = plot_forest(results, tmp_path / "forest.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_each_arm_gets_its_learned_values_averaged_over_seeds(tmp_path: Path):
    from dormouse.ab.reporting.plots import plot_learned
    from dormouse.ab.runs.records import RunRecord
    from dormouse.run.files import ComparisonFiles

    def rec(arm: str, seed: int, final: dict | None) -> RunRecord:
        return RunRecord(arm, seed, tmp_path / f"{arm}-s{seed}", "x", 4, final=final)

    nan = float("nan")
    amap = {"probe/reads": ["attn1", "out1"], "probe/sources": ["emb", "attn1"], "probe/entropy": [0.0, 0.6]}
    records = [rec("attnres_full", 1, {**amap, "probe/weights": [[1.0, nan], [0.2, 0.8]]}),
               rec("attnres_full", 2, {**amap, "probe/weights": [[1.0, nan], [0.4, 0.6]]}),
               rec("rezero", 1, {"probe/alpha": [0.1, 0.3]}), rec("rezero", 2, None)]  # an unfinished seed
    written = plot_learned(ComparisonFiles(tmp_path), ["rezero", "attnres_full"], records)
    assert [p.name for p in written] == ["rezero_alpha_rezero.png", "attnres_map_attnres_full.png"]


def test_rezero_alpha_is_averaged_over_seeds_as_a_magnitude():
    """ReZero's sign is not identifiable ((alpha, W_o) and (-alpha, -W_o) compute the same), so two seeds
    that use a slot equally with opposite signs must not average to 0 (the pilot's mlp1: -0.363, +0.369)."""
    from dormouse.arms.plots import mean_probe_row

    row = mean_probe_row([{"probe/alpha": [-0.363, 0.0002, 0.05]}, {"probe/alpha": [0.369, -0.0002, 0.05]}])
    assert "probe/alpha" not in row  # the signed mean (0.003, 0, 0.05) is not what is plotted
    assert row["probe/alpha_abs"] == pytest.approx([0.366, 0.0002, 0.05], abs=1e-12)
    assert row["probe/alpha_abs_sd"] == pytest.approx([0.006 / 2**0.5, 0.0, 0.0], abs=1e-12)


def test_forest_plot_names_an_unbracketed_arm_and_draws_its_mean_hollow():
    """An arm the tune stage left at an edge of its lrs (results.json's tune.arms[arm].unbracketed) is named
    so on the forest plot and its mean drawn hollow; the others stay as they were."""
    results = ComparisonResults.from_json({"name": "t", "baseline": "rezero", "looks": [3], "sesoi": 0.01, "arms": {
        "rezero": arm("baseline", None, None, None, "baseline"),
        "gr": arm("arm", -0.03, [-0.05, -0.01], [-0.04, -0.02], "better"),
        "attnres": arm("arm", 0.02, [0.01, 0.03], [0.012, 0.028], "worse"),
    }, "tune": {"arms": {"gr": {"unbracketed": "high"}, "attnres": {"unbracketed": None}}}})
    fig = draw_forest(results)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["gr (unbracketed: high)", "attnres"]
    face = {line.get_gid(): line.get_markerfacecolor() for line in ax.get_lines() if line.get_gid()}
    assert face["mean:gr"] == "none" and face["mean:attnres"] != "none"


def _drawn_boxes(fig) -> dict:
    """The figure drawn, and the display boxes of its title, legend, axes and the whole figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    return {"title": ax.title.get_window_extent(renderer), "legend": ax.get_legend().get_window_extent(renderer),
            "axes": ax.get_window_extent(renderer), "figure": fig.bbox}


@pytest.mark.parametrize("n_arms", [1, 2, 6])
def test_the_forest_legend_never_covers_the_title_whatever_the_arms(n_arms: int):
    """With one compared arm the figure is short; the legend must still sit between the axes and the title,
    overlapping neither, and all of it inside the figure."""
    arms = {"rezero": arm("baseline", None, None, None, "baseline")}
    arms.update({f"a{i}": arm("arm", -0.03, [-0.05, -0.01], [-0.04, -0.02], "better") for i in range(n_arms)})
    results = ComparisonResults.from_json({"name": "smoke", "baseline": "rezero", "looks": [2, 4], "sesoi": 0.05,
                                           "arms": arms})
    box = _drawn_boxes(draw_forest(results))
    title, legend, axes, figure = box["title"], box["legend"], box["axes"], box["figure"]
    assert legend.y0 >= axes.y1 - 0.5, "the legend dips into the axes"
    assert title.y0 >= legend.y1 - 0.5, "the legend covers the title"
    assert title.y1 <= figure.y1 + 0.5 and figure.y0 - 0.5 <= axes.y0
