"""Learned-value probes (dormouse.arms.probes.learned_values) against independent oracles.

* AttnRes: a float64 reference written from Eq. 2-4 and Eq. 6, on sources captured by forward hooks from a
  float64 copy of the model (the probe drives the loop itself, in float32); the probe's per-token weights
  rebuild the sublayer inputs the model's own read produced; at initialisation the map is uniform.
* GR: a float64 reference of sigmoid(W RMSNorm(x) + b_s) on the hooked sublayer inputs; sigmoid(-2) at init.
* ReZero: the planted alphas.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from dormouse.arms.probes import learned_values
from dormouse.config.schema import compose_config
from dormouse.model.looped import LoopedByteLM
from dormouse.ops.attnres import block_sources
from tests.helpers.model_hooks import hooked_trace

ARMS = {
    "full": ["model.use_attnres=true"],
    "block2": ["model.use_attnres=true", "model.attnres.block_size=2"],
    "block4_uneven": ["model.use_attnres=true", "model.attnres.block_size=4"],  # L = 6: a short last block
    "input_query": ["model.use_attnres=true", "model.attnres.query=input"],
    "sqrt_d_no_gain": ["model.use_attnres=true", "model.attnres.form=sqrt_d", "model.attnres.gain=false"],
}


def tiny(*overrides: str) -> LoopedByteLM:
    cfg = compose_config(["preset=tiny", "model.max_iter=3", *overrides])
    return LoopedByteLM(cfg.model, seed=0).eval()


def eval_batch(n: int = 6, seq: int = 16) -> torch.Tensor:
    return torch.randint(0, 256, (n, seq), generator=torch.Generator().manual_seed(5))


def plant_attnres(model: LoopedByteLM) -> None:
    """Planted, non-trivial queries/gains (the 'saved' parameters): scores of O(1-5) per source."""
    g = torch.Generator().manual_seed(11)
    arm = model.arm
    with torch.no_grad():
        scale = model.d_model if arm.form == "sqrt_d" else 1  # sqrt_d scores are d times smaller
        arm.queries.copy_(scale * torch.randn(arm.queries.shape, generator=g))
        if arm.gains is not None:
            arm.gains.copy_(1 + 0.3 * torch.randn(arm.gains.shape, generator=g))
        if arm.query_proj is not None:
            arm.query_proj.copy_(0.2 * torch.randn(arm.query_proj.shape, generator=g))
        for p in (model.attn.proj.weight, model.mlp.down.weight):  # larger outputs: sources of distinct size
            p.mul_(20)


def reference_sources(emb: torch.Tensor, outs: list[torch.Tensor], n_seen: int, block: int | None) -> list:
    """Eq. 6 by hand: Full = [emb, f_1 .. f_n]; Block S = [emb, complete block sums..., partial sum]."""
    seen = outs[:n_seen]
    if not block:
        return [emb, *seen]
    groups = [seen[i:i + block] for i in range(0, len(seen), block)]
    return [emb] + [torch.stack(gr).sum(dim=0) for gr in groups]


# F.rms_norm(x, shape) without eps uses finfo(x.dtype).eps: the float32 model's equation has eps = 2^-23,
# which matters next to the embedding's mean square (~4e-4). The float64 reference keeps the float32 model's eps.
F32_EPS = torch.finfo(torch.float32).eps


@torch.no_grad()
def reference_map(model: LoopedByteLM, idx: torch.Tensor) -> tuple[list[list[float]], list[float]]:
    """float64 per-read mean weights and mean entropy, from the saved parameters and the sources.

    The sources are the model's own (hooked on its plain float32 forward), then promoted to float64: the
    gate compares the probe's depth-attention arithmetic, not float32-vs-float64 drift through the network.
    """
    emb, _, outs = hooked_trace(model, idx)
    emb, outs = emb.double(), [o.double() for o in outs]
    arm = model.arm
    n_slots, d = 2 * model.max_iter, model.d_model
    weights, entropy = [], []
    for r in range(n_slots + model.max_iter):
        n_seen = r if r < n_slots else 2 * (r - n_slots + 1)
        srcs = reference_sources(emb, outs, n_seen, arm.block_size)
        w = arm.queries[r].double()
        if arm.query_proj is not None:  # q = w + U RMSNorm(v_last), RMSNorm without gain
            last = srcs[-1]
            last = last / torch.sqrt((last ** 2).mean(-1, keepdim=True) + F32_EPS)
            w = w + torch.einsum("btd,ed->bte", last, arm.query_proj[r].double())
        g = arm.gains[r].double() if arm.gains is not None else torch.ones(d, dtype=torch.float64)
        scores = []
        for v in srcs:
            key = v / torch.sqrt((v ** 2).mean(-1, keepdim=True) + arm.eps) * g
            s = (key * w).sum(-1)
            scores.append(s / d if arm.form == "sqrt_d" else s)
        s = torch.stack(scores)
        a = torch.exp(s - s.max(0).values)
        a = a / a.sum(0)
        weights.append([float(a[i].mean()) for i in range(len(srcs))])
        entropy.append(float((-(a * torch.log(a))).sum(0).mean()))
    return weights, entropy


@pytest.mark.parametrize("variant", list(ARMS))
def test_attnres_map_equals_an_independent_float64_recomputation(variant: str):
    model = tiny(*ARMS[variant])
    plant_attnres(model)
    idx = eval_batch()
    got = learned_values(model, idx, batch_size=4)  # two batches, one short: the accumulation is per token
    ref_w, ref_h = reference_map(model, idx)
    assert len(got.weights) == len(ref_w) == 3 * 3
    # float32 probe vs float64 reference on the same sources: a score is a d=32 dot product with |s| <~ 10;
    # float32 rounding (u = 6e-8) random-walks to ~ sqrt(32) * u * 10 ~ 3.4e-6 on it, a softmax weight moves
    # by at most |ds|/2 ~ 1.7e-6, and token means do not amplify: 1e-5 is a 6x margin (measured: ~2e-8).
    # Entropy: |dH| <= sum_i |d alpha_i| (|ln alpha_i| + 1) <= 7 * 1.7e-6 * 4.5 (alpha_i > 0.03 here): 1e-4.
    # Dropping the key-norm eps (1e-6 next to the embedding's mean square ~4e-4) moves weights by ~1e-3.
    dev_w = max(abs(g - r) for gr, rr in zip(got.weights, ref_w) for g, r in zip(gr, rr))
    dev_h = max(abs(g - r) for g, r in zip(got.entropy, ref_h))
    assert dev_w <= 1e-5, f"{variant}: weights deviation={dev_w:.3e} bound=1e-5"
    assert dev_h <= 1e-4, f"{variant}: entropy deviation={dev_h:.3e} bound=1e-4"
    for row, ref in zip(got.weights, ref_w):  # columns a read cannot see are NaN, the rest sum to 1
        assert all(math.isnan(v) for v in row[len(ref):])
        assert abs(sum(row[:len(ref)]) - 1) < 1e-5
    # The planted map is not trivially uniform (the gate would otherwise pass for a constant).
    assert max(max(r) - min(r) for r in ref_w if len(r) > 1) > 0.2


@pytest.mark.parametrize("variant", ["full", "block2", "input_query"])
def test_probe_weights_rebuild_the_inputs_the_models_read_produced(variant: str):
    """The probe's per-token weights x the sources = each sublayer's actual input (the model's own read)."""
    model = tiny(*ARMS[variant])
    plant_attnres(model)
    emb, inputs, outs = hooked_trace(model, eval_batch())
    arm = model.arm
    worst = 0.0
    for r, h in enumerate(inputs):
        srcs = block_sources(emb, outs[:r], arm.block_size or 1)
        alpha = arm.read_weights(r, srcs)
        rebuilt = (alpha.unsqueeze(-1) * torch.stack(srcs)).sum(0)
        worst = max(worst, float(((rebuilt - h).abs() / (h.abs().max() + 1e-12)).max().detach()))
    # float32 weighted sums of <= 7 sources: relative 1e-5 bounds the rounding of both paths.
    assert worst <= 1e-5, f"{variant}: deviation={worst:.3e} bound=1e-5 (relative to the input's scale)"


@pytest.mark.parametrize("variant", ["full", "block2"])
def test_attnres_map_at_init_is_uniform_with_entropy_ln_n(variant: str):
    model = tiny(*ARMS[variant])  # zero pseudo-queries: every read is the plain mean of its sources
    got = learned_values(model, eval_batch(), batch_size=8)
    for row, h in zip(got.weights, got.entropy):
        n = sum(not math.isnan(v) for v in row)
        assert all(abs(v - 1 / n) < 1e-6 for v in row[:n]) and abs(h - math.log(n)) < 1e-5
    key, value = got.summary()
    assert key == "emb_w" and abs(value - sum(r[0] for r in got.weights) / len(got.weights)) < 1e-12


def test_attnres_map_labels_reads_and_sources():
    got = learned_values(tiny(*ARMS["block2"]), eval_batch(), batch_size=8)
    assert got.reads == ["attn1", "mlp1", "attn2", "mlp2", "attn3", "mlp3", "out1", "out2", "out3"]
    assert got.sources == ["emb", "block1", "block2", "block3"]
    full = learned_values(tiny(*ARMS["full"]), eval_batch(), batch_size=8)
    assert full.sources == ["emb", "attn1", "mlp1", "attn2", "mlp2", "attn3", "mlp3"]
    assert set(full.to_row()) == {"probe/reads", "probe/sources", "probe/weights", "probe/entropy"}


def test_gr_gates_equal_a_float64_recomputation_and_start_at_sigmoid_minus_2():
    model = tiny("model.use_gr=true")
    at_init = learned_values(model, eval_batch(), batch_size=4)
    s2 = 1 / (1 + math.exp(2))  # W = 0, b = -2: the gate is sigmoid(-2) on every channel, spread 0
    dev = max(max(abs(g - s2) for g in at_init.gate_mean), max(at_init.gate_spread))
    assert dev < 1e-7, f"gates at init: deviation={dev:.3e} bound=1e-7 (float32 sigmoid(-2))"

    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        model.arm.gate_attn.weight.copy_(0.5 * torch.randn(model.arm.gate_attn.weight.shape, generator=g))
        model.arm.gate_mlp.weight.copy_(0.5 * torch.randn(model.arm.gate_mlp.weight.shape, generator=g))
        model.arm.bias.copy_(torch.randn(model.arm.bias.shape, generator=g))
    got = learned_values(model, eval_batch(), batch_size=4)
    m64 = copy.deepcopy(model).double()
    _, inputs, _ = hooked_trace(m64, eval_batch())
    with torch.no_grad():
        for s, x in enumerate(inputs):
            W = (m64.arm.gate_attn if s % 2 == 0 else m64.arm.gate_mlp).weight
            xn = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + F32_EPS)
            gate = 1 / (1 + torch.exp(-(xn @ W.T + m64.arm.bias[s])))
            per_channel = gate.reshape(-1, gate.shape[-1]).mean(0)
            mean, spread = float(per_channel.mean()), float(((per_channel - per_channel.mean()) ** 2).mean().sqrt())
            # float32 sigmoid of O(3) arguments after <= 6 sublayers: error ~1e-6; 1e-5 is a 10x margin.
            dev = max(abs(got.gate_mean[s] - mean), abs(got.gate_spread[s] - spread))
            assert dev <= 1e-5, f"slot {s}: deviation={dev:.3e} bound=1e-5"
    assert max(got.gate_spread) > 0.05  # the planted gates differ over channels


def test_rezero_alpha_per_slot_is_the_learned_scale():
    model = tiny()
    with torch.no_grad():
        model.arm.alpha.copy_(torch.tensor([0.5, -0.25, 0.125, 1.0, 0.0, 2.0]))
    got = learned_values(model, eval_batch(), batch_size=8)
    assert got.alpha == [0.5, -0.25, 0.125, 1.0, 0.0, 2.0] and got.slots[:2] == ["attn1", "mlp1"]
    assert got.summary() == ("alpha", sum(got.alpha) / 6) and got.to_row() == {"probe/alpha": got.alpha}
