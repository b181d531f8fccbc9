"""Two gates of the verdict path, each through `train` itself:

* the seed reaches the shared initial weights: two ``train.seed`` values start from different weights (else
  every replicate of a comparison would start from the same ones and the seeds would measure data order
  alone), equal seeds from equal ones; ``train.data_seed`` changes the data order only, never the weights;
* gradient clipping is applied: with ``train.grad_clip`` set, the gradients the optimizer steps with have
  total norm ``grad_clip`` (checked from the gradients themselves, not from the clip function's return).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import dormouse.train.loop as train_module
from dormouse.config.schema import load_config
from dormouse.train.loop import train

TINY = ["preset=tiny", "train.eval_every=100", "data.eval_bytes=256", "logging.progress=off"]


def _start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, *overrides: str) -> dict[str, Any]:
    """The model's weights and the batch as step 0 sees them (before any update), from a one-step run."""
    seen: dict[str, Any] = {}
    real_step, real_batch = train_module.train_step, train_module.train_batch

    def first_step(run: Any, loop: Any) -> float:
        if "weights" not in seen:
            seen["weights"] = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        return real_step(run, loop)

    def batch(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = real_batch(*args, **kwargs)
        seen.setdefault("batch", x.clone())
        return x, y

    monkeypatch.setattr(train_module, "train_step", first_step)
    monkeypatch.setattr(train_module, "train_batch", batch)
    train(load_config([*TINY, "train.steps=1", f"run.dir={tmp_path}", f"run.name={name}", *overrides]))
    return seen


def test_the_seed_reaches_the_shared_initial_weights_and_data_seed_only_the_data_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s1 = _start(tmp_path, monkeypatch, "s1", "train.seed=1")
    s1_again = _start(tmp_path, monkeypatch, "s1b", "train.seed=1")
    s2 = _start(tmp_path, monkeypatch, "s2", "train.seed=2")
    s1_d7 = _start(tmp_path, monkeypatch, "s1d7", "train.seed=1", "train.data_seed=7")
    shared = [k for k in s1["weights"] if not k.startswith("arm.")]
    assert "embed.weight" in shared
    # Equal seeds: every tensor equal. Other seed: every randomly drawn shared tensor differs (weights drawn
    # with std 0.02 in fp32 never coincide by chance).
    assert all(torch.equal(s1["weights"][k], s1_again["weights"][k]) for k in s1["weights"])
    drawn = [k for k in shared if k.endswith("weight") and s1["weights"][k].std() > 0 and s1["weights"][k].dim() == 2]
    assert len(drawn) >= 4, drawn
    assert all(not torch.equal(s1["weights"][k], s2["weights"][k]) for k in drawn), \
        [k for k in drawn if torch.equal(s1["weights"][k], s2["weights"][k])]
    # data_seed: the same weights, another batch.
    assert all(torch.equal(s1["weights"][k], s1_d7["weights"][k]) for k in s1["weights"])
    assert torch.equal(s1["batch"], s1_again["batch"]) and not torch.equal(s1["batch"], s1_d7["batch"])


def _stepped_grad_norms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, clip: float) -> list[float]:
    """The total L2 norm of the gradients at each optimizer step of a 3-step run, computed here from the
    gradients the optimizer is handed."""
    norms: list[float] = []
    real = torch.optim.AdamW.step

    def step(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        grads = [p.grad.detach().double() for g in self.param_groups for p in g["params"] if p.grad is not None]
        norms.append(float(torch.sqrt(sum((gr * gr).sum() for gr in grads))))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    train(load_config([*TINY, "train.steps=3", f"train.grad_clip={clip}", f"run.dir={tmp_path}",
                       f"run.name={name}"]))
    monkeypatch.undo()
    return norms


def test_the_optimizer_steps_with_clipped_gradients_when_grad_clip_is_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unclipped = _stepped_grad_norms(tmp_path, monkeypatch, "free", 0.0)
    clip = 1e-3
    # The test can tell: without clipping, every step's gradient norm is far above the clip.
    assert len(unclipped) == 3 and min(unclipped) > 10 * clip, unclipped
    clipped = _stepped_grad_norms(tmp_path, monkeypatch, "clipped", clip)
    # clip_grad_norm_ scales by clip / (norm + 1e-6): the result is clip * norm / (norm + 1e-6), within
    # 1e-6 / norm (< 1e-4 here, norm > 1e-2) of clip, relatively; fp32 sums add ~1e-6.
    assert len(clipped) == 3
    assert all(abs(n - clip) <= 2e-4 * clip for n in clipped), clipped
