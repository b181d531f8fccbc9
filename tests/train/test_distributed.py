"""torchrun + DDP on CPU (gloo): 2 processes with the same global batch match 1 process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# warmup 8: the 6 steps of the 2-rank run keep their learning rates when a resume extends it to 8 (one schedule)
ARGS = ["preset=tiny", "train.steps=6", "train.eval_every=1", "data.eval_bytes=1024", "train.batch_size=4",
        "train.warmup=8", "train.device=cpu"]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def torchrun(nproc: int, args: list[str]) -> subprocess.CompletedProcess:
    launcher = shutil.which("torchrun")
    prefix = [launcher] if launcher else [sys.executable, "-m", "torch.distributed.run"]
    return run([*prefix, "--standalone", f"--nproc_per_node={nproc}", "-m", "dormouse", "train", *args])


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A 6-step run of 2 gloo ranks under torchrun: its run directory and its stdout. Read, never written."""
    root = tmp_path_factory.mktemp("torchrun")
    out = torchrun(2, [*ARGS, f"run.dir={root}", "run.name=two"])
    return root / "two", out.stdout


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_with_the_same_global_batch(tmp_path: Path, two_ranks: tuple[Path, str]):
    run([sys.executable, "-m", "dormouse", "train", *ARGS, f"run.dir={tmp_path}", "run.name=one"])
    two_dir, stdout = two_ranks
    assert stdout.count("eval step=1 ") == 1, "only rank 0 prints"
    one, two = rows(tmp_path / "one"), rows(two_dir)
    assert [r["step"] for r in one] == [r["step"] for r in two] == list(range(1, 7))
    for a, b in zip(one, two):
        # Same global batch, same init: only the reduction order differs (mean of two half-batch means
        # and gloo's gradient all-reduce vs one mean), ~1e-7 relative per step in float32; Adam's
        # normalised updates carry that relative size over 6 steps: 1e-4 leaves two decades of margin.
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), (a["step"], a["loss"], b["loss"])
        assert b["bpb"] == pytest.approx(a["bpb"], rel=1e-4)
        # the probe counters are summed across ranks: 2 ranks each ran the 4 aggregations of the step
        assert b["rezero_ran"] == b["rezero_asked"] == 2 * a["rezero_asked"]
    assert two[-1]["tokens"] == one[-1]["tokens"]
    assert (two_dir / "train.log").read_text().count("eval ") == 6


def test_batch_that_does_not_divide_by_the_ranks_is_refused(tmp_path: Path):
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0"}
    out = subprocess.run([sys.executable, "-m", "dormouse", "train", *ARGS, f"run.dir={tmp_path}"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2  # refused by validation, before any work
    assert "train.batch_size=4 does not divide by the 3 ranks" in out.stdout + out.stderr


@pytest.mark.slow
def test_a_torchrun_run_resumes_from_its_last_checkpoint_or_an_explicit_one(tmp_path: Path,
                                                                            two_ranks: tuple[Path, str]):
    """The 6-step 2-rank run, resumed twice under torchrun: an explicit checkpoint path starts another run from
    it, ``resume=auto`` continues (a copy of) it. Every rank must load the checkpoint rank 0 chose, or the ranks
    desynchronise."""
    args = [*ARGS, f"run.dir={tmp_path}", "train.steps=8"]
    ckpt = two_ranks[0] / "checkpoints" / "step_00000006.pt"
    out = torchrun(2, [*args, "run.name=b", f"train.resume={ckpt}"])
    assert "resumed at step 6" in out.stdout
    assert [r["step"] for r in rows(tmp_path / "b")] == list(range(1, 9))
    shutil.copytree(two_ranks[0], tmp_path / "r")
    out = torchrun(2, [*args, "run.name=r", "train.resume=auto"])
    assert "resumed at step 6" in out.stdout
    assert [r["step"] for r in rows(tmp_path / "r")] == list(range(1, 9))
    assert (tmp_path / "r" / "train.log").read_text().splitlines()[-1].startswith("done step=8")


def test_the_process_group_is_torn_down_after_the_ddp_wrapper_that_holds_it_is_freed(tmp_path: Path):
    """DDP sits in reference cycles and its reducer holds the gloo group; left to the interpreter's teardown, the
    group's worker threads can abort a finished rank. shutdown_distributed frees the wrapper before the group."""
    import gc

    import torch
    import torch.distributed as dist

    from dormouse.train.dist_info import DistInfo
    from dormouse.train.distributed import shutdown_distributed

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    automatic = gc.isenabled()
    gc.disable()  # only the collection shutdown_distributed makes may free the wrapper
    try:
        def train_a_step() -> None:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
            model(torch.randn(2, 4)).sum().backward()

        train_a_step()
        shutdown_distributed(DistInfo(rank=0, world_size=2), barrier=True)
        assert not dist.is_initialized()
        alive = [o for o in gc.get_objects() if isinstance(o, torch.nn.parallel.DistributedDataParallel)]
        assert not alive, "the DDP wrapper outlived its process group"
    finally:
        if automatic:
            gc.enable()
        if dist.is_initialized():
            dist.destroy_process_group()
