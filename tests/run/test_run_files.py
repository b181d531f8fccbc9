"""A run's files survive what a disk does to them.

* a torn last line of an append-only file (a crash mid-write) is cut before a resume appends, recorded in
  train.log, and reported by ``dormouse logs --check`` until then;
* a resume that replays steps leaves each step once in metrics.jsonl (what a JSON-lines reader gets);
* a full disk gives one line and exit 1, true about what is left, and a start that failed before its first
  record leaves nothing that blocks the same command;
* whatever ``validate`` refuses (a config that cannot fit in memory among it), ``train`` refuses too, before
  it creates anything.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

import dormouse.run.checkpoint as checkpoint_module
import dormouse.train.loop as train_module
from dormouse.cli.app import app
from dormouse.config.schema import load_config
from dormouse.run.checkpoint import CheckpointError, atomic_save, list_checkpoints
from dormouse.run.checks import checked_run
from dormouse.train.loop import train
from dormouse.train.metrics import settle_metrics

runner = CliRunner()
# Evals at 6, 12 and 16; checkpoints every 4 steps (the newest two kept).
TINY = ["preset=tiny", "train.steps=16", "train.eval_every=6", "data.eval_bytes=1024", "train.ckpt_every=4",
        "logging.progress=off"]
NO_SPACE = "No space left on device"


def metrics_steps(run_dir: Path) -> list[int]:
    """The steps of metrics.jsonl as a plain JSON-lines reader sees them (every line must be JSON)."""
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def kinds(run_dir: Path) -> list[str]:
    return [f.kind for f in checked_run(run_dir).findings]


def one_line(output: str) -> str:
    return " ".join(output.split())


# --- item 7: torn lines and replayed steps ---------------------------------------------------------------

def test_a_torn_metrics_row_is_reported_then_cut_on_resume_and_the_first_new_row_survives(tmp_path: Path):
    run_dir = tmp_path / "r"
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"]), stop_at_step=9)
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 12, "loss": 1.2')  # a crash mid-append: no newline
    with (run_dir / "train.log").open("a") as f:
        f.write("eval step=12 tok")
    assert kinds(run_dir).count("torn-line") == 2  # train.log's and metrics.jsonl's, before any repair
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"]))
    assert metrics_steps(run_dir) == [6, 12, 16]  # the first new row (12) is not glued onto the torn one
    log = (run_dir / "train.log").read_text().splitlines()
    assert "repair file=metrics.jsonl torn_bytes=24 dropped_rows=0" in log
    assert "repair file=train.log torn_bytes=16 dropped_rows=0" in log
    assert "torn-line" not in kinds(run_dir) and "malformed" not in kinds(run_dir)


def test_a_finished_run_whose_final_row_was_torn_gets_it_back_byte_for_byte_on_resume(tmp_path: Path):
    """Power lost after the final checkpoint: the final metrics row torn, the done line with it. The resume
    re-evaluates the final checkpoint and writes the row again, the same bytes, and the run reads finished."""
    run_dir, metrics, log = tmp_path / "r", tmp_path / "r" / "metrics.jsonl", tmp_path / "r" / "train.log"
    assert runner.invoke(app, ["train", *TINY, f"run.dir={tmp_path}", "run.name=r"]).exit_code == 0
    final = metrics.read_text().splitlines(keepends=True)[-1]
    metrics.write_bytes(metrics.read_bytes()[:-(len(final) // 2)])
    log.write_bytes(log.read_bytes()[:-5])
    result = runner.invoke(app, ["train", f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"])
    assert result.exit_code == 0, result.output
    assert metrics.read_text().splitlines(keepends=True)[-1] == final and metrics_steps(run_dir) == [6, 12, 16]
    assert f"val bpb={json.loads(final)['bpb']:.4f}" in result.output
    checked = runner.invoke(app, ["logs", "--check", str(run_dir)])
    assert checked.exit_code == 0, checked.output


def test_a_lost_final_row_whose_checkpoint_cannot_rebuild_it_is_refused_in_one_line(tmp_path: Path):
    """A final checkpoint without its eval's training-window fields cannot give the row back: one line, exit 2,
    nothing written."""
    run_dir, metrics = tmp_path / "r", tmp_path / "r" / "metrics.jsonl"
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"]))
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    state = torch.load(newest, weights_only=False)
    del state["loop"]["last_eval"]
    atomic_save(state, newest)
    metrics.write_bytes(metrics.read_bytes()[:-40])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != "run.lock"}
    result = runner.invoke(app, ["train", f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "cannot rebuild the final eval row of step 16" in one_line(result.output)
    assert before == {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != "run.lock"}


def test_a_fallback_resume_leaves_each_step_once_in_metrics_jsonl(tmp_path: Path):
    run_dir = tmp_path / "r"
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"]))
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # corrupt: the resume falls back to step 12 and replays 16
    result = train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"]))
    assert metrics_steps(run_dir) == [6, 12, 16]
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["time_s"] == result.metrics[-1]["time_s"]  # the replayed row, not the abandoned one
    assert "repair file=metrics.jsonl torn_bytes=0 dropped_rows=1" in (run_dir / "train.log").read_text()


def test_settle_metrics_keeps_each_step_up_to_the_resume_once_and_says_what_it_dropped(tmp_path: Path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "v": v} for s, v in ((6, "a"), (12, "a"), (6, "replay"), (12, "replay"), (18, "x"))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 2')
    report = settle_metrics(path, 12, write=False)
    assert report.rows == rows[2:4] and report.torn_bytes == 10 and report.dropped_rows == 3
    assert path.read_text().endswith('{"step": 2')  # write=False changes nothing
    settle_metrics(path, 12)
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows[2:4]


def test_logs_check_reports_a_torn_row_that_an_append_extended(tmp_path: Path):
    """A run resumed before the repair existed: the torn row and the row appended onto it are one line that
    no JSON reader parses; the check names it."""
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    (run_dir / "train.log").write_text("# dormouse: 0.1.0\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 6}\n{"step": 12, "lo{"step": 12, "loss": 1.0}\n')
    found = [f for f in checked_run(run_dir).findings if f.kind == "malformed"]
    assert [(f.path.name, f.line) for f in found] == [("metrics.jsonl", 2)]
    assert "lost to every reader" in found[0].message


# --- item 8: a full disk ---------------------------------------------------------------------------------

class _FullDisk:
    """A file whose writes keep ``room`` bytes, then fail with ENOSPC, as a full disk does."""

    def __init__(self, f: Any, path: Path, room: int) -> None:
        self.f, self.path, self.room = f, path, room

    def write(self, text: str) -> int:
        self.f.write(text[:self.room])
        self.f.flush()
        raise OSError(errno.ENOSPC, NO_SPACE, str(self.path))

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.f.close()


def fill_disk_at(monkeypatch: pytest.MonkeyPatch, name: str, room: int = 0) -> None:
    """Appends to the run file ``name`` fail with ENOSPC after ``room`` bytes; an atomic write of it fails."""
    real_open, real_atomic = Path.open, train_module.atomic_write_text

    def open_(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(self, mode, *args, **kwargs)
        return _FullDisk(f, self, room) if self.name == name and "a" in mode else f

    def atomic(path: Path, text: str) -> None:
        if path.name == name:
            raise OSError(errno.ENOSPC, NO_SPACE, str(path))
        real_atomic(path, text)

    monkeypatch.setattr(Path, "open", open_)
    monkeypatch.setattr(train_module, "atomic_write_text", atomic)


@pytest.mark.parametrize("name", ["config.yaml", "provenance.json", "train.log"])
def test_a_full_disk_at_the_first_writes_says_one_true_line_and_the_same_command_reruns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str):
    args = ["train", *TINY, "train.steps=4", "train.eval_every=4", f"run.dir={tmp_path}", "run.name=r"]
    fill_disk_at(monkeypatch, name)
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 3  # the line wraps
    said = one_line(result.output)
    assert f"error: cannot write {tmp_path / 'r' / name}: {NO_SPACE}" in said
    assert "no checkpoint was written yet and nothing of the run was kept" in said and "intact" not in said
    assert not (tmp_path / "r").exists()  # nothing half-made
    monkeypatch.undo()
    assert runner.invoke(app, args).exit_code == 0  # the same command, once there is space


def test_a_full_disk_mid_append_stops_in_one_line_and_the_resume_repairs_the_torn_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    run_dir = tmp_path / "r"
    fill_disk_at(monkeypatch, "metrics.jsonl", room=20)  # the first eval's row is torn after 20 bytes
    result = runner.invoke(app, ["train", *TINY, f"run.dir={tmp_path}", "run.name=r"])
    monkeypatch.undo()
    said = one_line(result.output)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert (f"the last checkpoint {run_dir / 'checkpoints' / 'step_00000004.pt'} is intact; free disk space and "
            f"continue with: dormouse train run.dir={tmp_path} run.name=r train.resume=auto") in said
    assert "torn-line" in kinds(run_dir)
    assert runner.invoke(app, ["train", f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"]).exit_code == 0
    assert metrics_steps(run_dir) == [6, 12, 16]
    assert "repair file=metrics.jsonl torn_bytes=20 dropped_rows=0" in (run_dir / "train.log").read_text()


def test_a_full_disk_at_a_checkpoint_names_the_one_left_and_the_resume_replays_each_step_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    run_dir = tmp_path / "r"
    real = checkpoint_module.atomic_save_bytes

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, NO_SPACE)  # as the open file's fsync raises it: no file name

    def full_at_step_8(data: bytes, path: Path) -> None:
        with pytest.MonkeyPatch.context() as full:
            if path.name == "step_00000008.pt":
                full.setattr(checkpoint_module.os, "fsync", no_space)
            real(data, path)

    monkeypatch.setattr(checkpoint_module, "atomic_save_bytes", full_at_step_8)
    result = runner.invoke(app, ["train", *TINY, f"run.dir={tmp_path}", "run.name=r"])
    monkeypatch.undo()
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert (f"error: cannot write {run_dir / 'checkpoints' / 'step_00000008.pt'}: {NO_SPACE}; the last checkpoint "
            f"{run_dir / 'checkpoints' / 'step_00000004.pt'} is intact; free disk space and continue with: "
            f"dormouse train run.dir={tmp_path} run.name=r train.resume=auto") in one_line(result.output)
    assert runner.invoke(app, ["train", f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"]).exit_code == 0
    assert metrics_steps(run_dir) == [6, 12, 16]  # step 6's row, abandoned by the resume at 4, once
    assert "repair file=metrics.jsonl torn_bytes=0 dropped_rows=1" in (run_dir / "train.log").read_text()


def test_a_failed_start_in_a_folder_without_a_run_keeps_what_was_there(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "ab_error.txt").write_text("an earlier attempt's traceback\n")
    fill_disk_at(monkeypatch, "train.log")
    result = runner.invoke(app, ["train", *TINY, f"run.dir={tmp_path}", "run.name=r"])
    assert result.exit_code == 1 and "nothing of the run was kept" in one_line(result.output)
    assert [p.name for p in run_dir.iterdir()] == ["ab_error.txt"]


def test_a_failed_checkpoint_write_says_whether_an_earlier_one_is_left(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, NO_SPACE)

    first = tmp_path / "step_00000004.pt"
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError) as nothing_before:
        atomic_save({"a": torch.ones(1)}, first)
    assert "intact" not in str(nothing_before.value) and "no checkpoint was written before it" in str(
        nothing_before.value)
    monkeypatch.undo()
    atomic_save({"a": torch.ones(1)}, first)
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=f"the previous checkpoint {first} is intact"):
        atomic_save({"a": torch.ones(1)}, tmp_path / "step_00000008.pt")


# --- item 10: what validate refuses, train refuses before creating anything --------------------------------

def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its content's hash (folders as "dir")."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    train(load_config([*TINY, "train.steps=4", "train.eval_every=4", f"run.dir={root}", "run.name=done"]))
    return root


REFUSALS = {
    "memory": (["model.d_model=100000", "model.n_heads=4", "run.name=big"], "one training step needs about"),
    "wandb_online": (["logging.wandb=online", "run.name=w"], "logging.wandb=online needs credentials"),
    "run_exists": (["run.name=done"], "already holds a run"),
    "resume_changed": (["run.name=done", "train.resume=auto", "model.d_model=64", "model.n_heads=4"],
                       "differs from the run's saved config"),
}


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_whatever_validate_refuses_train_refuses_creating_nothing(saved_run: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, refusal: str):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    overrides, words = REFUSALS[refusal]
    args = [*TINY, "train.steps=4", "train.eval_every=4", f"run.dir={saved_run}", *overrides]
    before = snapshot(saved_run)
    checked = runner.invoke(app, ["validate", *args])
    assert checked.exit_code == 2 and words in one_line(checked.output), checked.output
    trained = runner.invoke(app, ["train", *args])
    assert trained.exit_code == 2 and words in one_line(trained.output), trained.output
    assert "Traceback" not in trained.output
    assert snapshot(saved_run) == before  # nothing created, nothing changed


def test_a_model_that_cannot_fit_is_refused_in_one_line_before_allocation(tmp_path: Path):
    args = ["model.d_model=100000", "model.n_heads=4", f"run.dir={tmp_path}", "run.name=big"]
    result = runner.invoke(app, ["train", *args])
    said = one_line(result.output)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert said.startswith("error: model.d_model=100000") and "parameters" in said and "in all" in said
    assert not any(tmp_path.iterdir())
