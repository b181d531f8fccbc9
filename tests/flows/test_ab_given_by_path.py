"""A comparison given by path (``dormouse ab path/to/my.yaml``): what it says after Ctrl-C, and its report's
footer, name it by that path, which a rerun accepts (``dormouse ab NAME`` would not find it)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from omegaconf import DictConfig
from rich.console import Console

from dormouse.ab.comparison.runner import run_comparison
from dormouse.errors import Interrupted
from dormouse.run.files import ComparisonFiles
from tests.flows.test_ab import SPEC, FakeTrain

# Two arms and the A/A arm, two replicates: the smallest comparison that runs every step.
SMALL = (SPEC.replace("looks: [3]", "looks: [2]")
         .replace("  attnres_full: [model.use_attnres=true]\n", "")
         .replace("  attnres_block: [model.use_attnres=true, model.attnres.block_size=2]\n", ""))


def test_after_ctrl_c_the_hint_and_the_report_name_a_comparison_given_by_path_by_its_path(tmp_path: Path) -> None:
    path = tmp_path / "my comps" / "mine.yaml"
    path.parent.mkdir()
    path.write_text(SMALL)
    given = shlex.quote(str(path))
    console = Console(record=True, width=300, color_system=None)

    def ctrl_c(cfg: DictConfig) -> None:
        raise Interrupted(130, "Ctrl-C")

    with pytest.raises(Interrupted):
        run_comparison(str(path), [], root=tmp_path / "ab", console=console, train_fn=ctrl_c)
    said = console.export_text()
    assert f"rerun `dormouse ab {given}` with the same overrides" in said, said
    assert "`dormouse ab t`" not in said
    comp_dir = run_comparison(str(path), [], root=tmp_path / "ab", console=console, train_fn=FakeTrain()).plan.comp_dir
    report = ComparisonFiles(comp_dir).report.read_text()
    assert report.rstrip().endswith(f"by `dormouse ab {given}`._"), report[-300:]
