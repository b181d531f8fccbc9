"""The registered smoke comparison of every built-in arm (conf/ab/smoke_field.yaml): each trains through the real
trainer, proves its counter and gets a verdict against the plain pre-norm residual."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from dormouse.ab.comparison.registry import load_spec
from dormouse.ab.comparison.runner import run_comparison
from dormouse.arms.registry import BUILTIN_ARMS
from dormouse.config.schema import arm_name, compose_config
from dormouse.train.loop import train
from tests.helpers.registrations import write_registry


def test_the_field_smoke_registration_holds_every_built_in_arm_against_prenorm() -> None:
    spec = load_spec("smoke_field").spec
    selected = {arm_name(compose_config(list(o))) for o in spec.arms.values()}
    assert spec.baseline == "prenorm" and selected == set(BUILTIN_ARMS)


@pytest.mark.slow
def test_every_built_in_arm_trains_counts_and_is_decided_in_the_field_smoke(tmp_path: Path) -> None:
    """The shipped registration at one look of 2 replicates, cut to 4 steps: every arm's runs pass the counter
    check and each arm gets a verdict of the protocol's."""
    shipped = (Path(__file__).parents[2] / "conf" / "ab" / "smoke_field.yaml").read_text()
    assert "looks: [2, 4]" in shipped
    registry = write_registry(tmp_path, "smoke_field", shipped.replace("looks: [2, 4]", "looks: [2]"))
    results = run_comparison("smoke_field", ["train.steps=4", "train.eval_every=2", "data.eval_bytes=512"],
                             root=tmp_path / "ab", console=Console(record=True), train_fn=train,
                             registry=registry)
    written = json.loads((results.plan.comp_dir / "results.json").read_text())
    assert written["complete"] and len(written["arms"]) == len(BUILTIN_ARMS) + 1
    for name, arm in written["arms"].items():
        assert arm["counter_check"] == "pass", (name, arm["findings"])
        assert arm["verdict"] in ("baseline", "aa", "better", "worse", "tie", "undecided"), name
