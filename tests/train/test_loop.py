"""What the training loop actually does, observed from outside it while it runs.

Global hooks watch a real ``train(cfg)``: a module forward hook sees every forward the loop makes (which
model, with what depth, how many attention sublayers ran, how many readouts were taken) and an optimizer
step pre-hook sees the optimizer object the loop built at the moment it steps (its groups, learning rates
and the gradients about to be applied). Nothing here calls the loop's own helpers to compute an expected
value: the expectations are literal values, hand-written formulas and invariants.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from dormouse.config.schema import load_config
from dormouse.train.loop import depth_for_step, train
from tests.helpers.loop_observer import Observed, observe

BASE = ["preset=tiny", "train.device=cpu", "logging.progress=off", "data.eval_bytes=256"]


def run(tmp_path: Path, *overrides: str) -> Observed:
    cfg = load_config([*BASE, *overrides, f"run.dir={tmp_path}", "run.name=r"])
    with observe() as seen:
        train(cfg)
    return seen


# --- gate 2: the learning-rate schedule --------------------------------------------------------------------

def test_learning_rate_the_optimizer_applies_at_the_schedule_boundaries(tmp_path: Path) -> None:
    """Linear warmup over W steps to the peak, then a cosine from the peak to lr * min_lr_ratio at step N:
    lr(s) = lr (s + 1) / W for s < W, else lr (r + (1 - r) (1 + cos(pi (s - W) / (N - W))) / 2)."""
    lr, r, warmup, steps = 1e-2, 0.1, 3, 12
    seen = run(tmp_path, f"train.lr={lr}", f"train.min_lr_ratio={r}", f"train.warmup={warmup}",
               f"train.steps={steps}", "train.eval_every=12")
    assert len(seen.steps) == steps
    expected = {
        0: lr * 1 / 3,  # the first step: one third of the way up
        2: lr,  # the last warmup step reaches the peak
        3: lr,  # the first step after warmup: the cosine at progress 0
        11: lr * (r + (1 - r) * (1 + math.cos(math.pi * 8 / 9)) / 2),  # the last step: progress (11-3)/(12-3)
    }
    for s, want in expected.items():
        got = seen.steps[s].lrs
        dev = max(abs(g - want) for g in got) / want
        # lr is one float64 expression evaluated in Python: equal to the last few ulps.
        assert dev < 1e-12, f"step {s}: optimizer lr {got} vs {want} (deviation={dev:.3e} bound=1e-12)"
    lrs = [v.lrs[0] for v in seen.steps]
    assert all(a < b for a, b in zip(lrs[:2], lrs[1:3])) and all(a > b for a, b in zip(lrs[3:-1], lrs[4:]))


# --- gate 3: the optimizer the loop builds -------------------------------------------------------------------

SHARED_DECAY = {"embed.weight", "attn.qkv.weight", "attn.proj.weight", "mlp.gate_up.weight", "mlp.down.weight"}
SHARED_NO_DECAY = {"attn.norm.weight", "mlp.norm.weight", "final_norm.weight"}
ARM_PARAMS = {  # (decayed, not decayed): matrices decay; gains, biases, scalars and queries do not
    "rezero": ([], set(), {"arm.alpha"}),
    "gr": (["model.use_gr=true"], {"arm.gate_attn.weight", "arm.gate_mlp.weight"}, {"arm.bias"}),
    "attnres": (["model.use_attnres=true"], set(), {"arm.queries", "arm.gains"}),
    "attnres_input_query": (["model.use_attnres=true", "model.attnres.query=input"], set(),
                            {"arm.queries", "arm.gains", "arm.query_proj"}),
}


@pytest.mark.parametrize("arm", list(ARM_PARAMS))
def test_the_optimizer_the_loop_steps_decays_matrices_only(tmp_path: Path, arm: str) -> None:
    overrides, arm_decay, arm_no_decay = ARM_PARAMS[arm]
    seen = run(tmp_path, *overrides, "train.steps=1", "train.eval_every=1", "train.weight_decay=0.07",
               "train.beta1=0.8", "train.beta2=0.9")
    opt, model = seen.optimizer, seen.model
    assert isinstance(opt, torch.optim.AdamW), type(opt)
    names = {id(p): n for n, p in model.named_parameters()}
    decay: dict[str, float] = {}
    for group in opt.param_groups:
        assert group["betas"] == (0.8, 0.9), group["betas"]
        for p in group["params"]:
            assert names[id(p)] not in decay, f"{names[id(p)]} is in two groups"
            decay[names[id(p)]] = group["weight_decay"]
    never = set(names.values()) - set(decay)
    assert not never, f"parameters the optimizer never steps: {never}"
    want = {n: 0.07 for n in SHARED_DECAY | arm_decay} | {n: 0.0 for n in SHARED_NO_DECAY | arm_no_decay}
    wrong = {n: (decay.get(n), w) for n, w in want.items() if decay.get(n) != w}
    assert set(want) == set(decay) and not wrong, (
        f"{arm}: weight decay (got, want) {wrong}; unexpected {set(decay) - set(want)} "
        f"(deviation={len(wrong)} bound=0)")


# --- gate 4: random depth ------------------------------------------------------------------------------------

@pytest.mark.parametrize("max_iter", [1, 2, 3, 5])
def test_random_depth_covers_exactly_one_to_max_iter(max_iter: int) -> None:
    n = 600
    draws = Counter(depth_for_step(7, s, max_iter, True) for s in range(n))
    assert set(draws) == set(range(1, max_iter + 1)), f"depths drawn {sorted(draws)} for max_iter={max_iter}"
    # Uniform: each count ~ Binomial(n, 1/M); 5 sd is a false alarm once in ~3.5 million.
    p = 1 / max_iter
    for k, c in draws.items():
        z = abs(c - n * p) / math.sqrt(n * p * (1 - p)) if max_iter > 1 else 0.0
        assert z < 5, f"depth {k} drawn {c} times of {n} (deviation={z:.2f} bound=5 sd)"
    assert {depth_for_step(7, s, max_iter, False) for s in range(50)} == {max_iter}
    assert [depth_for_step(7, s, max_iter, True) for s in range(50)] == \
        [depth_for_step(7, s, max_iter, True) for s in range(50)]  # a pure function of (seed, step)


def test_the_loop_runs_the_depth_drawn_for_each_step(tmp_path: Path) -> None:
    steps, seed = 16, 5
    seen = run(tmp_path, "model.max_iter=3", "model.random_depth=true", f"train.steps={steps}",
               "train.eval_every=16", f"train.seed={seed}", "train.readout=all")
    drawn = [depth_for_step(seed, s, 3, True) for s in range(steps)]
    assert len(set(drawn)) == 3, "the test needs a sequence that visits every depth"
    ran = [v.attn_calls for v in seen.steps]  # one attention sublayer per iteration that ran
    readouts = [v.readouts for v in seen.steps]  # readout=all: one per iteration that ran
    bad = [s for s in range(steps) if not ran[s] == readouts[s] == drawn[s]]
    assert not bad, (f"steps {bad}: drew {[drawn[s] for s in bad]}, ran {[ran[s] for s in bad]} iterations "
                     f"(deviation={len(bad)} bound=0)")


# --- gate 1: what the loss trains ------------------------------------------------------------------------------

def _readout_query_grads(tmp_path: Path, readout: str) -> torch.Tensor:
    seen = run(tmp_path / readout, "model.use_attnres=true", "model.max_iter=3", "train.steps=1",
               "train.eval_every=1", f"train.readout={readout}", "train.grad_clip=0")
    (view,) = seen.steps
    n_slots = 2 * 3
    return view.grads["arm.queries"][n_slots:].double()  # one row per readout point (after iteration k)


def test_readout_all_trains_every_readout_and_last_only_the_final_one(tmp_path: Path) -> None:
    """AttnRes gives every readout point its own query, which only that readout's logits depend on, so the
    gradient on readout k's query comes from readout k's cross-entropy alone. With ``all`` the loss is the
    mean over the 3 readouts: every row is non-zero, and the last row is exactly 1/3 of the ``last`` run's
    (same weights, same batch; no clipping). With ``last`` the first two rows are exactly zero."""
    g_all = _readout_query_grads(tmp_path, "all")
    g_last = _readout_query_grads(tmp_path, "last")
    norms_all = g_all.norm(dim=-1)
    assert (norms_all > 0).all(), f"readout=all left readout(s) untrained: grad norms {norms_all.tolist()}"
    untrained = g_last[:2].abs().max().item()
    assert untrained == 0.0, f"readout=last trained an earlier readout (deviation={untrained:.3e} bound=0)"
    assert g_last[2].norm() > 0
    # The mean's 1/3 is one float32 multiply on each of the same products: relative error ~1e-7.
    dev = ((3 * g_all[2] - g_last[2]).norm() / g_last[2].norm()).item()
    assert dev < 1e-5, f"readout=all weighs the last readout by {1 / 3} ? (deviation={dev:.3e} bound=1e-5)"
