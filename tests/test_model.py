"""Gates for the shared block's attention sublayer (dormouse.model.CausalSelfAttention, docs/model.md).

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

from dormouse.model import CausalSelfAttention, apply_rope, rope_rotation_tables, rope_tables

F64 = torch.float64
D, HEADS, BASE = 16, 2, 10000.0
_TABLE_BOUND = 2e-6


def ref_rope(x: Tensor, base: float) -> Tensor:
    """x [B, T, H, hd] -> each pair (x[..., j], x[..., j + hd/2]) rotated by the angle p * base^(-2j/hd)."""
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
    float64 rotation of the same bf16 values."""
    x = torch.randn(2, 5, HEADS, D // HEADS).to(dtype)
    cos, sin = rope_rotation_tables(*rope_tables(5, D // HEADS, BASE, torch.device("cpu")))
    got = apply_rope(x, cos[:, None, :], sin[:, None, :])
    assert got.dtype == dtype, f"apply_rope returned {got.dtype} for {dtype} input (deviation=dtype)"
    want = ref_rope(x.double(), BASE)
    # one rounding to dtype of |y| <= ~4 (float32 maths: 2 products and a sum, ~3 * 2^-24 relative, far below)
    bound = 4 * (2.0**-8 if dtype == torch.bfloat16 else 2.0**-22)
    dev = _dev(got.double(), want)
    assert dev <= bound, f"apply_rope in {dtype} vs the float64 rotation: deviation={dev:.3e} bound={bound:.1e}"
