"""``train.dtype``: the compute dtype (auto | fp32 | bf16) is honoured by training, eval and `dormouse eval`,
recorded in provenance, validated by name, and fixed for the life of a run (a resume may not change it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.train.loop import train
from dormouse.train.run_config import load_run_config
from dormouse.train.start import RunDirRefused

runner = CliRunner()
TINY = ["preset=tiny", "train.steps=2", "train.eval_every=2", "data.eval_bytes=256", "logging.progress=off"]


def _linear_output_dtypes(overrides: list[str]) -> set[torch.dtype]:
    """Train with ``overrides`` and return the dtypes every nn.Linear's forward produced (a global hook:
    the model is built inside train())."""
    seen: set[torch.dtype] = set()

    def hook(module: torch.nn.Module, args: object, out: object) -> None:
        if isinstance(module, torch.nn.Linear) and isinstance(out, torch.Tensor):
            seen.add(out.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        train(load_run_config([*TINY, *overrides]))
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize(("dtype", "matmul", "recorded"), [("bf16", torch.bfloat16, "bf16-autocast"),
                                                           ("fp32", torch.float32, "fp32"),
                                                           ("auto", torch.float32, "fp32")])
def test_train_dtype_bf16_runs_the_matmuls_in_bf16_on_cpu_and_fp32_does_not(tmp_path: Path, dtype: str,
                                                                            matmul: torch.dtype, recorded: str):
    """bf16 on CPU is CPU autocast (the stand-in for CUDA's bf16): every Linear's output is bf16.
    fp32 and auto (on CPU) leave every one float32. Provenance records what ran."""
    seen = _linear_output_dtypes([f"train.dtype={dtype}", f"run.dir={tmp_path}", "run.name=r"])
    assert seen == {matmul}
    prov = json.loads((tmp_path / "r" / "provenance.json").read_text())
    assert prov["dtype"] == recorded


def test_eval_only_scores_a_bf16_run_in_bf16_giving_its_own_final_bpb(tmp_path: Path):
    """Oracle: the run's own final eval (metrics.jsonl). bf16 and fp32 bpb differ in the 3rd-4th decimal on
    this model, so an eval that ignored the run's dtype would not match bit for bit."""
    from dormouse.cli.eval import eval_checkpoint

    train(load_run_config([*TINY, "train.dtype=bf16", f"run.dir={tmp_path}", "run.name=b"]))
    final = json.loads((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()[-1])
    _, row = eval_checkpoint(tmp_path / "b")
    assert {k: row[k] for k in row if k.startswith("bpb")} == {k: final[k] for k in final if k.startswith("bpb")}


def test_resume_with_a_changed_dtype_is_refused_naming_it(tmp_path: Path):
    common = [*TINY, f"run.dir={tmp_path}", "run.name=r"]
    train(load_run_config([*common, "train.dtype=fp32"]))
    with pytest.raises(RunDirRefused, match="train.dtype"):
        train(load_run_config([*common, "train.dtype=bf16", "train.steps=4", "train.resume=auto"]))


def test_unknown_dtype_is_refused_naming_the_field(tmp_path: Path):
    result = runner.invoke(app, ["validate", "train.dtype=fp16", f"run.dir={tmp_path}"])
    assert result.exit_code == 2 and "train.dtype" in result.output and "bf16" in result.output
