"""End to end through the CLI: each arm trains, writes its files, and its eval lines prove it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dormouse.arms.registry import arm_classes
from dormouse.cli.app import app
from dormouse.config.schema import load_config
from dormouse.train.loop import depth_for_step, train
from dormouse.train.schedule import lr_at

runner = CliRunner()
TINY = ["preset=tiny", "train.steps=12", "train.eval_every=6", "data.eval_bytes=1024"]
ARMS = {
    "rezero": [],
    "gr": ["model.use_gr=true"],
    "attnres": ["model.use_attnres=true"],
    "attnres_block": ["model.use_attnres=true", "model.attnres.block_size=3"],
}


def eval_lines(run_dir: Path) -> list[str]:
    return [ln for ln in (run_dir / "train.log").read_text().splitlines() if ln.startswith("eval ")]


@pytest.mark.parametrize("arm", list(ARMS))
def test_each_arm_trains_end_to_end_through_the_cli(tmp_path: Path, arm: str):
    result = runner.invoke(app, ["train", *TINY, *ARMS[arm], f"run.dir={tmp_path}", "run.name=r"])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "r"
    for name in ("config.yaml", "provenance.json", "train.log", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "checkpoints").glob("step_*.pt")), "no final checkpoint"
    lines = eval_lines(run_dir)
    assert len(lines) == 2 and "step=6 " in lines[0] and "step=12 " in lines[1]
    # Not a terminal (no progress bar): the first line says what runs where, before the first eval line;
    # then the terminal shows the eval lines train.log holds.
    out = result.stdout.splitlines()
    (start,) = [i for i, ln in enumerate(out) if ln.startswith(f"run {run_dir}  arm=")]
    assert start < min(i for i, ln in enumerate(out) if ln.startswith("eval "))
    assert "steps=12 eval_every=6" in out[start]
    assert [ln for ln in out if ln.startswith("eval ")] == lines
    assert (run_dir / "train.log").read_text().splitlines()[-1].startswith("done step=12")
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [6, 12]
    name = "attnres" if arm.startswith("attnres") else arm
    for row, line in zip(rows, lines):
        # 6 steps per window x 2 iterations x 2 sublayers
        assert row[f"{name}_ran"] == row[f"{name}_asked"] == 24, row
        assert f"{name}=24/24" in line
        for other in set(arm_classes()) - {name}:  # every registered arm, a plugin's too
            assert row[f"{other}_ran"] == row[f"{other}_asked"] == 0
            assert f" {other}=" not in line  # an unselected arm's 0/0 stays in metrics.jsonl
        assert f"arm={name}" in line and "bpb@1=" in line and "bpb@2=" in line
        assert row["bpb"] == row["bpb@2"] and 0 < row["bpb"] < 9
    # It learns: a uniform byte model scores 8 bpb; 12 steps of the tiny preset get well below and keep going
    # down (measured ~6.9 then ~6.3). A dead optimizer or a frozen model stays at ~8.01.
    assert rows[1]["bpb"] < rows[0]["bpb"] < 7.5, [r["bpb"] for r in rows]
    expected_kernel = "torch" if name == "attnres" else "none"
    assert rows[-1]["kernel"] == expected_kernel and f"kernel={expected_kernel}" in lines[-1]
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["arm"] == name and prov["kernel"] == expected_kernel and "commit" in prov
    # the CPU's kernel-choosing features: what tells a re-run on another machine from a changed code path
    assert prov["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability() and prov["cpu"]["model"]


def test_random_depth_counters_count_the_depth_that_ran(tmp_path: Path):
    cfg = load_config([*TINY, "model.max_iter=3", "model.random_depth=true", "model.use_gr=true",
                       f"run.dir={tmp_path}", "run.name=r"])
    result = train(cfg)
    depths = [depth_for_step(cfg.train.seed, s, 3, True) for s in range(12)]
    assert len(set(depths)) > 1, "the depth sequence should vary for this test to mean anything"
    windows = [depths[:6], depths[6:]]
    for row, window in zip(result.metrics, windows):
        assert row["gr_asked"] == row["gr_ran"] == 2 * sum(window)
        assert row["depth"] == pytest.approx(sum(window) / 6)


def test_same_seed_gives_the_same_losses(tmp_path: Path):
    a = train(load_config([*TINY, "model.use_attnres=true", f"run.dir={tmp_path}", "run.name=a"]))
    b = train(load_config([*TINY, "model.use_attnres=true", f"run.dir={tmp_path}", "run.name=b"]))
    assert a.losses == b.losses and len(a.losses) == 12
    assert [r["bpb"] for r in a.metrics] == [r["bpb"] for r in b.metrics]


def test_two_evaluations_of_one_model_agree_exactly(tmp_path: Path):
    from dormouse.model.looped import LoopedByteLM
    from dormouse.train.batches import eval_windows, load_corpus
    from dormouse.train.loop import evaluate

    cfg = load_config([*TINY])
    corpus = load_corpus(cfg.data)
    x, y = eval_windows(corpus.val, seq_len=cfg.data.seq_len, eval_bytes=cfg.data.eval_bytes)
    model = LoopedByteLM(cfg.model)
    from contextlib import nullcontext

    first = evaluate(model, x, y, 4, torch.device("cpu"), nullcontext)
    second = evaluate(model, x, y, 7, torch.device("cpu"), nullcontext)
    assert first["bpb"] == pytest.approx(second["bpb"], rel=1e-6)  # batching only changes summation order
    assert first == evaluate(model, x, y, 4, torch.device("cpu"), nullcontext)


def test_learning_rate_warms_up_then_decays_to_the_floor():
    cfg = load_config(["train.steps=100", "train.warmup=10", "train.lr=1e-3", "train.min_lr_ratio=0.1"])
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(100, cfg) == pytest.approx(1e-4)
    assert lr_at(55, cfg) < lr_at(20, cfg)


def test_existing_run_dir_is_refused_without_resume_or_overwrite_exit_2_as_validate_says(tmp_path: Path):
    args = ["train", *TINY, f"run.dir={tmp_path}", "run.name=r"]
    assert runner.invoke(app, args).exit_code == 0
    dry = runner.invoke(app, ["validate", *args[1:]])
    again = runner.invoke(app, args)
    assert again.exit_code == dry.exit_code == 2
    assert "already holds a run" in again.output and "already holds a run" in dry.output
    assert runner.invoke(app, [*args, "train.overwrite=true"]).exit_code == 0


def test_data_path_of_local_text_files_trains(tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("to be or not to be, that is the question. " * 40)
    (corpus / "b.txt").write_text("whether tis nobler in the mind to suffer. " * 40)
    result = runner.invoke(app, ["train", *TINY, "data.eval_bytes=160", "model.use_gr=true", f"data.path={corpus}",
                                 f"run.dir={tmp_path / 'runs'}", "run.name=r"])
    assert result.exit_code == 0, result.output
    assert "files:" in (tmp_path / "runs" / "r" / "provenance.json").read_text()


def test_bad_data_is_one_line_before_the_model_is_built(tmp_path: Path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = runner.invoke(app, ["train", *TINY, f"data.path={empty}", f"run.dir={tmp_path / 'runs'}"])
    assert result.exit_code == 2 and str(empty) in result.output and "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


def test_wandb_offline_logs_without_prompting(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))  # the user's own setting wins
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = runner.invoke(app, ["train", *TINY, "train.steps=6", "logging.wandb=offline",
                                 f"run.dir={tmp_path}", "run.name=w"], input="")
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "wandb_dir").rglob("*.wandb")), "wandb offline wrote no run file under WANDB_DIR"
    assert not list((tmp_path / "w").rglob("*.wandb"))


def test_unwritable_run_dir_is_a_clear_error(tmp_path: Path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    result = runner.invoke(app, ["train", *TINY, f"run.dir={blocker}", "run.name=r"])
    assert result.exit_code == 2  # refused before step 0, as `dormouse validate` refuses it
    assert runner.invoke(app, ["validate", *TINY, f"run.dir={blocker}", "run.name=r"]).exit_code == 2
    assert "cannot write the run directory" in result.output and str(blocker) in result.output


def test_auto_kernel_says_which_path_it_took(tmp_path: Path):
    result = runner.invoke(app, ["train", *TINY, "train.steps=2", "model.use_attnres=true", "model.kernel=auto",
                                 f"run.dir={tmp_path}", "run.name=r"])
    assert result.exit_code == 0, result.output
    assert "kernel: model.kernel=auto -> torch (device cpu is not CUDA)" in result.output
    assert json.loads((tmp_path / "r" / "provenance.json").read_text())["kernel"] == "torch"


def test_fused_triton_read_trains_like_the_torch_read(tmp_path: Path):
    """model.kernel=triton (under Triton's interpreter on CPU) runs the fused kernel inside the model and
    trains to the same losses as the plain-torch read."""
    from dormouse.ops.attnres import resolve_kernel

    try:
        resolve_kernel("triton", torch.device("cpu"))
    except RuntimeError as exc:
        pytest.skip(f"fused kernel not runnable here: {exc}")
    import dormouse_kernels

    calls = {"n": 0}
    fused = dormouse_kernels.depth_attend_fused

    def counted(*args, **kwargs):
        calls["n"] += 1
        return fused(*args, **kwargs)

    args = [*TINY, "train.steps=4", "train.eval_every=4", "data.eval_bytes=256", "model.use_attnres=true"]
    ref = train(load_config([*args, "model.kernel=torch", f"run.dir={tmp_path}", "run.name=t"]))
    dormouse_kernels.depth_attend_fused = counted
    try:
        fast = train(load_config([*args, "model.kernel=triton", f"run.dir={tmp_path}", "run.name=k"]))
    finally:
        dormouse_kernels.depth_attend_fused = fused
    assert fast.kernel == "triton" and calls["n"] > 0, "the fused kernel never ran"
    # fp32 reads that differ by ~1e-7 relative (online vs two-pass softmax); over 4 Adam steps the losses
    # stay within 1e-5 relative (measured: identical to the last printed digit).
    assert fast.losses == pytest.approx(ref.losses, rel=1e-5)
    assert fast.metrics[-1]["bpb"] == pytest.approx(ref.metrics[-1]["bpb"], rel=1e-5)
