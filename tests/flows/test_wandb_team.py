"""wandb as teams use it: entity, project, group and tags reach ``wandb.init``; nothing prompts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.config.schema import load_config
from dormouse.train.loop import train
from tests.train.test_train_probes import TINY, FakeWandb


def test_entity_project_group_and_tags_reach_wandb_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    train(load_config([*TINY, "train.steps=2", "logging.wandb=offline", f"run.dir={tmp_path}", "run.name=t",
                       "logging.wandb_entity=my-team", "logging.wandb_project=loops",
                       "logging.wandb_group=lr-study", "logging.wandb_tags=[baseline,'lr 3e-3']"]))
    (init,) = fake.inits
    assert init["entity"] == "my-team" and init["project"] == "loops" and init["group"] == "lr-study"
    assert init["tags"] == ["baseline", "lr 3e-3"] and init["mode"] == "offline"
    assert init["settings"] == {"silent": True}  # no banner, no prompt


def test_wandb_defaults_are_off_with_no_entity_and_no_tags():
    cfg = load_config([])
    assert cfg.logging.wandb == "disabled"
    assert cfg.logging.wandb_entity is None and list(cfg.logging.wandb_tags) == []


def test_a_too_long_wandb_tag_is_refused_before_any_work(tmp_path: Path):
    result = CliRunner().invoke(app, ["validate", f"run.dir={tmp_path}", f"logging.wandb_tags=[ok,{'x' * 65}]"])
    assert result.exit_code == 2 and "logging.wandb_tags" in result.output and "64 characters" in result.output
    assert not any(tmp_path.iterdir())


def test_online_without_credentials_is_refused_instead_of_prompting(tmp_path: Path, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    result = CliRunner().invoke(app, ["train", *TINY, "logging.wandb=online", f"run.dir={tmp_path}", "run.name=o"])
    assert result.exit_code != 0 and "needs credentials" in result.output and fake.inits == []


def test_wandb_writes_under_wandb_dir_when_the_user_set_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    train(load_config([*TINY, "train.steps=2", "logging.wandb=offline", f"run.dir={tmp_path}", "run.name=a"]))
    monkeypatch.delenv("WANDB_DIR")
    train(load_config([*TINY, "train.steps=2", "logging.wandb=offline", f"run.dir={tmp_path}", "run.name=b"]))
    assert [init["dir"] for init in fake.inits] == [str(tmp_path / "elsewhere"), str(tmp_path / "b")]


def test_wandb_gets_the_training_loss_every_step_and_the_plots_as_images(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    result = train(load_config([*TINY, "logging.wandb=offline", f"run.dir={tmp_path}", "run.name=w"]))
    losses = [(step, data["train/loss"]) for step, data in fake.logged if "train/loss" in data]
    assert losses == list(enumerate(result.losses, start=1))  # steps 1..4, between and at the evals
    assert [step for step, data in fake.logged if "bpb" in data] == [2, 4]
    (plots,) = [data for _, data in fake.logged if any(k.startswith("plots/") for k in data)]
    assert plots == {"plots/rezero_alpha": ("image", str(tmp_path / "w" / "rezero_alpha.png"))}
