"""Each arm's starting point and the independence of its per-slot parameters.

The starting values are the papers' and are asserted as literal values (ReZero alpha = 0; GR W = 0 and
b = -2; AttnRes queries = 0 and key gains = 1). Per-slot independence: slot s belongs to iteration s // 2, so
changing only slot s's parameters may move the readouts at and after that iteration and must leave every
earlier readout bit-identical (the loop is causal in depth); AttnRes's readout point k has its own query,
which moves readout k alone.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from dormouse.arms.gr import GatedResidual
from dormouse.config.schema import compose_config
from dormouse.model.looped import LoopedByteLM

M, D = 3, 32  # iterations, width of the tiny preset
ARMS = {"rezero": [], "gr": ["model.use_gr=true"], "attnres": ["model.use_attnres=true"],
        "attnres_block": ["model.use_attnres=true", "model.attnres.block_size=2"],
        "attnres_input_query": ["model.use_attnres=true", "model.attnres.query=input"],
        "laurel": ["model.use_laurel=true"], "mhc": ["model.use_mhc=true"]}


@functools.cache
def _model_cfg(arm: str) -> Any:
    return compose_config(["preset=tiny", f"model.max_iter={M}", *ARMS[arm]]).model  # Hydra: once per arm


def model_for(arm: str, seed: int = 0) -> LoopedByteLM:
    return LoopedByteLM(_model_cfg(arm), seed=seed)


def test_each_arm_starts_from_its_papers_values() -> None:
    rezero = model_for("rezero", seed=11).arm
    assert torch.equal(rezero.alpha.detach(), torch.zeros(2 * M)), rezero.alpha
    gr = model_for("gr", seed=11).arm
    assert torch.equal(gr.gate_attn.weight.detach(), torch.zeros(D, D)), "GR W_attn is not 0 at init"
    assert torch.equal(gr.gate_mlp.weight.detach(), torch.zeros(D, D)), "GR W_mlp is not 0 at init"
    assert torch.equal(gr.bias.detach(), torch.full((2 * M, D), -2.0)), (
        f"GR b is not -2 at init (deviation={(gr.bias.detach() + 2).abs().max().item():.3e} bound=0)")
    for arm in ("attnres", "attnres_input_query"):
        a = model_for(arm, seed=11).arm
        n_reads = 2 * M + M  # one per sublayer slot, one per readout point
        assert torch.equal(a.queries.detach(), torch.zeros(n_reads, D)), (
            f"{arm}: queries not 0 (deviation={a.queries.detach().abs().max().item():.3e} bound=0)")
        assert torch.equal(a.gains.detach(), torch.ones(n_reads, D)), f"{arm}: key gains not 1"
    assert torch.equal(model_for("attnres_input_query").arm.query_proj.detach(), torch.zeros(3 * M, D, D))


def live(model: LoopedByteLM) -> LoopedByteLM:
    """Non-trivial sublayers, and ReZero off zero (at alpha = 0 every sublayer is invisible)."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in [*model.attn.parameters(), *model.mlp.parameters()]:
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        if hasattr(model.arm, "alpha"):
            model.arm.alpha.fill_(0.3)
    return model


def bump_slot(model: LoopedByteLM, arm: str, slot: int) -> None:
    """Move only sublayer slot ``slot``'s own parameters."""
    gen = torch.Generator().manual_seed(100 + slot)
    with torch.no_grad():
        if arm == "rezero":
            model.arm.alpha[slot] += 0.5
        elif arm == "gr":
            model.arm.bias[slot] += torch.randn(D, generator=gen)
        elif arm == "laurel":
            model.arm.beta[slot] += 0.5
            model.arm.lr_up_weight[slot] += torch.randn(model.arm.lr_up_weight[slot].shape, generator=gen)
        elif arm == "mhc":
            model.arm.bias[slot] += torch.randn(model.arm.bias.shape[1], generator=gen)
        else:
            model.arm.queries[slot] += torch.randn(D, generator=gen)
            model.arm.gains[slot] *= 1.5


@pytest.mark.parametrize("arm", ["rezero", "gr", "attnres", "attnres_block", "laurel", "mhc"])
@pytest.mark.parametrize("slot", range(2 * M))
def test_a_slots_parameters_move_only_the_readouts_at_and_after_its_iteration(arm: str, slot: int) -> None:
    model = live(model_for(arm)).eval()
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(idx)
        bump_slot(model, arm, slot)
        after = model(idx)
    it = slot // 2
    # AttnRes's first read has one source, the embedding: its softmax weight is 1 whatever the query and gain
    # (Eq. 2-4), so slot 0's parameters move nothing at all.
    one_source = arm.startswith("attnres") and slot == 0
    for k in range(M):
        moved = (after[k] - before[k]).abs().max().item()
        if k < it or one_source:
            assert moved == 0.0, (f"{arm}: slot {slot} (iteration {it}) moved readout {k}, before it "
                                  f"(deviation={moved:.3e} bound=0)")
        else:
            # O(1) changes of a live slot move O(1) logits by >> 1e-4; a slot that is not read moves them by 0.
            assert moved > 1e-4, (f"{arm}: slot {slot} (iteration {it}) did not move readout {k} "
                                  f"(deviation={moved:.3e} bound=>1e-4)")


@pytest.mark.parametrize("arm", ["attnres", "attnres_block"])
@pytest.mark.parametrize("k", range(M))
def test_an_attnres_readout_query_moves_its_own_readout_only(arm: str, k: int) -> None:
    model = live(model_for(arm)).eval()
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(idx)
        model.arm.queries[2 * M + k] += torch.randn(D, generator=torch.Generator().manual_seed(9))
        after = model(idx)
    for j in range(M):
        moved = (after[j] - before[j]).abs().max().item()
        if j == k:
            assert moved > 1e-4, f"readout query {k} did not move readout {k} (deviation={moved:.3e} bound=>1e-4)"
        else:
            assert moved == 0.0, f"readout query {k} moved readout {j} (deviation={moved:.3e} bound=0)"


def test_gr_gate_reads_the_rms_normalised_state() -> None:
    """x <- x + sigmoid(W RMSNorm(x) + b_s) * f(x), against a float64 reference written from the formula,
    and invariant to the scale of x (RMSNorm removes it; a gate reading raw x saturates instead)."""
    gen = torch.Generator().manual_seed(4)
    arm = GatedResidual(D, M)
    with torch.no_grad():
        arm.gate_attn.weight.copy_(torch.randn(D, D, generator=gen) / D**0.5)
        arm.bias.add_(torch.randn(2 * M, D, generator=gen) * 0.5)
    x = torch.randn(2, 5, D, generator=gen) * 3.0
    out = torch.randn(2, 5, D, generator=gen)
    slot = 2  # an attention slot of the second iteration
    with torch.no_grad():
        got = arm.absorb(x, slot, out).double()
        x64, o64 = x.double(), out.double()
        normed = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + torch.finfo(torch.float32).eps)
        gate = torch.sigmoid(normed @ arm.gate_attn.weight.double().T + arm.bias[slot].double())
        want = x64 + gate * o64
        dev = (got - want).abs().max().item()
        # float32 matvec of length 32 on O(1) values: ~1e-6 on the pre-activation, x 0.25 (sigmoid slope),
        # x |f| ~ 3, plus the float32 rounding of x (|x| ~ 10): ~2e-6. Bound with margin.
        assert dev < 2e-5, f"GR update vs float64 reference (deviation={dev:.3e} bound=2e-5)"
        scaled = arm.absorb(7.0 * x, slot, out) - 7.0 * x
        dev_scale = (scaled - (arm.absorb(x, slot, out) - x)).abs().max().item()
        assert dev_scale < 2e-5, f"GR gate depends on the scale of x (deviation={dev_scale:.3e} bound=2e-5)"


@pytest.mark.parametrize(("arm", "param"), [("mhc", "weight"), ("laurel", "lr_down_weight")])
def test_an_arms_random_init_follows_the_seed_and_leaves_the_shared_weights_every_arms(arm: str, param: str):
    extra = ["model.laurel.a_init=xavier"] if arm == "laurel" else []
    cfgs = [compose_config(["preset=tiny", f"model.use_{arm}=true", *extra]) for _ in range(2)]
    a, b, again = (LoopedByteLM(cfg.model, seed=s) for cfg, s in ((cfgs[0], 1), (cfgs[1], 2), (cfgs[0], 1)))
    draw = {m: dict(m.arm.named_parameters())[param] for m in (a, b, again)}
    assert not torch.equal(draw[a], draw[b]) and torch.equal(draw[a], draw[again])
    plain = LoopedByteLM(compose_config(["preset=tiny"]).model, seed=1)
    assert torch.equal(a.attn.qkv.weight, plain.attn.qkv.weight) and torch.equal(a.embed.weight, plain.embed.weight)
