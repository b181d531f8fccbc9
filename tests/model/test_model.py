"""Gates for the shared block's attention sublayer (dormouse.model.looped.CausalSelfAttention, docs/model.md).

The oracle is a float64 reference written in this file from the equations, independent of the
implementation: RMSNorm ``x / sqrt(mean(x^2) + eps) * g``; RoPE (Su et al. 2021) on the halves layout as a
*complex* multiplication ``(x1 + i x2) e^{i p theta_j}`` with ``theta_j = base^(-2j / head_dim)`` (the
implementation uses real cos/sin tables and a fused multiply-add, and its own backward); causal softmax
attention with an explicit mask. Gradients are checked against autograd of that reference.
Notation for bounds: u = 2**-53 ~ 1.1e-16 (float64), 2**-24 ~ 6e-8 (float32).

The bound for a float64 module: everything is float64 except the RoPE tables, which are built in float32
(``rope_tables``) like the model's. An angle p * theta_j (p < T = 9) then carries ~(T + 1) 2^-24 ~ 6e-7 of
error into each cos/sin entry, i.e. into each rotated q/k component of size ~1, and through scores of size
~1 into the output: ~1e-7 absolute at most (measured 1.3e-8). Bound ``_TABLE_BOUND = 2e-6``. A wrong angle,
a swapped half, a rotation the wrong way or a missing causal mask move outputs by O(0.1).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from dormouse.model.looped import CausalSelfAttention, SwiGLU, rope_qkv, rope_tables

F64 = torch.float64
D, HEADS, BASE = 16, 2, 10000.0
_TABLE_BOUND = 2e-6


def ref_rope(x: Tensor, base: float) -> Tensor:
    """x [B, T, H, hd] -> each run (x[..., j], x[..., j + hd/2]) rotated by the angle p * base^(-2j/hd)."""
    hd = x.shape[-1]
    half = hd // 2
    pos = torch.arange(x.shape[1], dtype=F64)
    theta = base ** (-2.0 * torch.arange(half, dtype=F64) / hd)
    phase = torch.polar(torch.ones(x.shape[1], half, dtype=F64), pos[:, None] * theta[None, :])  # [T, half]
    z = torch.complex(x[..., :half], x[..., half:]) * phase[None, :, None, :]
    return torch.cat((z.real, z.imag), dim=-1)


def ref_attention(x: Tensor, attn: CausalSelfAttention) -> Tensor:
    """Pre-norm causal self-attention with RoPE, float64, loops over heads and an explicit causal mask."""
    b, t, d = x.shape
    h, hd = attn.n_heads, d // attn.n_heads
    n = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + attn.norm.eps) * attn.norm.weight
    q, k, v = (n @ attn.qkv.weight.T).split(d, dim=-1)
    q, k = ref_rope(q.reshape(b, t, h, hd), attn.rope_base), ref_rope(k.reshape(b, t, h, hd), attn.rope_base)
    v = v.reshape(b, t, h, hd)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    heads = []
    for j in range(h):
        scores = q[:, :, j] @ k[:, :, j].transpose(1, 2) / math.sqrt(hd)  # [B, T, T]
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        heads.append(weights @ v[:, :, j])
    return torch.cat(heads, dim=-1) @ attn.proj.weight.T


def _attention(seed: int = 0) -> CausalSelfAttention:
    torch.manual_seed(seed)
    attn = CausalSelfAttention(D, HEADS, BASE).double()
    with torch.no_grad():  # a gain away from 1, so that a dropped gain shows
        attn.norm.weight.copy_(1 + 0.3 * torch.randn(D, dtype=F64))
    return attn


def _dev(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item()


def test_attention_matches_the_float64_reference() -> None:
    attn = _attention()
    x = torch.randn(2, 9, D, dtype=F64)
    dev = _dev(attn(x), ref_attention(x, attn))
    assert dev <= _TABLE_BOUND, f"attention vs the float64 reference: deviation={dev:.3e} bound={_TABLE_BOUND:.0e}"


def test_attention_gradients_match_autograd_of_the_float64_reference() -> None:
    """The RoPE backward is written by hand (a rotation's transpose): the input's and weights' gradients
    must be autograd's of the reference."""
    attn = _attention(1)
    x = torch.randn(2, 9, D, dtype=F64, requires_grad=True)
    r = torch.randn(2, 9, D, dtype=F64)
    params = [x, attn.norm.weight, attn.qkv.weight, attn.proj.weight]
    got = torch.autograd.grad((attn(x) * r).sum(), params)
    want = torch.autograd.grad((ref_attention(x, attn) * r).sum(), params)
    # the float32 tables' error (module docstring), relative to O(1-10) gradients; a backward rotating the
    # wrong way (sin not negated) is O(1) off.
    for name, a, b in zip(["x", "norm gain", "qkv", "proj"], got, want, strict=True):
        dev, bound = _dev(a, b), _TABLE_BOUND * (1 + b.abs().max().item())
        assert dev <= bound, f"d loss/d {name} vs autograd of the reference: deviation={dev:.3e} bound={bound:.1e}"


def test_attention_beyond_the_cached_rope_tables_builds_them_on_the_fly() -> None:
    attn = _attention(2)
    attn.rope_cos, attn.rope_sin = attn.rope_cos[:4], attn.rope_sin[:4]  # a cache shorter than the sequence
    x = torch.randn(1, 7, D, dtype=F64)
    dev = _dev(attn(x), ref_attention(x, attn))
    assert dev <= _TABLE_BOUND, f"attention past the RoPE cache: deviation={dev:.3e} bound={_TABLE_BOUND:.0e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_keeps_the_input_dtype_and_rotates_in_float32(dtype: torch.dtype) -> None:
    """bf16 q/k (CUDA autocast) are rotated in float32 and rounded once: within one bf16 rounding of the
    float64 rotation of the same bf16 values; v passes through unchanged."""
    qkv = torch.randn(2, 5, 3, HEADS, D // HEADS).to(dtype)
    cos, sin = rope_tables(5, D // HEADS, BASE, torch.device("cpu"))
    qk, v = rope_qkv(qkv, cos[:, None, None, :], sin[:, None, None, :])
    assert qk.dtype == dtype and v.dtype == dtype, f"rope_qkv returned {qk.dtype}/{v.dtype} for {dtype} input"
    assert torch.equal(v, qkv[:, :, 2]), "v must be the projection's third part, untouched"
    # one rounding to dtype of |y| <= ~4 (float32 maths: 2 products and a sum, ~3 * 2^-24 relative, far below)
    bound = 4 * (2.0**-8 if dtype == torch.bfloat16 else 2.0**-22)
    for j, name in enumerate(["q", "k"]):
        want = ref_rope(qkv[:, :, j].double(), BASE)
        dev = _dev(qk[:, :, j].double(), want)
        assert dev <= bound, f"RoPE of {name} in {dtype} vs the float64 rotation: deviation={dev:.3e} bound={bound:.1e}"


def test_rope_backward_is_autograd_of_the_float64_rotation_with_either_output_unused() -> None:
    """The hand-written backward (rotation by -theta, written with dv into one gradient) against autograd of
    the reference's complex rotation, float64, also when only q/k or only v reach the loss (the other
    gradient is then None and its part of the gradient must be zero)."""
    qkv = torch.randn(2, 6, 3, HEADS, D // HEADS, dtype=F64, requires_grad=True)
    cos, sin = (t.double() for t in rope_tables(6, D // HEADS, BASE, torch.device("cpu")))
    r_qk, r_v = torch.randn(2, 6, 2, HEADS, D // HEADS, dtype=F64), torch.randn(2, 6, HEADS, D // HEADS, dtype=F64)
    for use_qk, use_v in [(True, True), (True, False), (False, True)]:
        qk, v = rope_qkv(qkv, cos[:, None, None, :], sin[:, None, None, :])
        ref_qk = torch.stack([ref_rope(qkv[:, :, j], BASE) for j in range(2)], dim=2)
        # an unused output is left out of the loss (not multiplied by 0), so its gradient reaches the backward as None
        got_terms = [(qk * r_qk).sum()] * use_qk + [(v * r_v).sum()] * use_v
        want_terms = [(ref_qk * r_qk).sum()] * use_qk + [(qkv[:, :, 2] * r_v).sum()] * use_v
        got = torch.autograd.grad(sum(got_terms), qkv)[0]
        want = torch.autograd.grad(sum(want_terms), qkv)[0]
        # the tables are float32 values (module docstring): ~7 * 2^-24 per entry, times |r| <= ~5
        dev, bound = _dev(got, want), _TABLE_BOUND * (1 + want.abs().max().item())
        assert dev <= bound, f"RoPE backward (q/k used {use_qk}, v used {use_v}): deviation={dev:.3e} bound={bound:.1e}"


def ref_swiglu(x: Tensor, mlp: SwiGLU) -> Tensor:
    """``W_down (silu(W_gate n(x)) * W_up n(x))`` in float64, silu written out as ``a / (1 + exp(-a))``."""
    n = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + mlp.norm.eps) * mlp.norm.weight
    hidden = mlp.down.weight.shape[1]
    a, b = n @ mlp.gate_up.weight[:hidden].T, n @ mlp.gate_up.weight[hidden:].T
    return (a / (1 + torch.exp(-a)) * b) @ mlp.down.weight.T


def test_swiglu_and_its_gradients_match_the_float64_reference() -> None:
    """The MLP's gate has a hand-written backward (both halves' gradients written into one tensor): output and
    every gradient against autograd of the reference. All float64, no table: the bound is a few ulps of
    O(10) values, 1e-12; a swapped or missing term is O(1) off."""
    torch.manual_seed(3)
    mlp = SwiGLU(D, 24).double()
    with torch.no_grad():
        mlp.norm.weight.copy_(1 + 0.3 * torch.randn(D, dtype=F64))
    x = torch.randn(2, 7, D, dtype=F64, requires_grad=True)
    r = torch.randn(2, 7, D, dtype=F64)
    dev = _dev(mlp(x), ref_swiglu(x, mlp))
    assert dev <= 1e-12, f"SwiGLU vs the float64 reference: deviation={dev:.3e} bound=1e-12"
    params = [x, mlp.norm.weight, mlp.gate_up.weight, mlp.down.weight]
    got = torch.autograd.grad((mlp(x) * r).sum(), params)
    want = torch.autograd.grad((ref_swiglu(x, mlp) * r).sum(), params)
    for name, a, b in zip(["x", "norm gain", "gate_up", "down"], got, want, strict=True):
        dev, bound = _dev(a, b), 1e-12 * (1 + b.abs().max().item())
        assert dev <= bound, f"d loss/d {name} vs autograd of the reference: deviation={dev:.3e} bound={bound:.1e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_keeps_the_dtype_of_its_input(dtype: torch.dtype) -> None:
    """bf16 under CUDA autocast: the gate's output and its gradient stay in the projection's dtype."""
    mlp = SwiGLU(D, 24).to(dtype)
    x = torch.randn(3, D, dtype=dtype, requires_grad=True)
    y = mlp(x)
    (g,) = torch.autograd.grad(y.float().sum(), x)
    assert y.dtype == dtype and g.dtype == dtype, f"SwiGLU returned {y.dtype}, gradient {g.dtype} for {dtype}"


def _rel_dev(a: Tensor, b: Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


@pytest.mark.parametrize("sublayer", ["attention", "mlp"])
def test_sublayers_under_bf16_autocast_stay_within_bf16_rounding_of_float32(sublayer: str) -> None:
    """CUDA trains under bf16 autocast; CPU autocast stands in. The hand-written Functions then see
    bf16 inputs and gradients (RoPE's float32 rotation rounded once; the SwiGLU gate's one-buffer backward).

    Bound: autocast rounds each matmul's inputs and output to bf16 (2^-9 relative each) and accumulates in
    float32; a sublayer chains three such matmuls (attention: qkv, scores/mix, proj; MLP: norm, gate_up, down)
    -> ~6 roundings, <= 6 * 2^-9 ~ 0.012 of the output's scale; 0.03 leaves room for the sums of d = 16 terms.
    The weights' and input's gradients (float32 parameters, so float32 gradients) are held to the same bound.
    A rotation the wrong way or a dropped gradient term moves them by O(0.1-1) of their scale."""
    torch.manual_seed(4)
    module = _attention(4).float() if sublayer == "attention" else SwiGLU(D, 24)
    x = torch.randn(2, 9, D, requires_grad=True)
    r = torch.randn(2, 9, D)
    params = [x, *module.parameters()]
    want_y = module(x)
    want = torch.autograd.grad((want_y * r).sum(), params)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got_y = module(x)
    assert got_y.dtype == torch.bfloat16, f"{sublayer} under autocast returned {got_y.dtype}"
    got = torch.autograd.grad((got_y.float() * r).sum(), params)
    bound = 0.03
    dev = _rel_dev(got_y, want_y)
    assert dev <= bound, f"{sublayer} output under bf16 autocast vs float32: deviation={dev:.3e} bound={bound}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == b.dtype == torch.float32, f"gradient {i} is {a.dtype} under autocast"
        dev = _rel_dev(a, b)
        assert dev <= bound, f"{sublayer} gradient {i} under bf16 autocast vs fp32: deviation={dev:.3e} bound={bound}"
