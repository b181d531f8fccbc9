"""A comparison's verdict reaches wandb as one summary run grouped with its runs, only when its
runs log to wandb, offline unless they are online, never prompting; each look updates the same run."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

from omegaconf import OmegaConf

from dormouse.ab.reporting.results import ComparisonResults
from dormouse.ab.reporting.wandb_summary import COLUMNS, log_verdict, verdict_data

PUBLISHED = Path(__file__).resolve().parents[2] / "docs" / "results" / "residual_cpu2"


class FakeWandb(types.SimpleNamespace):
    """Stands in for the wandb module: records init's arguments, what each run logged and its summary."""

    def __init__(self) -> None:
        super().__init__(inits=[], logged=[], summary={}, finished=0)

    def init(self, **kwargs):  # noqa: D401 - the wandb API
        self.inits.append(kwargs)
        return types.SimpleNamespace(log=self.logged.append, summary=types.SimpleNamespace(update=self.summary.update),
                                     finish=lambda: setattr(self, "finished", self.finished + 1))

    @staticmethod
    def Settings(**kwargs):  # noqa: N802 - the wandb API
        return kwargs

    @staticmethod
    def Table(columns, data):  # noqa: N802 - the wandb API
        return {"columns": columns, "data": data}

    @staticmethod
    def Image(path):  # noqa: N802 - the wandb API
        return ("image", path)


def _logging(mode: str):
    return OmegaConf.create({"wandb": mode, "wandb_entity": "team", "wandb_project": "loops", "wandb_tags": ["cpu"]})


def test_the_verdict_table_is_a_summary_run_grouped_with_the_comparisons_runs(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WANDB_DIR", raising=False)
    comp = tmp_path / "residual_cpu2"
    shutil.copytree(PUBLISHED, comp, ignore=shutil.ignore_patterns("launch", "carry"))
    results = ComparisonResults.from_json(json.loads((comp / "results.json").read_text()))
    fake = FakeWandb()
    assert log_verdict(_logging("offline"), comp, results, wandb=fake)
    (init,) = fake.inits
    assert init["group"] == "residual_cpu2" and init["job_type"] == "verdict" and init["mode"] == "offline"
    assert init["name"] == "residual_cpu2-verdict" and init["dir"] == str(comp)
    assert init["settings"] == {"silent": True} and init["tags"] == ["cpu"]
    (logged,) = fake.logged
    table = logged["verdicts"]
    assert table["columns"] == COLUMNS and [row[0] for row in table["data"]] == list(results.arms)
    by_arm = {row[0]: dict(zip(COLUMNS, row)) for row in table["data"]}
    for name, arm in results.arms.items():
        assert by_arm[name]["verdict"] == arm.outcome.verdict == fake.summary[f"{name}/verdict"]
        assert by_arm[name]["runs"] == len(arm.final_bpb) and by_arm[name]["bpb_mean"] == arm.bpb_mean
    assert logged["plots/forest"] == ("image", str(comp / "forest.png"))
    assert fake.finished == 1
    log_verdict(_logging("offline"), comp, results, wandb=fake)  # the next look: the same summary run
    assert fake.inits[1]["id"] == init["id"] and fake.inits[1]["resume"] == "allow"


def test_nothing_reaches_wandb_when_the_comparisons_runs_do_not_log_to_it(tmp_path: Path):
    fake = FakeWandb()
    results = ComparisonResults.from_json(json.loads((PUBLISHED / "results.json").read_text()))
    assert not log_verdict(_logging("disabled"), tmp_path, results, wandb=fake)
    assert fake.inits == [] and not any(tmp_path.iterdir())
    assert len(verdict_data(results)) == len(results.arms)
