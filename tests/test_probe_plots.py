"""Learned-value plots: each arm's PNGs are written, and an A/B arm's map is the mean over its seeds."""

from __future__ import annotations

import math
from pathlib import Path

from dormouse.arms import AttnRes, GatedResidual, ReZero
from dormouse.probe_plots import mean_map, write_probe_plots

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
