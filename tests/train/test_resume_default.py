"""A resume's default is the run's saved config (nanoGPT's ``init_from='resume'``): ``dormouse train
run.name=X train.resume=auto`` continues X with the config it was saved with; an override given explicitly
still wins, and one that changes what the run computes is refused naming every differing key, old -> new."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormouse.config.schema import ConfigError
from dormouse.errors import TrainError
from dormouse.train.loop import train
from dormouse.train.run_config import load_run_config
from dormouse.train.start import prepare_run_dir

SAVED = ["preset=tiny", "train.steps=16", "train.warmup=8", "train.eval_every=6", "data.eval_bytes=1024",
         "train.ckpt_every=4", "logging.progress=off"]


def _interrupted(tmp_path: Path) -> None:
    train(load_run_config([*SAVED, f"run.dir={tmp_path}", "run.name=r"]), stop_at_step=5)


def test_a_resume_without_other_overrides_continues_the_run_with_its_saved_config(tmp_path: Path) -> None:
    _interrupted(tmp_path)
    cfg = load_run_config([f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"])
    assert (cfg.model.d_model, cfg.train.steps, cfg.train.warmup, cfg.data.eval_bytes) == (32, 16, 8, 1024)
    resumed = train(cfg)
    assert len(resumed.losses) == 11 and resumed.metrics[-1]["step"] == 16


def test_an_explicit_override_on_a_resume_wins_over_the_saved_config(tmp_path: Path) -> None:
    _interrupted(tmp_path)
    cfg = load_run_config([f"run.dir={tmp_path}", "run.name=r", "train.resume=auto", "train.eval_every=5"])
    assert cfg.train.eval_every == 5 and cfg.train.steps == 16  # given wins; the rest is the saved config's
    # retyping every override gives the same config
    again = load_run_config([*SAVED, f"run.dir={tmp_path}", "run.name=r", "train.resume=auto", "train.eval_every=5"])
    assert again == cfg


def test_a_refused_resume_names_every_differing_key_with_both_values(tmp_path: Path) -> None:
    _interrupted(tmp_path)
    with pytest.raises(TrainError) as err:
        train(load_run_config([f"run.dir={tmp_path}", "run.name=r", "train.resume=auto", "model.d_model=64",
                           "model.n_heads=4", "train.beta2=0.9"]))
    msg = str(err.value)
    for words in ("model.d_model=32 -> 64", "model.n_heads=2 -> 4", "train.beta2=0.95 -> 0.9",
                  f"dormouse train run.dir={tmp_path} run.name=r train.resume=auto"):
        assert words in msg, msg


def test_a_preset_given_on_a_resume_counts_as_explicit(tmp_path: Path) -> None:
    _interrupted(tmp_path)
    cfg = load_run_config([f"run.dir={tmp_path}", "run.name=r", "train.resume=auto", "preset=9m"])
    assert cfg.model.d_model == 768  # the keys the preset sets were given: they win, and the resume is refused
    with pytest.raises(TrainError, match="model.d_model=32 -> 768"):
        prepare_run_dir(cfg, dry_run=True)


def test_a_saved_key_this_version_does_not_know_is_refused_naming_it(tmp_path: Path) -> None:
    _interrupted(tmp_path)
    saved = tmp_path / "r" / "config.yaml"
    saved.write_text(saved.read_text().replace("model:\n", "model:\n  retired_knob: 3\n", 1))
    with pytest.raises(ConfigError, match="retired_knob=3"):
        load_run_config([f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"])


def test_a_fresh_start_with_resume_auto_uses_the_command_line_only(tmp_path: Path) -> None:
    cfg = load_run_config(["preset=tiny", f"run.dir={tmp_path}", "run.name=new", "train.resume=auto"])
    assert cfg == load_run_config(["preset=tiny", f"run.dir={tmp_path}", "run.name=new", "train.resume=auto"])
    assert cfg.model.d_model == 32
