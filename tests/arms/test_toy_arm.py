"""A new arm is one class: a toy arm defined only in this file runs through everything dormouse does with an
arm -- config (its switch and its options, refused next to another arm), `train`, `dormouse logs --check`,
the learned-value probes and the eval line's ``learned=``, the per-run plot, and an A/B report -- with no
edit to the package (the package derives every per-arm place from the registry).

The toy arm is ``x <- x + beta_s f(x)`` with beta_s per slot starting at ``model.toy.start`` (a ReZero that
does not start at zero). It is registered for this module only: the fixture removes it afterwards, so no
other test sees a fifth counter.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from dormouse.ab.reporting.report import meaning
from dormouse.arms.base import ResidualArm
from dormouse.arms.probes import LoopTrace, slot_names
from dormouse.arms.registry import ARMS, unregister_arm
from dormouse.config.schema import ConfigError, load_config
from dormouse.run.checks import checked_run
from dormouse.run.loglines import parse_eval_line
from tests.helpers.registrations import registration, write_registry


@dataclass
class ToyOptions:
    start: float = 0.5  # beta_s at initialisation


def define_toy_arm() -> type[ResidualArm]:
    class ToyArm(ResidualArm):
        """Toy arm: ``x <- x + beta_s f(x)``, beta_s per slot, starting at ``model.toy.start``."""

        name = "toy"
        options = ToyOptions
        plot_file = "toy_beta.png"
        slot_fields = ("beta",)

        @classmethod
        def config_problems(cls, model_cfg: Any, selected: bool) -> list[str]:
            start = model_cfg.toy.start
            return [] if start > 0 else [f"model.toy.start={start!r} is invalid: must be > 0"]

        @classmethod
        def from_config(cls, model_cfg: Any, kernel: str) -> ResidualArm:
            return cls(int(model_cfg.d_model), int(model_cfg.max_iter), float(model_cfg.toy.start))

        def __init__(self, d_model: int, max_iter: int, start: float = 0.5) -> None:
            super().__init__(d_model, max_iter)
            self.beta = nn.Parameter(torch.full((self.n_slots,), start))

        def begin(self, embedding: Tensor) -> Tensor:
            return embedding

        def sublayer_input(self, state: Tensor, slot: int) -> Tensor:
            return state

        def absorb(self, state: Tensor, slot: int, output: Tensor) -> Tensor:
            new_state = state + self.beta[slot] * output
            self.counters.count_ran(self.name)
            return new_state

        def readout_input(self, state: Tensor, k: int) -> Tensor:
            return state

        def learned(self, traces: Iterable[LoopTrace]) -> dict[str, Any]:
            return {"beta": [float(b) for b in self.beta.detach()]}

        @classmethod
        def summarize(cls, fields: dict[str, Any]) -> tuple[str, float]:
            return "beta", sum(fields["beta"]) / len(fields["beta"])

        @classmethod
        def plot(cls, row: dict[str, Any], out: Path, label: str) -> Path | None:
            from dormouse.arms.plots import plot_slot_values

            if row.get("probe/beta") is None:
                return None
            return plot_slot_values(slot_names(len(row["probe/beta"]) // 2), row["probe/beta"], out, ylabel="beta",
                                    title="toy beta by slot" + label)

    return ToyArm


@pytest.fixture(scope="module")
def toy() -> Iterator[type[ResidualArm]]:
    cls = define_toy_arm()
    try:
        yield cls
    finally:
        unregister_arm("toy")


def overrides(run_dir: Path, name: str, *arm: str) -> list[str]:
    return ["preset=tiny", *arm, "train.steps=4", "train.eval_every=2", "train.batch_size=4", "data.seq_len=32",
            "data.eval_bytes=256", f"run.dir={run_dir}", f"run.name={name}"]


def test_the_toy_arm_has_a_switch_and_options_and_is_refused_next_to_another(toy: type[ResidualArm], tmp_path):
    assert ARMS[-1] == "toy"
    cfg = load_config(overrides(tmp_path, "x", "model.use_toy=true", "model.toy.start=0.25"))
    assert cfg.model.use_toy and cfg.model.toy.start == 0.25
    with pytest.raises(ConfigError) as both:
        load_config(overrides(tmp_path, "x", "model.use_toy=true", "model.use_gr=true"))
    assert any("model.use_toy" in line and "model.use_gr" in line for line in both.value.lines)
    with pytest.raises(ConfigError) as bad:
        load_config(overrides(tmp_path, "x", "model.use_toy=true", "model.toy.start=-1"))
    assert any(line.startswith("model.toy.start=-1") for line in bad.value.lines)


def test_the_toy_arm_trains_logs_probes_plots_and_reports(toy: type[ResidualArm], tmp_path: Path):
    from dormouse.ab.comparison.plan import build_plan
    from dormouse.ab.reporting.report import write_outputs
    from dormouse.ab.reporting.results import analyze
    from dormouse.ab.rule.looks import progress
    from dormouse.ab.runs.job import Run
    from dormouse.ab.runs.records import RunRecord, load_record
    from dormouse.config.schema import arm_name
    from dormouse.train.loop import train

    runs = tmp_path / "runs"
    for arm, switch in (("rezero", []), ("toy", ["model.use_toy=true"])):
        train(load_config(overrides(runs, f"{arm}-s1", *switch)))
    toy_dir = runs / "toy-s1"
    # the eval line carries the toy's counter (ran = asked > 0) and its learned= summary; logs --check is clean
    evals = [parse_eval_line(line) for line in (toy_dir / "train.log").read_text().splitlines()
             if line.startswith("eval ")]
    assert evals and all(v["arm"] == "toy" and v["toy_ran"] == v["toy_asked"] > 0 for v in evals[1:])
    assert evals[-1]["learned_name"] == "beta" and all("rezero_ran" not in v for v in evals)
    assert checked_run(toy_dir).findings == []
    rows = [json.loads(line) for line in (toy_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows[-1]["probe/beta"]) == 2 * 2 and rows[-1]["learned"] == pytest.approx(
        sum(rows[-1]["probe/beta"]) / 4)
    assert rows[-1]["probe/beta"] != [0.5] * 4  # it trained: beta moved off its start
    assert (toy_dir / "toy_beta.png").read_bytes()[:4] == b"\x89PNG"
    # the A/B report, through the comparison's own plan, looks and report (protocol 2): the toy arm against
    # the ReZero baseline, two replicates trained from the plan's composed configs
    reg = write_registry(tmp_path, "toy", registration(
        "toy", ("rezero", "toy"), sesoi=0.05, looks="[2]", expected_effect=-0.05, aa_arm=None,
        fixed=f"[{', '.join(overrides(runs, 'unused')[:-2])}]", overrides={"toy": "[model.use_toy=true]"}))
    plan = build_plan("toy", [], tmp_path / "ab", registry=reg)
    for run in plan.runs:
        train(run.cfg)

    def read(run: Run) -> RunRecord:
        return load_record(run.arm, run.seed, run.run_dir, arm_name(run.cfg), run.steps,
                           replicate=run.replicate)

    results, records = analyze(plan, progress(plan, read), read)
    write_outputs(plan.comp_dir, results, records)
    assert results.to_json()["arms"]["toy"]["verdict"] in ("better", "worse", "tie", "undecided")
    assert (plan.comp_dir / "toy_beta_toy.png").is_file()
    assert "toy" in (plan.comp_dir / "report.md").read_text()
    # the tie rule's order is the registry's when the report is made (this module imported the report first)
    assert f"(the registry's order: {', then '.join(ARMS)})" in meaning("tie") and ARMS[-1] == "toy"
