"""The attention seam (ResidualArm.mix_attention, docs/arms.md "The attention seam") as a plugin author meets it: a
plugin file that mixes the keys of every attention slot with the first slot's, loaded with ``load_plugin``, moves the
logits, counts ran = asked, and runs under both ``train.compile`` scopes; an arm that does not override the seam is
handed nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dormouse.arms.base import ResidualArm
from dormouse.arms.registry import arm_classes, unregister_arm
from dormouse.config.schema import compose_config
from dormouse.model.looped import LoopedByteLM
from tests.helpers.plugin_arms import plugin_loaded

MAX_ITER = 3
NAME = "keyres_seam_test"

PLUGIN = f'''"""A key residual for the tests: attention slot s reads k_s + mu_s k_first (slot 0's keys, after RoPE)."""
import torch
from torch import nn

from dormouse.arms.base import ResidualArm


class KeyResidual(ResidualArm):
    """Key residual (test plugin): ``k_s <- k_s + mu_s k_first`` in attention, ``x <- x + f(x)``."""

    name = "{NAME}"

    def __init__(self, d_model, max_iter):
        super().__init__(d_model, max_iter)
        self.mu = nn.Parameter(torch.zeros(max_iter))

    def begin(self, embedding):
        return {{"x": embedding, "k_first": None}}

    def sublayer_input(self, state, slot):
        return state["x"]

    def mix_attention(self, state, slot, q, k, v):
        if state["k_first"] is None:
            state["k_first"] = k
        self.counters.count_ran(self.name)
        return q, k + self.mu[slot // 2].to(k.dtype) * state["k_first"], v

    def absorb(self, state, slot, output):
        state["x"] = state["x"] + output
        if slot % 2 == 1:
            self.counters.count_ran(self.name)
        return state

    def readout_input(self, state, k):
        return state["x"]

    def learned(self, traces):
        return {{"mu": [float(m) for m in self.mu.detach()]}}

    @classmethod
    def summarize(cls, fields):
        return "mu", sum(fields["mu"]) / len(fields["mu"])
'''


def batch(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(seed))


def model_of(*overrides: str) -> LoopedByteLM:
    model = LoopedByteLM(compose_config(["preset=tiny", f"model.max_iter={MAX_ITER}", *overrides]).model, seed=0)
    with torch.no_grad():  # q and k off their small init, so a change of the keys shows in the scores
        for p in model.attn.qkv.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.3)
    return model


@pytest.fixture
def key_plugin(tmp_path: Path):
    path = tmp_path / "key_residual_plugin.py"
    path.write_text(PLUGIN)
    with plugin_loaded(path) as plugin:
        try:
            yield plugin
        finally:
            unregister_arm(NAME)


def test_a_file_plugin_mixing_keys_moves_the_logits_and_counts_ran_equal_asked(key_plugin):
    assert key_plugin.arms == (NAME,) and arm_classes()[NAME].mixes_attention()
    model, prenorm = model_of(f"model.use_{NAME}=true"), model_of("model.use_prenorm=true")
    idx = batch()
    with torch.no_grad():
        at_zero, plain = model(idx), prenorm(idx)
        for k, (a, b) in enumerate(zip(at_zero, plain, strict=True), start=1):
            assert torch.equal(a, b), f"readout {k}: mu = 0 is k + 0 k_first, pre-norm's logits exactly"
        model.arm.mu.copy_(torch.tensor([0.0, 0.0, 1.5]))  # only the third attention slot's keys
        moved = model(idx)
    for k in range(MAX_ITER):
        dev = (moved[k] - at_zero[k]).abs().max().item()
        if k < 2:
            assert dev == 0.0, f"readout {k + 1} moved by a later slot's mu (deviation={dev:.3e}, bound=0)"
        else:
            assert dev > 1e-4, f"readout {k + 1}: mu of attn3 does not reach it (deviation={dev:.3e}, bound=>1e-4)"
    snap = model.counters.snapshot()
    assert snap[f"{NAME}_ran"] == snap[f"{NAME}_asked"] == 2 * 2 * MAX_ITER  # two forwards


@pytest.mark.parametrize("scope", ["whole", "regional"])
def test_a_file_plugin_using_the_seam_runs_compiled_with_eager_logits(key_plugin, scope: str):
    torch._dynamo.reset()
    model = model_of(f"model.use_{NAME}=true")
    with torch.no_grad():
        model.arm.mu.copy_(torch.tensor([0.5, -1.0, 1.5]))
        eager = model(batch())
    compiled = (model.compile_whole if scope == "whole" else model.compile_regions)(backend="aot_eager")
    model.counters.reset()
    with torch.no_grad():
        got = compiled(batch())
    for k, (a, b) in enumerate(zip(got, eager, strict=True), start=1):
        dev = (a - b).abs().max().item()
        # aot_eager runs eager's ops (tests/helpers/compile_parity.py): ~1e-7 on O(1) logits
        assert dev <= 1e-5, f"{scope}: readout {k} compiled vs eager (deviation={dev:.3e}, bound=1e-5)"
    assert model.counters.ran[NAME] == model.counters.asked[NAME] == 2 * MAX_ITER


class _NoSeamAttention(torch.nn.Module):
    """The model's attention, refusing any keyword: a driver that handed it a ``mix`` would fail."""

    def __init__(self, attn: torch.nn.Module) -> None:
        super().__init__()
        self.attn = attn

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.attn(h)


@pytest.mark.parametrize("arm", ["prenorm", "gr", "attnres"])
def test_an_arm_without_the_seam_is_handed_nothing(arm: str):
    assert not arm_classes()[arm].mixes_attention() and arm_classes()["value_residual"].mixes_attention()
    assert arm_classes()[arm].mix_attention is ResidualArm.mix_attention
    model = model_of(f"model.use_{arm}=true")
    with torch.no_grad():
        want = model(batch())
        model.sublayers = [_NoSeamAttention(model.attn), model.mlp]
        got = model(batch())
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
