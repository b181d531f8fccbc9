"""One process at a time writes a run: a second `train` on a run in use is refused before it touches a file
(whatever train.overwrite says), a dead holder's lock is taken over with a message, and a refused start into
a new directory leaves nothing behind. Holders are real processes (the kernel's flock is per process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import dormouse.train.loop as train_module
from dormouse.cli.app import app
from dormouse.config.schema import load_config
from dormouse.run.files import RunFiles
from dormouse.run.lock import is_locked, read_holder
from dormouse.train.loop import train

runner = CliRunner()
TINY = ["preset=tiny", "train.steps=4", "train.eval_every=4", "data.eval_bytes=256", "logging.progress=off"]

_HOLD = """
import sys, time
from pathlib import Path
from dormouse.train.start import run_lock
from dormouse.run.files import RunFiles
lock = run_lock(RunFiles(Path(sys.argv[1]))).acquire()
print("held", flush=True)
time.sleep(120)
"""


def _holder(run_dir: Path) -> subprocess.Popen[str]:
    """Another process holding the run's lock, as a running `dormouse train` does."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=30)


def test_a_second_train_on_a_run_in_use_is_refused_naming_the_holder_and_touches_nothing(tmp_path: Path):
    run_dir = tmp_path / "dup3"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("the running run's config\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 50}\n')
    proc = _holder(run_dir)
    try:
        result = runner.invoke(app, ["train", *TINY, f"run.dir={tmp_path}", "run.name=dup3",
                                     "train.overwrite=true"])
        assert result.exit_code == 2, result.output
        message = " ".join(result.output.split())
        assert f"pid {proc.pid}" in message and "is in use by another process" in message
        assert "wait for it to finish" in message and "choose another run.name" in message
        # The refusal does not send the user to the destructive option first (nor at all).
        assert "overwrite" not in message
        assert (run_dir / "config.yaml").read_text() == "the running run's config\n"
        assert (run_dir / "metrics.jsonl").read_text() == '{"step": 50}\n'
        assert not (run_dir / "checkpoints").exists()
        dry = runner.invoke(app, ["validate", *TINY, f"run.dir={tmp_path}", "run.name=dup3",
                                  "train.overwrite=true"])
        assert dry.exit_code == 2 and f"pid {proc.pid}" in " ".join(dry.output.split()), dry.output
    finally:
        _stop(proc)


def test_train_holds_the_lock_while_it_runs_and_releases_it_when_done(tmp_path: Path, monkeypatch):
    files = RunFiles(tmp_path / "r")
    seen: list[bool] = []
    real = train_module.eval_and_log

    def spy(run, loop):  # type: ignore[no-untyped-def]
        seen.append(is_locked(files.lock))
        return real(run, loop)

    monkeypatch.setattr(train_module, "eval_and_log", spy)
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"]))
    assert seen == [True]
    assert not is_locked(files.lock) and read_holder(files.lock) is None  # released: neither held nor stale


def test_a_stale_run_lock_from_a_dead_train_is_taken_over_with_a_message(tmp_path: Path, capfd):
    run_dir = tmp_path / "r"
    proc = _holder(run_dir)
    os.kill(proc.pid, signal.SIGKILL)  # dies without releasing: its record stays in the file
    proc.wait(timeout=30)
    assert read_holder(RunFiles(run_dir).lock)["pid"] == proc.pid
    result = train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"]))
    assert result.metrics and result.metrics[-1]["step"] == 4
    err = capfd.readouterr().err
    assert f"took over a stale lock on run {run_dir}" in err and f"pid {proc.pid}" in err


def test_overwrite_replaces_the_run_but_keeps_the_lock_it_holds(tmp_path: Path):
    cfg = load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"])
    train(cfg)
    (tmp_path / "r" / "stray.txt").write_text("from the first run\n")
    again = train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r", "train.overwrite=true"]))
    assert again.metrics[-1]["step"] == 4
    assert not (tmp_path / "r" / "stray.txt").exists()
    assert RunFiles(tmp_path / "r").lock.exists() and not is_locked(RunFiles(tmp_path / "r").lock)


def test_a_start_refused_in_a_new_directory_leaves_nothing_behind(tmp_path: Path):
    # The config passes (the file exists); the run directory refuses it (not a checkpoint), under the lock.
    (tmp_path / "notes.pt").write_text("not a checkpoint\n")
    result = runner.invoke(app, ["train", *TINY, f"run.dir={tmp_path}", "run.name=new",
                                 f"train.resume={tmp_path / 'notes.pt'}"])
    assert result.exit_code == 2, result.output
    assert "is unreadable" in result.output
    assert "weights_only" not in result.output  # torch's page of advice is cut to its first sentence
    assert not (tmp_path / "new").exists()
