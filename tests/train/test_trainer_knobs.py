"""The usual trainer knobs: gradient accumulation, eval-only, keeping the best checkpoint."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.config.schema import load_config
from dormouse.model.looped import LoopedByteLM
from dormouse.train.batches import train_batch
from dormouse.train.loop import accumulate_gradients, readout_loss, train

runner = CliRunner()
TINY = ["preset=tiny", "train.steps=4", "train.eval_every=2", "data.eval_bytes=256", "logging.progress=off"]


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("accum", [2, 4])
def test_accumulated_micro_batches_give_the_full_batch_gradient(accum: int):
    """Oracle: autograd of the plain full-batch loss (one forward over all 8 rows). The accumulated gradient
    is sum_i grad(L_i / accum), the same sum in another order, so only float32 rounding separates them.
    Each component is a sum over <= 8 x 32 = 256 per-byte terms (and the slot reads); reassociating it moves
    the result by at most ~log2(256) + a few roundings, i.e. ~10-20 ulp of the largest partial sums,
    ~2e-6 relative to a tensor's largest component (measured: 2.6e-7 at accum=4). The bound below (1e-5 of
    it, and 1e-7 absolute for components that cancel to ~0) is 5x the estimate; without the 1/accum scaling
    the error is (accum - 1) x 100%."""
    cfg = load_config(["preset=tiny", "model.use_attnres=true", "data.seq_len=32"])
    model = LoopedByteLM(cfg.model, seed=3, kernel="torch")
    corpus = torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0))
    x, y = train_batch(corpus, seq_len=32, batch_size=8, seed=1, step=0)
    readout_loss(model(x, depth=model.max_iter, readouts="all"), y).backward()
    full = _grads(model)
    model.zero_grad(set_to_none=True)
    accumulate_gradients(model, x, y, depth=model.max_iter, readouts="all", accum=accum, autocast=nullcontext)
    acc = _grads(model)
    assert full.keys() == acc.keys() and full
    for name, g in full.items():
        scale = float(g.abs().max())
        assert torch.allclose(acc[name], g, rtol=0, atol=1e-5 * scale + 1e-7), name


def test_grad_accum_keeps_the_counters_and_depth_sum_of_one_step_per_step(tmp_path: Path):
    """Each micro-batch asks the arm at every sublayer: asked = 2 x depth_sum still holds (logs --check), and
    window_steps counts optimizer steps, not micro-batches; the loss is the full batch's."""
    rows = {}
    for accum in (1, 2):
        train(load_config([*TINY, "model.random_depth=true", f"train.grad_accum={accum}", f"run.dir={tmp_path}",
                           f"run.name=a{accum}"]))
        rows[accum] = [json.loads(ln) for ln in (tmp_path / f"a{accum}" / "metrics.jsonl").read_text().splitlines()]
        result = runner.invoke(app, ["logs", str(tmp_path / f"a{accum}"), "--check", "--format", "tsv"])
        assert result.exit_code == 0, result.output
    for one, two in zip(rows[1], rows[2], strict=True):
        assert two["window_steps"] == one["window_steps"] == 2
        assert two["depth_sum"] == 2 * one["depth_sum"]  # two passes at each step's drawn depth
        assert two["rezero_asked"] == 2 * two["depth_sum"] == 2 * one["rezero_asked"]
        assert two["tokens"] == one["tokens"]
    assert abs(rows[2][0]["loss"] - rows[1][0]["loss"]) < 1e-4  # the same batches, the same mean loss


def test_grad_accum_that_does_not_divide_the_batch_is_refused_naming_both(tmp_path: Path):
    result = runner.invoke(app, ["validate", "preset=tiny", "train.batch_size=6", "train.grad_accum=4",
                                 f"run.dir={tmp_path}"])
    assert result.exit_code == 2 and "train.grad_accum=4" in result.output and "batch_size=6" in result.output
    result = runner.invoke(app, ["validate", "train.grad_accum=0", f"run.dir={tmp_path}"])
    assert result.exit_code == 2 and "train.grad_accum=0" in result.output


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_eval_only_gives_the_runs_own_final_bpb_and_writes_nothing(tmp_path: Path):
    """Oracle: the run's own final eval (metrics.jsonl), computed by the training loop at that step."""
    from dormouse.cli.eval import eval_checkpoint

    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=e"]))
    run = tmp_path / "e"
    final = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    before = _snapshot(tmp_path)
    _, row = eval_checkpoint(run)
    assert row["step"] == final["step"] == 4
    assert {k: row[k] for k in row if k.startswith("bpb")} == {k: final[k] for k in final if k.startswith("bpb")}
    result = runner.invoke(app, ["eval", str(run)])
    assert result.exit_code == 0, result.output
    (text,) = [ln for ln in result.stdout.splitlines() if ln.startswith("eval ")]
    line = dict(run.split("=", 1) for run in text.split()[1:])
    assert line["step"] == "4" and line["arm"] == "rezero"
    assert abs(float(line["bpb"]) - final["bpb"]) <= 5e-5  # the line keeps 4 decimals
    assert _snapshot(tmp_path) == before  # nothing written, nothing touched


def test_eval_only_on_a_folder_without_a_checkpoint_is_refused_naming_it(tmp_path: Path):
    result = runner.invoke(app, ["eval", str(tmp_path)])
    assert result.exit_code == 2 and "no checkpoint" in result.output


def test_keep_best_writes_the_lowest_eval_bpb_checkpoint_not_the_last(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    """The evals' bpb is scripted (3.0, 2.0, 2.5): best.pt must hold step 4's weights, not step 6's."""
    import dormouse.train.loop as train_module
    from dormouse.cli.eval import eval_checkpoint

    real_evaluate = train_module.evaluate
    scripted = iter([3.0, 2.0, 2.5])

    def fake_evaluate(model, *args, **kwargs):
        real_evaluate(model, *args, **kwargs)
        v = next(scripted)
        return {**{f"bpb@{k}": v for k in range(1, model.max_iter + 1)}, "bpb": v}

    monkeypatch.setattr(train_module, "evaluate", fake_evaluate)
    train(load_config([*TINY, "train.steps=6", "train.keep_best=true", f"run.dir={tmp_path}", "run.name=b"]))
    best = tmp_path / "b" / "checkpoints" / "best.pt"
    state = torch.load(best, weights_only=False)
    assert state["loop"]["step"] == 4
    monkeypatch.setattr(train_module, "evaluate", real_evaluate)
    # best.pt is a whole checkpoint: `dormouse eval` reads it (the real bpb at step 4, not the scripted one)
    path, row = eval_checkpoint(tmp_path / "b", best)
    assert path == best and row["step"] == 4
    assert sorted(p.name for p in best.parent.iterdir()) == ["best.pt", "step_00000006.pt"]  # no temp file


def test_without_keep_best_there_is_no_best_checkpoint(tmp_path: Path):
    train(load_config([*TINY, f"run.dir={tmp_path}", "run.name=n"]))
    assert not (tmp_path / "n" / "checkpoints" / "best.pt").exists()


def test_a_checkpoint_from_before_a_new_key_resumes_when_the_key_keeps_its_default(tmp_path: Path):
    """A key added to the schema later (train.grad_accum, data.hf_val_split, ...) is absent from an older
    checkpoint's config: it ran with today's default, so a resume is not refused for it; a non-default value
    is a real difference and is refused."""
    from dormouse.train.start import config_differences

    cfg = load_config([*TINY, f"run.dir={tmp_path}", "run.name=old"])
    old = load_config([*TINY, f"run.dir={tmp_path}", "run.name=old"])
    container = OmegaConf.to_container(old)
    del container["train"]["grad_accum"], container["data"]["hf_val_split"]
    older = OmegaConf.create(container)
    assert config_differences(older, cfg) == []
    changed = load_config([*TINY, "data.hf_val_split=tail", f"run.dir={tmp_path}", "run.name=old"])
    assert config_differences(older, changed) == ["data.hf_val_split"]
