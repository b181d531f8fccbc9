"""The learned-value probes in a training run: metrics.jsonl, the eval line, the run's plots; wandb resume."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from dormouse.run.loglines import parse_eval_line
from dormouse.train.loop import train
from dormouse.train.run_config import load_run_config

TINY = ["preset=tiny", "train.steps=4", "train.eval_every=2", "data.eval_bytes=256", "logging.progress=off"]
ARMS = {"rezero": ([], "alpha", "rezero_alpha.png"), "gr": (["model.use_gr=true"], "gate", "gr_gates.png"),
        "attnres": (["model.use_attnres=true"], "emb_w", "attnres_map.png")}


@pytest.mark.parametrize("arm", list(ARMS))
def test_each_eval_logs_what_the_arm_learned_and_the_run_ends_with_its_plot(tmp_path: Path, arm: str):
    extra, summary, plot = ARMS[arm]
    train(load_run_config([*TINY, *extra, f"run.dir={tmp_path}", "run.name=r"]))
    run = tmp_path / "r"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [parse_eval_line(ln) for ln in (run / "train.log").read_text().splitlines() if ln.startswith("eval ")]
    assert len(rows) == len(evals) == 2
    for row, line in zip(rows, evals):
        assert row["learned_name"] == line["learned_name"] == summary
        assert abs(row["learned"] - line["learned"]) <= 5e-5  # the line keeps 4 decimals
        assert any(k.startswith("probe/") for k in row)
    assert (run / plot).read_bytes()[:4] == b"\x89PNG"
    if arm == "rezero":  # alpha starts at 0 and moves with training: the probe reads the live parameter
        assert rows[0]["probe/alpha"] != rows[1]["probe/alpha"]


class FakeWandb(types.ModuleType):
    """Stands in for wandb: records every init's keyword arguments and every log call ``(step, data)``."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.inits: list[dict] = []
        self.logged: list[tuple[int | None, dict]] = []

    def init(self, **kwargs):  # noqa: D401 - the wandb API
        self.inits.append(kwargs)
        return types.SimpleNamespace(log=lambda data, step=None: self.logged.append((step, dict(data))),
                                     finish=lambda: None)

    @staticmethod
    def Settings(**kwargs):  # noqa: N802 - the wandb API
        return kwargs

    @staticmethod
    def Image(path: str):  # noqa: N802 - the wandb API
        return ("image", path)


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    args = [*TINY, "logging.wandb=offline", f"run.dir={tmp_path}", "run.name=w"]
    train(load_run_config(args), stop_at_step=2)
    train(load_run_config([*args, "train.resume=auto"]))
    first, resumed = fake.inits
    assert first["id"] == resumed["id"] == (tmp_path / "w" / "wandb_id.txt").read_text().strip()
    assert resumed["resume"] == "allow"
    train(load_run_config([*TINY, "logging.wandb=offline", f"run.dir={tmp_path}", "run.name=other"]))
    assert fake.inits[-1]["id"] != first["id"]  # another run is another wandb run
