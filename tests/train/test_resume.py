"""Runs that survive: checkpoints, bit-identical resume, interrupts, corrupt checkpoints, torchrun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dormouse.config.schema import load_config
from dormouse.run.checkpoint import CheckpointError, atomic_save, list_checkpoints, load_checkpoint
from dormouse.train.loop import TrainError, TrainResult, train

TINY = ["preset=tiny", "train.steps=16", "train.eval_every=6", "data.eval_bytes=1024", "train.ckpt_every=4"]
REPO = Path(__file__).resolve().parents[2]


def masked(lines: list[str]) -> list[str]:
    """Eval lines without tok/s: wall-clock throughput is the one field that cannot repeat."""
    return [" ".join(p for p in ln.split() if not p.startswith("tok/s=")) for ln in lines]


def evals(run_dir: Path) -> list[str]:
    return [ln for ln in (run_dir / "train.log").read_text().splitlines() if ln.startswith("eval ")]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[list[str]], tuple[TrainResult, Path]]:
    """The TINY run of an arm trained to its end without a stop, once per module: ``(result, run directory)``.
    Read only: a test that resumes or rewrites a run trains its own."""
    done: dict[tuple[str, ...], tuple[TrainResult, Path]] = {}

    def get(arm: list[str]) -> tuple[TrainResult, Path]:
        if tuple(arm) not in done:
            root = tmp_path_factory.mktemp("full")
            done[tuple(arm)] = train(load_config([*TINY, *arm, f"run.dir={root}", "run.name=full"])), root / "full"
        return done[tuple(arm)]

    return get


@pytest.mark.parametrize("arm", [[], ["model.use_attnres=true", "model.random_depth=true"]])
def test_resumed_run_is_bit_identical_to_an_uninterrupted_one(tmp_path: Path, arm: list[str], uninterrupted):
    full, full_dir = uninterrupted(arm)
    # Stop at step 9: mid eval-window (6..12) and between checkpoints (8, 12), the hardest place.
    first = train(load_config([*TINY, *arm, f"run.dir={tmp_path}", "run.name=split"]), stop_at_step=9)
    assert len(first.losses) == 9
    second = train(load_config([*TINY, *arm, f"run.dir={tmp_path}", "run.name=split", "train.resume=auto"]))
    assert first.losses + second.losses == full.losses  # exact: same floats at every step
    assert masked(evals(tmp_path / "split")) == masked(evals(full_dir))
    rows_full = [json.loads(r) for r in (full_dir / "metrics.jsonl").read_text().splitlines()]
    rows_split = [json.loads(r) for r in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["bpb"] for r in rows_full] == [r["bpb"] for r in rows_split]
    # The history comes back from metrics.jsonl (checkpoints do not carry it): the resumed run's result holds
    # every eval, the ones before the resume included.
    assert [(r["step"], r["bpb"]) for r in second.metrics] == [(r["step"], r["bpb"]) for r in full.metrics]


def test_a_checkpoint_keeps_the_loop_state_under_one_key_and_no_metrics_history(uninterrupted):
    state = load_checkpoint(list_checkpoints(uninterrupted([])[1] / "checkpoints")[-1])
    assert set(state) == {"model", "optimizer", "config", "loop"}
    assert set(state["loop"]) == {"step", "tokens", "skipped", "window", "probes", "rng_cpu", "last_eval"}
    assert state["loop"]["step"] == 16


def test_a_checkpoint_written_before_the_loop_key_still_resumes_bit_identically(tmp_path: Path, uninterrupted):
    """The layout before: the loop's keys at the top level and every metrics row so far. It loads; the old
    rows are ignored (metrics.jsonl holds them), and the run continues exactly."""
    full, full_dir = uninterrupted([])
    first = train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=old"]), stop_at_step=9)
    newest = list_checkpoints(tmp_path / "old" / "checkpoints")[-1]
    state = load_checkpoint(newest)
    old_layout = {k: v for k, v in state.items() if k != "loop"}
    old_layout.update({**state["loop"], "metrics": [{"step": 6, "bpb": 99.0}]})
    atomic_save(old_layout, newest)
    second = train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=old", "train.resume=auto"]))
    assert first.losses + second.losses == full.losses
    assert masked(evals(tmp_path / "old")) == masked(evals(full_dir))
    assert [r["bpb"] for r in second.metrics] == [r["bpb"] for r in full.metrics]  # not the planted 99.0


def test_only_the_last_k_checkpoints_are_kept(tmp_path: Path):
    train(load_config([*TINY, "train.keep_ckpts=2", f"run.dir={tmp_path}", "run.name=r"]))
    names = [p.name for p in list_checkpoints(tmp_path / "r" / "checkpoints")]
    assert names == ["step_00000012.pt", "step_00000016.pt"]


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, capsys):
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r"]), stop_at_step=9)
    ckpts = list_checkpoints(tmp_path / "r" / "checkpoints")
    newest = ckpts[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # truncated, as after a crash mid-copy
    with pytest.raises(CheckpointError, match=str(newest)):
        load_checkpoint(newest)
    result = train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"]))
    err = capsys.readouterr().err
    assert str(newest) in err and "previous checkpoint" in err
    assert len(result.losses) == 16 - int(ckpts[-2].stem.split("_")[1])


def test_resume_with_a_different_config_names_the_keys(tmp_path: Path):
    train(load_config([*TINY, "train.warmup=8", f"run.dir={tmp_path}", "run.name=r"]), stop_at_step=5)
    with pytest.raises(TrainError, match="model.d_model.*model.n_heads"):
        train(load_config([*TINY, "train.warmup=8", "model.d_model=64", "model.n_heads=4", f"run.dir={tmp_path}",
                           "run.name=r", "train.resume=auto"]))
    # the step budget may change while every step taken keeps its learning rate (here: still in warmup);
    # tests/train/test_resume_schedule.py pins the rule
    more = train(load_config([*TINY, "train.warmup=8", "train.steps=20", f"run.dir={tmp_path}", "run.name=r",
                              "train.resume=auto"]))
    assert more.metrics[-1]["step"] == 20


def test_failed_write_leaves_the_previous_checkpoint_intact(tmp_path: Path, monkeypatch):
    path = tmp_path / "step_00000001.pt"
    atomic_save({"a": torch.ones(2)}, path)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match="No space left on device"):
        atomic_save({"a": torch.zeros(2)}, path)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["a"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "a temporary file was left behind"


def test_nonfinite_loss_stops_naming_the_step_and_checkpoint(tmp_path: Path):
    with pytest.raises(TrainError, match=r"non-finite (loss|gradient norm) .* at step \d+") as stopped:
        train(load_config([*TINY, "train.lr=1e6", "train.warmup=0", "train.grad_clip=0",
                           f"run.dir={tmp_path}", "run.name=r"]))
    assert stopped.value.diverged  # the fact a comparison's tune stage records, read back by name


def test_nonfinite_skip_counts_skips_on_the_eval_line(tmp_path: Path):
    result = train(load_config([*TINY, "train.lr=1e6", "train.warmup=0", "train.grad_clip=0",
                                "train.nonfinite=skip", f"run.dir={tmp_path}", "run.name=r"]))
    assert result.metrics[-1]["skipped"] > 0
    assert f"skipped={result.metrics[-1]['skipped']}" in evals(tmp_path / "r")[-1]


def _cli(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "dormouse", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, **kw)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGUSR2, 140)])
def test_signal_finishes_the_step_checkpoints_and_says_how_to_resume(tmp_path: Path, sig, code):
    args = [*TINY, "train.steps=100000", "train.eval_every=100000", "train.ckpt_every=0",
            f"run.dir={tmp_path}", "run.name=r"]
    proc = _cli(args)
    deadline = time.time() + 120
    assert proc.stdout is not None
    while time.time() < deadline:  # training is under way once its first step has finished
        line = proc.stdout.readline()
        if line.startswith("first step:") or not line:
            break
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == code, out
    assert "train.resume=auto" in out
    ckpts = list_checkpoints(tmp_path / "r" / "checkpoints")
    assert ckpts, "no checkpoint written on the signal"
    stopped_at = load_checkpoint(ckpts[-1])["loop"]["step"]
    assert stopped_at > 0


def test_sigkill_loses_at_most_ckpt_every_steps(tmp_path: Path):
    args = [*TINY, "train.steps=100000", "train.eval_every=100000", "train.ckpt_every=3",
            f"run.dir={tmp_path}", "run.name=r"]
    proc = _cli(args)
    ckpt_dir = tmp_path / "r" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and len(list_checkpoints(ckpt_dir)) < 2:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    newest = load_checkpoint(list_checkpoints(ckpt_dir)[-1])["loop"]["step"]
    # No temporary file is mistaken for a checkpoint, and the newest one is whole.
    assert newest % 3 == 0 and newest >= 3
    resumed = train(load_config([*args[:-2], f"run.dir={tmp_path}", "run.name=r", "train.resume=auto"]),
                    stop_at_step=newest + 2)
    assert len(resumed.losses) == 2, "resume restarted from the newest checkpoint"


def test_a_checkpoint_written_after_resuming_behind_a_newer_file_is_kept(tmp_path: Path):
    """Resuming from step 8 past a corrupt step 12 must not let the corrupt file outrank new checkpoints."""
    from dormouse.run.checkpoint import save_checkpoint

    ckpt = tmp_path / "checkpoints"
    for step in (4, 8, 12):
        save_checkpoint({"step": step}, ckpt, step, keep=3)
    save_checkpoint({"step": 9}, ckpt, 9, keep=1)
    assert [p.name for p in list_checkpoints(ckpt)] == ["step_00000009.pt"]


def test_resuming_a_finished_run_writes_nothing(tmp_path: Path):
    args = [*TINY, f"run.dir={tmp_path}", "run.name=r"]
    train(load_config(args))
    log_before = (tmp_path / "r" / "train.log").read_text()
    again = train(load_config([*args, "train.resume=auto"]))
    assert again.losses == [] and (tmp_path / "r" / "train.log").read_text() == log_before


def test_loop_state_round_trips_through_a_checkpoint():
    """Every field of the loop state (and the open window's probe counters) comes back from a saved
    checkpoint, into the counters of the model that resumes; a rank other than 0 starts its window's per-rank
    sums at zero (rank 0 carries them)."""
    import io
    from dataclasses import fields

    from dormouse.arms.probes import ProbeCounters
    from dormouse.train.dist_info import DistInfo
    from dormouse.train.state import LoopState

    counters = ProbeCounters()
    counters.count_ran("gr", 3)
    counters.count_asked("gr", 4)
    loop = LoopState(step=7, tokens=896, skipped=1)
    loop.window.add_update(2.5, 3)
    loop.window.tokens, loop.window.time = 128, 0.25
    state = loop.state_dict(loop.window.summed(counters, DistInfo(), torch.device("cpu")))
    assert {f.name for f in fields(LoopState)} <= set(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    back, resumed = LoopState(), ProbeCounters()
    back.load_state_dict(saved, resumed, carries_sums=True)
    assert back == LoopState(step=7, tokens=896, skipped=1,
                             window=type(loop.window)(loss_sum=2.5, steps=1, tokens=128, depth_sum=3, time=0.25))
    assert (resumed.ran["gr"], resumed.asked["gr"]) == (3, 4)
    other, other_counters = LoopState(), ProbeCounters()
    other_counters.count_ran("gr", 5)
    other.load_state_dict(saved, other_counters, carries_sums=False)
    assert other.window.loss_sum == 0.0 and other.window.steps == 1 and other_counters.snapshot()["gr_ran"] == 0
