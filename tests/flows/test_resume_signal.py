"""Resume is exact after an interrupt as well as after SIGKILL.

The rule (dormouse/train/state.py, dormouse/train/loop.py): a run stopped by SIGINT or SIGTERM finishes the step it
is in, checkpoints it and exits 128 + the signal; resumed, it is bit-identical on CPU at a fixed thread count
to the run nobody interrupted. tests/train/test_resume.py proves it in one process at the tiny preset
(``stop_at_step``); here every run is its own ``dormouse train`` process, as in a comparison (an interrupted
run is resumed by another process, days later), at the CPU preset's arithmetic (d_model 128, 4 heads, fp32 on
CPU, the attnres_block arm of ``residual_cpu2``) and one thread (the comparison's), stopped by a real signal
at a step that is neither an eval nor a checkpoint step, twice: SIGINT stops the run, SIGTERM stops its resumed
process before the next eval, and a third process finishes it. The open eval window, the optimizer's moments and
the schedule all cross both checkpoints the signals wrote.

The signal comes from outside, at a known step: ``python -m tests.flows.test_resume_signal PAUSE -- ARGS`` runs the
CLI (``dormouse train ARGS``) with a global optimizer-step hook that, inside the process's optimizer step PAUSE,
says so on stdout and waits for a line on stdin. The test sends the signal while the run waits there, then
releases it: the handler has set its flag during that step, so the run stops right after it.

Each process gets its own ``PYTHONHASHSEED``, as separate processes do: state keyed on a hash order (a set
of names) that survives an in-process resume cannot pass by chance here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from dormouse.run.checkpoint import list_checkpoints, load_checkpoint

REPO = Path(__file__).resolve().parents[2]
PAUSED = "paused-at-optimizer-step"
# The CPU preset's model and dtype (conf/preset/cpu.yaml = the schema's defaults), the arm of the published
# resumed run (residual_cpu2's attnres_block), a short schedule and eval set so a run takes seconds.
# SIGINT stops the run at the first stop, SIGTERM its resumed process at the second: both inside the eval window
# 7..12, neither a checkpoint step.
STEPS, EVAL_EVERY, CKPT_EVERY = 16, 6, 6
STOPS = ((signal.SIGINT, 7), (signal.SIGTERM, 10))
ARGS = ["preset=cpu", "model.use_attnres=true", "model.attnres.block_size=2", "train.batch_size=8",
        f"train.steps={STEPS}", "train.warmup=4", f"train.eval_every={EVAL_EVERY}",
        f"train.ckpt_every={CKPT_EVERY}", "data.eval_bytes=4096", "train.seed=202", "train.data_seed=1202",
        "logging.progress=off"]
# Fields of a metrics row that are wall-clock or the process's memory: the only ones that may differ.
UNREPEATABLE = {"tok/s", "time_s", "peak_mem_bytes"}


def _run(args: list[str], hash_seed: int, pause: int | None = None) -> subprocess.Popen[str]:
    """``dormouse train ARGS`` in a fresh process at one thread (the published runs' count); with ``pause``,
    through this module's hook (see the module docstring)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": os.pathsep.join(
               [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = ([sys.executable, "-m", "tests.flows.test_resume_signal", str(pause), "--"] if pause is not None
           else [sys.executable, "-m", "dormouse"]) + ["train", *args]
    return subprocess.Popen(cmd, cwd=REPO, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out


def _interrupt(args: list[str], sig: signal.Signals, hash_seed: int, pause: int) -> str:
    """Run until this process's optimizer step ``pause`` is under way, send ``sig``, let the step finish; the
    output."""
    proc = _run(args, hash_seed, pause=pause)
    assert proc.stdout is not None and proc.stdin is not None
    seen: list[str] = []
    for line in proc.stdout:  # the run blocks inside that step until it reads a line
        seen.append(line)
        if line.startswith(PAUSED):
            break
    else:
        pytest.fail("the run never reached the pause:\n" + "".join(seen) + _finish(proc)[1])
    proc.send_signal(sig)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    code, out = _finish(proc)
    assert code == 128 + int(sig), f"exit {code}, not {128 + int(sig)}: {_last_line(out)}\n" + "".join(seen) + out
    return "".join(seen) + out


def _last_line(out: str) -> str:
    """A failed run's own last word (its error), for the assertion's first line."""
    lines = out.strip().splitlines()
    return lines[-1] if lines else "(no output)"


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _repeatable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in UNREPEATABLE}


def _final_state(run_dir: Path) -> dict[str, Any]:
    return load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])


def _assert_same_tensors(a: Any, b: Any, where: str) -> None:
    """Nested dicts/lists of tensors and numbers equal bit for bit."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where}: deviation={(a.double() - b.double()).abs().max().item():.3e}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("full")
    code, out = _finish(_run([*ARGS, f"run.dir={root}", "run.name=full"], hash_seed=1))
    assert code == 0, out
    return root / "full"


@pytest.mark.slow
def test_a_run_interrupted_by_a_signal_and_resumed_is_bit_identical(tmp_path: Path, uninterrupted: Path) -> None:
    """SIGINT, then SIGTERM to the resumed process, then a resume to the end: each signal's step is finished,
    checkpointed and resumed from, and the run ends bit-identical to the one nobody interrupted."""
    args = [*ARGS, f"run.dir={tmp_path}", "run.name=split"]
    run_dir = tmp_path / "split"
    resumed_at = 0
    for hash_seed, (sig, stop_at) in enumerate(STOPS, start=2):
        assert stop_at % EVAL_EVERY and stop_at % CKPT_EVERY, "an interrupt must fall between evals and checkpoints"
        out = _interrupt([*args, *(["train.resume=auto"] if resumed_at else [])], sig, hash_seed,
                         pause=stop_at - resumed_at)
        # The signal's step finished and was checkpointed: the resume starts exactly there.
        assert int(_final_state(run_dir)["loop"]["step"]) == stop_at, out
        assert f"interrupted at step {stop_at}" in out
        resumed_at = stop_at
    code, out = _finish(_run([*args, "train.resume=auto"], hash_seed=len(STOPS) + 2))
    assert code == 0, f"the resumed run exited {code}: {_last_line(out)}\n{out}"
    log = (run_dir / "train.log").read_text()
    assert all(f"resume step={stop_at} " in log for _, stop_at in STOPS), log
    full, split = _rows(uninterrupted), _rows(run_dir)
    assert [r["step"] for r in split] == [r["step"] for r in full] == [6, 12, 16]
    for a, b in zip(full, split, strict=True):  # every eval: bpb at each depth, the window's loss, counters
        assert _repeatable(b) == _repeatable(a), (
            f"step {a['step']} parts from the uninterrupted run: deviation={abs(b['bpb'] - a['bpb']):.3e} bpb "
            f"(fields {sorted(k for k in _repeatable(a) if a[k] != b.get(k))})")
    final_full, final_split = _final_state(uninterrupted), _final_state(run_dir)
    for key in ("model", "optimizer"):
        _assert_same_tensors(final_full[key], final_split[key], key)


def _pause_hook(step: int) -> None:
    """Inside this process's optimizer step ``step`` (1-based; after its update, before the loop counts it), say
    so and wait for a line on stdin: the test's signal arrives while the step is under way."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    calls = {"n": 0}

    def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == step:
            print(f"{PAUSED} {step}", flush=True)
            sys.stdin.readline()

    register_optimizer_step_post_hook(hook)


if __name__ == "__main__":  # python -m tests.flows.test_resume_signal PAUSE -- train ARGS
    pause, sep, *cli_args = sys.argv[1:]
    assert sep == "--", "usage: python -m tests.flows.test_resume_signal PAUSE -- train ARGS"
    _pause_hook(int(pause))
    sys.argv = ["dormouse", *cli_args]
    from dormouse.cli.app import main

    main()
