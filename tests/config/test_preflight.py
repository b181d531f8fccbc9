"""`dormouse validate` is a dry run: it refuses (exit 2) what `train` would refuse before step 0, and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.config.schema import load_config
from dormouse.train.loop import train

runner = CliRunner()
TINY = ["preset=tiny", "train.steps=4", "train.eval_every=4", "data.eval_bytes=256", "logging.progress=off"]


def validate(*args: str):
    return runner.invoke(app, ["validate", *TINY, *args])


def one_line(result) -> str:
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    train(load_config([*TINY, f"run.dir={root}", "run.name=done"]))
    return root


def test_a_runnable_config_prints_valid_yaml_and_what_each_check_found(tmp_path: Path):
    result = validate(f"run.dir={tmp_path}", "run.name=new")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["model"]["d_model"] == 32  # the findings are YAML comments
    assert "# data: embedded:shakespeare" in result.stdout and "(new)" in result.stdout
    assert not (tmp_path / "new").exists(), "validate must create nothing"


def test_corpus_too_short_for_one_window_is_refused(tmp_path: Path):
    short = tmp_path / "short.txt"
    short.write_text("too short\n")
    result = validate(f"data.path={short}", f"run.dir={tmp_path}")
    assert result.exit_code == 2
    assert "holds 10 bytes: too short for data.seq_len=32" in one_line(result)


def test_unreachable_uncached_dataset_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    result = validate("data.hf_dataset=nobody/no-such-dataset", f"run.dir={tmp_path}")
    assert result.exit_code == 2
    out = one_line(result)
    assert "data.hf_dataset='nobody/no-such-dataset'" in out and "not in the local cache" in out


def test_existing_run_without_resume_is_refused_as_train_refuses_it(finished_run: Path):
    result = validate(f"run.dir={finished_run}", "run.name=done")
    assert result.exit_code == 2
    assert "already holds a run; pass train.resume=auto" in one_line(result)


def test_existing_run_with_resume_auto_names_the_checkpoint(finished_run: Path):
    # (same budget: a longer one would bend the finished cosine, which the resume-schedule rule refuses)
    result = validate(f"run.dir={finished_run}", "run.name=done", "train.resume=auto")
    assert result.exit_code == 0, result.output
    assert "resume at step 4 from" in result.stdout and "step_00000004.pt" in result.stdout


def test_resume_with_a_changed_config_is_refused(finished_run: Path):
    result = validate(f"run.dir={finished_run}", "run.name=done", "train.resume=auto", "train.lr=0.01")
    # train.lr is a schedule key: refused by the resume-schedule rule, which names the key and the first step
    # whose learning rate would differ (dormouse/train/schedule.py)
    assert result.exit_code == 2 and "train.lr=0.003 -> 0.01" in one_line(result), one_line(result)
    assert "neither schedule" in one_line(result)


def test_overwrite_is_reported_and_nothing_is_removed(finished_run: Path):
    result = validate(f"run.dir={finished_run}", "run.name=done", "train.overwrite=true")
    assert result.exit_code == 0, result.output
    assert "train.overwrite=true replaces it" in result.stdout
    assert (finished_run / "done" / "config.yaml").exists()


def test_run_dir_under_a_file_is_refused(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = validate(f"run.dir={blocker / 'runs'}", "run.name=a")
    assert result.exit_code == 2 and f"{blocker} is not a folder" in one_line(result)


def test_wandb_online_without_credentials_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = validate("logging.wandb=online", f"run.dir={tmp_path}")
    assert result.exit_code == 2 and "logging.wandb=online needs credentials" in one_line(result)


def test_warmup_that_takes_every_step_is_a_warning_in_validate_and_train_not_a_refusal(tmp_path: Path, capfd):
    result = validate(f"run.dir={tmp_path}", "run.name=w", "train.warmup=4")
    assert result.exit_code == 0, result.output
    assert "warning: train.warmup=4 >= train.steps=4: the whole run is warmup" in one_line(result)
    assert "warning" not in one_line(validate(f"run.dir={tmp_path}", "run.name=w", "train.warmup=3"))
    capfd.readouterr()
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=w", "train.warmup=9"]))
    assert "warning: train.warmup=9 >= train.steps=4" in capfd.readouterr().err


# What the machine decides: checked by the preflight (check_environment), not by composing the config.
ENVIRONMENT_REFUSALS = {
    "data_missing": (["data.path=/no/such/corpus.txt"],
                     "data.path='/no/such/corpus.txt' is invalid: no such file or folder; give an existing file or "
                     "folder of text"),
    "checkpoint_missing": (["train.resume=/no/such/step_00000004.pt"],
                           "train.resume='/no/such/step_00000004.pt' is invalid: never, auto, or the path of an "
                           "existing checkpoint"),
    "kernel_without_a_fused_read": (["model.kernel=triton"],
                                    "model.kernel=triton but model.use_attnres=false: the fused kernel is the read "
                                    "of attnres; set model.use_attnres=true or leave model.kernel=auto"),
}


@pytest.mark.parametrize("refusal", sorted(ENVIRONMENT_REFUSALS))
def test_what_the_machine_refuses_validate_and_train_refuse_alike_creating_nothing(tmp_path: Path, refusal: str):
    overrides, line = ENVIRONMENT_REFUSALS[refusal]
    args = [*TINY, f"run.dir={tmp_path / 'runs'}", "run.name=r", *overrides]
    checked = runner.invoke(app, ["validate", *args])
    assert checked.exit_code == 2 and one_line(checked) == f"error: {line}", checked.output
    trained = runner.invoke(app, ["train", *args])
    assert trained.exit_code == 2 and one_line(trained) == f"error: {line}", trained.output
    assert not (tmp_path / "runs").exists()


def test_the_kernel_is_decided_once_and_the_run_reads_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture):
    """One call of the arm's choose_kernel per run (the preflight's), and the model reads with its answer; an
    ``auto`` choice is said with its reason."""
    from dormouse.arms.attnres import AttnRes

    calls: list[str] = []

    def counted(cls, model_cfg, device):
        calls.append(str(device))
        return ("torch", "the reason the test gave")

    monkeypatch.setattr(AttnRes, "choose_kernel", classmethod(counted))
    result = train(load_config([*TINY, "model.use_attnres=true", f"run.dir={tmp_path}", "run.name=k"]))
    assert calls == ["cpu"] and result.kernel == "torch"
    assert "kernel: model.kernel=auto -> torch (the reason the test gave)" in capsys.readouterr().out
