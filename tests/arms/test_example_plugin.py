"""The shipped example plugin (docs/examples/scalar_gate.py, the scalar gate ``x <- x + sigmoid(g_s) f(x)``)
is a working arm, loaded the way a user loads it: its gates move the logits slot by slot, its counter proves
it ran, its option is checked before any work, and it trains through the CLI with ``--plugin``.

These are the tests docs/arms.md tells an arm author to write for their own arm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from dormouse.arms.plugins import Plugin
from dormouse.arms.registry import ARMS
from dormouse.config.schema import ConfigError, compose_config, load_config
from dormouse.model.looped import LoopedByteLM
from dormouse.run.loglines import parse_eval_line
from tests.helpers.plugin_arms import EXAMPLE, plugin_loaded

MAX_ITER = 3


@pytest.fixture(scope="module")
def sgate() -> Iterator[Plugin]:
    """The example loaded for this module only: afterwards no other test sees its arm or its module."""
    with plugin_loaded(EXAMPLE) as plugin:
        yield plugin


def tiny_sgate(*extra: str) -> LoopedByteLM:
    cfg = compose_config(["preset=tiny", f"model.max_iter={MAX_ITER}", "model.use_sgate=true", *extra])
    return LoopedByteLM(cfg.model, seed=0)


def batch() -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))


def test_the_example_defines_one_arm_with_a_switch_and_an_option(sgate: Plugin):
    assert sgate.arms == ("sgate",) and sgate.module == "scalar_gate" and Path(sgate.file) == EXAMPLE
    cfg = compose_config(["preset=tiny", "model.use_sgate=true", "model.sgate.init=-1.5"])
    assert cfg.model.use_sgate and cfg.model.sgate.init == -1.5
    model = LoopedByteLM(cfg.model, seed=0)
    assert model.arm.name == "sgate" and torch.all(model.arm.g == -1.5)


def test_each_slots_gate_moves_the_logits(sgate: Plugin):
    """Set one g_s to another value: every readout from that slot's iteration on moves. A gate whose value
    does not reach the logits is a dead arm, whatever its counter says."""
    model = tiny_sgate()
    idx = batch()
    with torch.no_grad():
        before = model(idx)
        for slot in range(2 * MAX_ITER):
            saved = model.arm.g[slot].item()
            model.arm.g[slot] = 2.0
            after = model(idx)
            model.arm.g[slot] = saved
            first = slot // 2  # the readout after iteration `first` (0-based) is the first that reads it
            for k in range(first, MAX_ITER):
                moved = (after[k] - before[k]).abs().max().item()
                # O(1) logits, a gate moved from 0.5 to 0.88: >> 1e-4; a dead gate moves them by exactly 0
                assert moved > 1e-4, f"slot {slot}: readout {k + 1} did not move ({moved:.3e})"


def test_its_counter_counts_ran_equal_to_asked_over_a_forward(sgate: Plugin):
    model = tiny_sgate()
    model(batch())
    model(batch(), depth=2)
    snap = model.counters.snapshot()
    assert snap["sgate_asked"] == 2 * MAX_ITER + 2 * 2  # two sublayers per iteration, depths 3 then 2
    assert snap["sgate_ran"] == snap["sgate_asked"]
    assert all(snap[f"{other}_ran"] == snap[f"{other}_asked"] == 0 for other in ARMS if other != "sgate")


@pytest.mark.parametrize("value", ["50", "-10.5", "inf", "nan"])
def test_its_option_is_refused_out_of_range_naming_the_field(sgate: Plugin, tmp_path: Path, value: str):
    with pytest.raises(ConfigError) as bad:
        load_config(["preset=tiny", "model.use_sgate=true", f"model.sgate.init={value}", f"run.dir={tmp_path}"])
    assert any(line.startswith("model.sgate.init=") and "is invalid" in line for line in bad.value.lines), \
        bad.value.lines
    load_config(["preset=tiny", "model.use_sgate=true", "model.sgate.init=-10", f"run.dir={tmp_path}"])  # the edge


def test_it_trains_through_the_cli_with_plugin(tmp_path: Path):
    """``dormouse --plugin docs/examples/scalar_gate.py train model.use_sgate=true`` as a user types it, in its
    own process: exit 0, every eval line names the arm and its counter ran = asked > 0, the run records the
    plugin (module, file, sha256), and the arm's plot is drawn."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE.parents[2]), os.environ.get("PYTHONPATH", "")])}
    env.pop("DORMOUSE_PLUGINS", None)
    cmd = [sys.executable, "-m", "dormouse", "--plugin", str(EXAMPLE), "train", "model.use_sgate=true",
           "preset=tiny", "train.steps=4", "train.eval_every=2", "data.eval_bytes=256", "logging.progress=off",
           f"run.dir={tmp_path}", "run.name=sg"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    evals = [parse_eval_line(line) for line in done.stdout.splitlines() if line.startswith("eval ")]
    assert len(evals) == 2, done.stdout
    assert all(v["arm"] == "sgate" and v["sgate_ran"] == v["sgate_asked"] > 0 for v in evals), evals
    assert all(f"sgate={v['sgate_ran']}/{v['sgate_asked']}" in line
               for v, line in zip(evals, [ln for ln in done.stdout.splitlines() if ln.startswith("eval ")]))
    assert evals[-1]["learned_name"] == "gate"
    run_dir = tmp_path / "sg"
    recorded = json.loads((run_dir / "provenance.json").read_text())["plugins"]
    assert [(r["module"], Path(r["file"])) for r in recorded] == [("scalar_gate", EXAMPLE)]
    assert (run_dir / "sgate_gate.png").read_bytes()[:4] == b"\x89PNG"
