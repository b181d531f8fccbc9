"""Learned-value plots: each arm's PNGs are written, and an A/B arm's map is the mean over its seeds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dormouse.arms.attnres import AttnRes
from dormouse.arms.gr import GatedResidual
from dormouse.arms.plots import mean_map, write_probe_plots
from dormouse.arms.rezero import ReZero

NAN = float("nan")
MAP = {"probe/reads": ["attn1", "out1"], "probe/sources": ["emb", "attn1"]}


def test_mean_map_averages_seeds_cell_by_cell_and_keeps_unseen_cells_blank():
    a = {**MAP, "probe/weights": [[1.0, NAN], [0.2, 0.8]], "probe/entropy": [0.0, 0.5]}
    b = {**MAP, "probe/weights": [[1.0, NAN], [0.4, 0.6]], "probe/entropy": [0.0, 0.7]}
    m = mean_map([a, b, {"probe/alpha": [0.1]}])  # a run without a map (another arm) is skipped
    assert m["n"] == 2 and m["probe/weights"][1] == [0.30000000000000004, 0.7] and math.isnan(m["probe/weights"][0][1])
    assert m["probe/entropy"] == [0.0, 0.6] and mean_map([{"probe/alpha": [0.1]}]) is None


def test_each_arm_writes_its_own_png(tmp_path: Path):
    row_attnres = {**MAP, "probe/weights": [[1.0, NAN], [0.3, 0.7]], "probe/entropy": [0.0, 0.61]}
    row_rezero = {"probe/alpha": [0.1, -0.2, 0.3, 0.0]}
    row_gr = {"probe/gate_mean": [0.2, 0.1], "probe/gate_spread": [0.05, 0.01]}
    for name, row, arm in (("a", row_attnres, AttnRes), ("r", row_rezero, ReZero), ("g", row_gr, GatedResidual)):
        expected = arm.plot_file
        (tmp_path / name).mkdir()
        (written,) = write_probe_plots(tmp_path / name, row, name)
        assert written == tmp_path / name / expected
        assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and written.stat().st_size > 5000


def drawn_figures(monkeypatch) -> list:
    """Capture each Figure as it is saved (and draw it, so its layout and text extents are final)."""
    from matplotlib.figure import Figure

    figures: list = []

    def save(self, out, **kwargs):
        self.canvas.draw()
        figures.append(self)

    monkeypatch.setattr(Figure, "savefig", save)
    return figures


def test_slot_plot_says_which_colour_is_which_sublayer_and_keeps_the_init_line_in_view(tmp_path: Path, monkeypatch):
    from dormouse.arms.plots import plot_slot_values

    figures = drawn_figures(monkeypatch)
    plot_slot_values(["attn1", "mlp1", "attn2", "mlp2"], [-0.1, -0.3, -0.2, -0.05], tmp_path / "a.png",
                     ylabel="alpha", title="t", reference=0.0)
    ax = figures[0].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["attention", "MLP", "init 0"]
    lo, hi = ax.get_ylim()
    assert lo < 0.0 < hi and (hi - 0.0) > 0.02 * (hi - lo)  # every bar negative: the init line is not on the frame
    init = [ln for ln in ax.get_lines() if ln.get_label() == "init 0"]
    assert init and all(ln.get_zorder() >= other.get_zorder() for ln in init for other in ax.get_lines())


def test_map_with_few_sources_keeps_entropies_clear_of_the_colour_bar_and_the_title_whole(tmp_path: Path,
                                                                                          monkeypatch):
    figures = drawn_figures(monkeypatch)
    row = {**MAP, "probe/weights": [[1.0, NAN], [0.3, 0.7]], "probe/entropy": [0.0, 0.61]}
    write_probe_plots(tmp_path, row, "attnres_full, mean of 3 seeds")
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    axes = [a for ax in fig.axes for a in (ax, *ax.child_axes)]  # the entropy axis is the map's child
    labels = [t for ax in axes for t in ax.get_yticklabels() if t.get_text().startswith("H=")]
    colour_bar = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(labels) == 2 and len(colour_bar) == 1
    right_of_labels = max(t.get_window_extent(renderer).x1 for t in labels)
    assert right_of_labels <= colour_bar[0].get_window_extent(renderer).x0
    title = fig.axes[0].title.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.x1  # not cut by the figure's edge


def _drawn_labels(monkeypatch, arm: type, row: dict, tmp_path: Path) -> tuple[str, list[float] | None]:
    """The y label and error bars ``arm.plot`` hands to the slot plot."""
    import dormouse.arms.plots as probe_plots

    seen: dict = {}

    def capture(slots, values, out, *, ylabel, title, spread=None, reference=None):
        seen.update(ylabel=ylabel, spread=spread)
        return out

    monkeypatch.setattr(probe_plots, "plot_slot_values", capture)
    arm.plot(row, tmp_path / "x.png", "")
    return seen["ylabel"], seen["spread"]


def test_error_bars_say_what_they_are_the_same_way_for_every_arm(monkeypatch, tmp_path: Path):
    """One run's gate bars are its sd over channels; a comparison's (a seed mean) are the sd over seeds, as
    ReZero's |alpha| (never "over channels"); no bars, no word of them."""
    import statistics

    from dormouse.arms.plots import mean_probe_row

    one = {"probe/gate_mean": [0.2, 0.1], "probe/gate_spread": [0.05, 0.01]}
    assert _drawn_labels(monkeypatch, GatedResidual, one, tmp_path) == ("mean gate (bars: sd over channels)",
                                                                         [0.05, 0.01])
    seeds = [{"probe/gate_mean": [0.2, 0.1], "probe/gate_spread": [0.05, 0.01]},
             {"probe/gate_mean": [0.4, 0.1], "probe/gate_spread": [0.02, 0.03]},
             {"probe/gate_mean": [0.3, 0.4], "probe/gate_spread": [0.04, 0.02]}]
    label, spread = _drawn_labels(monkeypatch, GatedResidual, mean_probe_row(seeds), tmp_path)
    assert label == "mean gate (bars: sd over seeds)"
    # the sample sd (n - 1) of each slot's three seed means; 1e-12: float64 rounding of a 3-term sum
    assert spread == pytest.approx([statistics.stdev([0.2, 0.4, 0.3]), statistics.stdev([0.1, 0.1, 0.4])],
                                   abs=1e-12)
    alpha_label, _ = _drawn_labels(monkeypatch, ReZero, mean_probe_row([{"probe/alpha": [0.1, -0.2]},
                                                                        {"probe/alpha": [-0.1, 0.3]}]), tmp_path)
    assert alpha_label == "|alpha| (bars: sd over seeds)"
    # a comparison of one seed has no sd over seeds: neither arm draws bars or names them
    assert _drawn_labels(monkeypatch, GatedResidual, mean_probe_row(seeds[:1]), tmp_path) == ("mean gate", None)
    assert _drawn_labels(monkeypatch, ReZero, mean_probe_row([{"probe/alpha": [0.1, -0.2]}]), tmp_path) == (
        "|alpha|", None)
