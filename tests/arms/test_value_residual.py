"""Gates for the value residual (dormouse.arms.value_residual; ResFormer, arXiv:2410.17897) and the attention seam it
uses (ResidualArm.mix_attention, docs/arms.md "The attention seam").

Oracles independent of the implementation:
* a float64 reference of the whole looped model written here from the equations (RMSNorm, q/k/v projections, RoPE as
  a complex rotation, causal softmax with an explicit mask, ``V_s <- l1_s V_first + l2_s V_s``, SwiGLU, the pre-norm
  residual, the tied head), run on the model's own weights;
* central finite differences (``torch.autograd.gradcheck``) for the gradients of the lambdas;
* gold literals on a one-head, d = 2, two-token toy, computed by hand in the comments;
* pre-norm's own logits, which lambda_1 = 0, lambda_2 = 1 must give bit for bit.
Notation: u = 2**-53 ~ 1.1e-16 (float64).
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import Tensor

from dormouse.arms.value_residual import ValueResidual
from dormouse.config.schema import compose_config, validate
from dormouse.model.looped import CausalSelfAttention, LoopedByteLM

F64 = torch.float64
MAX_ITER = 3


def vr_model(*extra: str) -> LoopedByteLM:
    cfg = compose_config(["preset=tiny", f"model.max_iter={MAX_ITER}", "model.use_value_residual=true", *extra])
    return LoopedByteLM(cfg.model, seed=0)


def batch(seed: int = 0, n: int = 2, seq: int = 16) -> Tensor:
    return torch.randint(0, 256, (n, seq), generator=torch.Generator().manual_seed(seed))


def shaken(model: LoopedByteLM, seed: int = 3) -> LoopedByteLM:
    """Every shared weight moved off its initial value (gains off 1), so each term of the forward shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("arm."):
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * (0.3 if p.ndim == 1 else 0.05))
    return model


# ----------------------------------------------------------------------------------------------------
# the float64 reference, written from the equations
# ----------------------------------------------------------------------------------------------------


def ref_rms(x: Tensor, gain: Tensor, eps: float) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain


def ref_rope(x: Tensor, base: float) -> Tensor:
    """x [B, T, H, hd]: each pair (x_j, x_{j+hd/2}) times e^{i p theta_j}, theta_j = base^(-2j/hd)."""
    half = x.shape[-1] // 2
    pos = torch.arange(x.shape[1], dtype=F64)
    theta = base ** (-2.0 * torch.arange(half, dtype=F64) / x.shape[-1])
    phase = torch.polar(torch.ones(x.shape[1], half, dtype=F64), pos[:, None] * theta[None, :])
    z = torch.complex(x[..., :half], x[..., half:]) * phase[None, :, None, :]
    return torch.cat((z.real, z.imag), dim=-1)


def ref_forward(model: LoopedByteLM, idx: Tensor, lambda1: Tensor, lambda2: Tensor) -> list[Tensor]:
    """The looped model with the value residual: V_first is iteration 1's (pre-mix) values; every attention slot s
    reads ``l1_s V_first + l2_s V_s``; ``x <- x + f(x)`` at every slot; logits = RMSNorm(x) E^T after each iteration."""
    attn, mlp, emb = model.attn, model.mlp, model.embed.weight
    d, h = model.d_model, attn.n_heads
    hd, hidden = d // h, mlp.down.weight.shape[1]
    x = emb[idx]
    b, t, _ = x.shape
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    v_first, logits = None, []
    for it in range(MAX_ITER):
        n = ref_rms(x, attn.norm.weight, attn.norm.eps)
        q, k, v = (n @ attn.qkv.weight.T).split(d, dim=-1)
        q, k = (ref_rope(z.reshape(b, t, h, hd), attn.rope_base) for z in (q, k))
        v = v.reshape(b, t, h, hd)
        if v_first is None:
            v_first = v
        v = lambda1[it] * v_first + lambda2[it] * v
        heads = []
        for j in range(h):
            scores = q[:, :, j] @ k[:, :, j].transpose(1, 2) / math.sqrt(hd)
            heads.append(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v[:, :, j])
        x = x + torch.cat(heads, dim=-1) @ attn.proj.weight.T
        n = ref_rms(x, mlp.norm.weight, mlp.norm.eps)
        a, g = n @ mlp.gate_up.weight[:hidden].T, n @ mlp.gate_up.weight[hidden:].T
        x = x + (a / (1 + torch.exp(-a)) * g) @ mlp.down.weight.T
        logits.append(ref_rms(x, model.final_norm.weight, model.final_norm.eps) @ emb.T)
    return logits


def exact_rope_tables(model: LoopedByteLM) -> None:
    """The model's RoPE tables as float64 values (its own are built in float32: ~1e-7, not the equations' rotation)."""
    attn = model.attn
    half = attn.head_dim // 2
    theta = attn.rope_base ** (-2.0 * torch.arange(half, dtype=F64) / attn.head_dim)
    angles = torch.arange(attn.rope_cos.shape[0], dtype=F64)[:, None] * theta[None, :]
    attn.rope_cos, attn.rope_sin = angles.cos(), angles.sin()


def float64_model(seed: int = 7) -> LoopedByteLM:
    model = shaken(vr_model()).double()
    exact_rope_tables(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.arm.lambda1.copy_(torch.rand(MAX_ITER, generator=gen, dtype=F64) * 2 - 0.5)
        model.arm.lambda2.copy_(torch.rand(MAX_ITER, generator=gen, dtype=F64) * 2 - 0.5)
    return model


def test_forward_in_float64_equals_the_reference_written_from_the_equations():
    model = float64_model()
    idx = batch(seq=12)
    with torch.no_grad():
        got = model(idx)
        want = ref_forward(model, idx, model.arm.lambda1, model.arm.lambda2)
    for k, (a, w) in enumerate(zip(got, want, strict=True), start=1):
        dev = (a - w).abs().max().item()
        # float64 throughout (the tables too): a few hundred roundings of O(1-10) values, ~1e-14; a V_first from
        # the wrong slot or a swapped lambda moves O(0.1-1) logits by O(1e-2) at least
        assert dev <= 1e-12, f"readout {k}: model vs the float64 reference (deviation={dev:.3e}, bound=1e-12)"


def test_lambda_gradients_equal_central_finite_differences():
    """gradcheck in float64 on lambda_1, lambda_2 through the whole forward (functional_call plants them)."""
    model = float64_model(8)
    idx = batch(seq=6, n=1)
    r = [torch.randn(1, 6, 256, generator=torch.Generator().manual_seed(9 + k), dtype=F64) for k in range(MAX_ITER)]

    def loss(lambda1: Tensor, lambda2: Tensor) -> Tensor:
        logits = torch.func.functional_call(model, {"arm.lambda1": lambda1, "arm.lambda2": lambda2}, (idx,))
        return sum((lg * w).sum() for lg, w in zip(logits, r, strict=True))

    lambdas = tuple(p.detach().clone().requires_grad_(True) for p in (model.arm.lambda1, model.arm.lambda2))
    # eps 1e-6 central differences: truncation ~eps^2 |f'''| and rounding ~u |f| / eps ~1e-9 on |f| ~ 10
    assert torch.autograd.gradcheck(loss, lambdas, eps=1e-6, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------------------------------
# gold numbers on a toy, by hand
# ----------------------------------------------------------------------------------------------------


def toy_attention() -> CausalSelfAttention:
    """d = 2, one head: W_q = 0 (every score 0, so a causal softmax is 1 at token 0 and 1/2, 1/2 at token 1, whatever
    RoPE does), W_k = I, W_v = diag(1, 2), W_o = I, norm gain 1 with eps 0 (inputs of mean square 1 pass unchanged)."""
    attn = CausalSelfAttention(2, 1, 10000.0).double()
    with torch.no_grad():
        attn.norm.eps = 0.0
        attn.qkv.weight.copy_(torch.tensor([[0, 0], [0, 0], [1, 0], [0, 1], [1, 0], [0, 2]], dtype=F64))
        attn.proj.weight.copy_(torch.eye(2, dtype=F64))
    return attn


def test_toy_two_attention_slots_give_the_hand_computed_outputs():
    """Slot 0 (l1 = 0.25, l2 = 0.5) then slot 2 (l1 = 2, l2 = -1) through the seam, two tokens each."""
    attn = toy_attention()
    arm = ValueResidual(2, 2).double()
    with torch.no_grad():
        arm.lambda1.copy_(torch.tensor([0.25, 2.0]))
        arm.lambda2.copy_(torch.tensor([0.5, -1.0]))
    x0 = torch.tensor([[[1.0, 1.0], [1.0, -1.0]]], dtype=F64)
    state = arm.begin(x0)
    out0 = attn(arm.sublayer_input(state, 0), mix=functools.partial(arm.mix_attention, state, 0))
    # V_0 = W_v x0 = [1, 2], [1, -2] = V_first; mixed: (0.25 + 0.5) V_0 = [0.75, 1.5], [0.75, -1.5]
    # token 0 reads itself: [0.75, 1.5]; token 1 the mean of both: [0.75, 0]
    want0 = torch.tensor([[[0.75, 1.5], [0.75, 0.0]]], dtype=F64)
    state = arm.absorb(state, 0, out0)
    # the pre-norm residual: x0 + out0 = [1.75, 2.5], [1.75, -1]
    want_x = torch.tensor([[[1.75, 2.5], [1.75, -1.0]]], dtype=F64)
    x2 = torch.tensor([[[-1.0, 1.0], [1.0, 1.0]]], dtype=F64)
    out2 = attn(x2, mix=functools.partial(arm.mix_attention, state, 2))
    # V_2 = [-1, 2], [1, 2]; mixed 2 V_first - V_2: [2 + 1, 4 - 2] = [3, 2] and [2 - 1, -4 - 2] = [1, -6]
    # token 0: [3, 2]; token 1: ([3, 2] + [1, -6]) / 2 = [2, -2]
    want2 = torch.tensor([[[3.0, 2.0], [2.0, -2.0]]], dtype=F64)
    for what, got, want in (("slot 0", out0, want0), ("state after slot 0", state.x, want_x), ("slot 2", out2, want2)):
        dev = (got - want).abs().max().item()
        # exact in float64 up to a few roundings of O(1) values (the softmax of equal scores is exactly 1/2)
        assert dev <= 1e-14, f"{what}: {got.tolist()} vs by hand {want.tolist()} (deviation={dev:.3e}, bound=1e-14)"


# ----------------------------------------------------------------------------------------------------
# what it reduces to, what it counts, its options
# ----------------------------------------------------------------------------------------------------


def test_lambda1_zero_lambda2_one_gives_prenorms_logits_exactly():
    """V_s <- 0 V_first + 1 V_s is V_s: the arm is then the plain pre-norm residual, bit for bit."""
    prenorm = shaken(LoopedByteLM(compose_config(["preset=tiny", f"model.max_iter={MAX_ITER}",
                                                  "model.use_prenorm=true"]).model, seed=0))
    for model in (shaken(vr_model("model.value_residual.lambda_init=0.0")),
                  shaken(vr_model("model.value_residual.learnable=false", "model.value_residual.lambda_init=0.0"))):
        assert torch.all(model.arm.lambda1 == 0) and torch.all(model.arm.lambda2 == 1)
        with torch.no_grad():
            for k, (a, b) in enumerate(zip(model(batch()), prenorm(batch()), strict=True), start=1):
                dev = (a - b).abs().max().item()
                assert dev == 0.0, f"readout {k}: lambda = (0, 1) vs pre-norm (deviation={dev:.3e}, bound=0)"


def test_fixed_lambdas_are_resformers_halves_with_no_parameter():
    learned, fixed = vr_model(), vr_model("model.value_residual.learnable=false")
    assert [n for n, _ in fixed.arm.named_parameters()] == []
    assert [n for n, _ in learned.arm.named_parameters()] == ["lambda1", "lambda2"]
    with torch.no_grad():
        for k, (a, b) in enumerate(zip(learned(batch()), fixed(batch()), strict=True), start=1):
            dev = (a - b).abs().max().item()
            assert dev == 0.0, f"readout {k}: fixed 0.5/0.5 vs learnable at init (deviation={dev:.3e}, bound=0)"
    assert fixed.arm.learned([]) == {"lambda1": [0.5] * MAX_ITER, "lambda2": [0.5] * MAX_ITER}


def test_each_attention_slots_lambdas_move_every_readout_from_its_iteration_on():
    model = shaken(vr_model())
    idx = batch()
    with torch.no_grad():
        before = model(idx)
        for i in range(MAX_ITER):
            for param in (model.arm.lambda1, model.arm.lambda2):
                saved = param[i].item()
                param[i] = saved + 0.7
                after = model(idx)
                param[i] = saved
                for k in range(MAX_ITER):
                    dev = (after[k] - before[k]).abs().max().item()
                    if k < i:  # an earlier readout never reads a later slot
                        assert dev == 0.0, f"lambda of attn{i + 1} moved readout {k + 1} (deviation={dev:.3e})"
                    else:
                        assert dev > 1e-4, f"lambda of attn{i + 1} left readout {k + 1} (deviation={dev:.3e}, >1e-4)"


def test_ran_counts_the_mix_at_attention_slots_and_the_residual_at_mlp_slots():
    model = vr_model()
    model(batch(), depth=3)
    assert model.counters.ran["value_residual"] == model.counters.asked["value_residual"] == 6
    model.counters.reset()
    calls: list[int] = []
    mix = model.arm.mix_attention
    model.arm.mix_attention = lambda state, slot, q, k, v: (calls.append(slot), mix(state, slot, q, k, v))[1]
    model(batch(), depth=2)
    assert calls == [0, 2], f"the seam was called at slots {calls}, want each attention slot once: [0, 2]"
    assert model.counters.ran["value_residual"] == model.counters.asked["value_residual"] == 4


def test_probe_reports_both_lambdas_per_attention_slot():
    model = vr_model()
    with torch.no_grad():
        model.arm.lambda1.copy_(torch.tensor([0.1, 0.2, 0.3]))
        model.arm.lambda2.copy_(torch.tensor([0.9, 0.8, 0.7]))
    fields = model.arm.learned([])
    assert fields["lambda1"] == pytest.approx([0.1, 0.2, 0.3]) and fields["lambda2"] == pytest.approx([0.9, 0.8, 0.7])
    assert ValueResidual.summarize(fields) == ("lambda1", pytest.approx(0.25))  # slots after the first
    row = {f"probe/{k}": v for k, v in fields.items()}
    assert ValueResidual.probe_scalars(row)["probe/lambda2/attn3"] == pytest.approx(0.7)


@pytest.mark.parametrize(("overrides", "field"), [
    (["model.use_value_residual=true", "model.value_residual.lambda_init=-0.1"], "lambda_init"),
    (["model.use_value_residual=true", "model.value_residual.lambda_init=1.5"], "lambda_init"),
    (["model.use_value_residual=true", "model.value_residual.lambda_init=nan"], "lambda_init"),
    (["model.value_residual.lambda_init=0.2"], "lambda_init"),  # an option of an arm not selected
    (["model.value_residual.learnable=false"], "learnable"),
])
def test_options_out_of_range_or_unselected_are_refused_naming_the_field(overrides: list[str], field: str):
    problems = validate(compose_config(["preset=tiny", *overrides]))
    assert any(f"model.value_residual.{field}" in line for line in problems), problems


def test_options_in_range_are_accepted():
    for extra in (["model.value_residual.lambda_init=0.0"], ["model.value_residual.lambda_init=1.0"],
                  ["model.value_residual.learnable=false"], []):
        assert validate(compose_config(["preset=tiny", "model.use_value_residual=true", *extra])) == []


# ----------------------------------------------------------------------------------------------------
# train.compile: the seam traced
# ----------------------------------------------------------------------------------------------------


def test_whole_compiled_forward_traces_the_seam_with_eager_losses_gradients_and_counts():
    """``train.compile_scope=whole`` traces through the seam (one graph, no break): eager's loss, gradients (the
    lambdas' included) and counts. The regional scope's two attention regions: tests/model/test_compile_regions.py."""
    from tests.helpers.compile_parity import compiled_against_eager

    torch._dynamo.reset()
    model = shaken(vr_model())
    with torch.no_grad():
        model.arm.lambda1.copy_(torch.tensor([0.3, 0.6, -0.2]))
    compiled = model.compile_whole(backend="aot_eager")  # fullgraph: a graph break is an error
    counts = compiled_against_eager(model, compiled, "value_residual", batch, (3, 2), every_parameter=True)
    assert counts == [(10, 10)] * 2, f"(ran, asked) eager, compiled = {counts} (want 2 * (3 + 2) each)"
