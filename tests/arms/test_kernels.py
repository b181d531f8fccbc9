"""Fused AttnRes kernels (dormouse_kernels) against a float64 oracle written here from the equations.

The oracle (``oracle`` below) is a naive loop over sources transcribing attnres.md Eq. 2-4 -- it shares
no code with the kernels or with dormouse.ops.attnres. Gradients are checked against float64 autograd of that
oracle and against central finite differences. Every kernel output buffer is NaN-poisoned (the
``poisoned_alloc`` fixture patches the kernels' allocation hook, and the low-level tests pass poisoned
buffers), so an element a kernel fails to write fails the comparison instead of passing on stale memory.

Tolerances are per-element bounds derived in ``error_bounds`` from the unit roundoff of the
accumulation dtype, the reduction lengths (d for scores, L for the softmax, N*L for the query gradient)
and the magnitudes of the terms being summed (taken from the oracle), times a safety factor of 2 -- no
bare absolute constants (the predecessor's coin-flip 1e-5 on chained merges). Assertion messages carry
``deviation=`` (max |err| / bound; <= 1 passes) and the absolute error.

Device: CUDA tensors and the compiled kernels when a GPU is present; otherwise CPU tensors through
Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before the kernels are defined).
Tensors are tiny (N <= 64, d <= 130, L <= 9): the interpreter runs each program in Python.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

import dormouse_kernels as dk

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
_REASON = dk.triton_unavailable_reason(DEVICE)
if _REASON is not None and "not importable" in _REASON:  # only a missing triton skips; anything else fails
    pytest.skip(_REASON, allow_module_level=True)

from dormouse_kernels import depth_attend as dk_da  # noqa: E402 - after the skip: needs triton
from dormouse_kernels import merge as dk_merge  # noqa: E402

F64 = torch.float64
# Unit roundoff of the accumulation (fp32 for fp32/bf16/fp16 inputs, fp64 for fp64).
U_ACC = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-24, torch.float16: 2.0**-24, F64: 2.0**-53}
# Rounding of a result stored in the input dtype: the dtype's epsilon (one ulp at 1: 2^-7 bf16, 2^-10
# fp16, 2^-23 fp32, 2^-52 fp64). Round-to-nearest (the GPU's cvt.rn) errs by half of that -- the 2^-8 unit
# roundoff of bf16 -- but Triton's interpreter casts fp32 -> bf16 by truncation (measured: 1 + 2^-8 +
# 2^-10 -> 1.0), which errs by up to a whole ulp; the bound must hold on both.
EPS_STORE = {dt: torch.finfo(dt).eps for dt in (torch.float32, torch.bfloat16, torch.float16, F64)}
SAFETY = 2.0  # GPU exp/log/sqrt/div are approximate (<= 2 ulp), and the bounds drop second-order terms


@pytest.fixture(autouse=True)
def poisoned_alloc(monkeypatch):
    """Every buffer the kernels allocate starts as NaN: an unwritten element cannot pass."""

    def alloc(shape, dtype, device):
        return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(dk_da, "_alloc", alloc)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, g, scale=1.0, dtype=F64):
    return (torch.randn(*shape, generator=g, dtype=F64) * scale).to(dtype).to(DEVICE)


# --------------------------------------------------------------------------------------------------------
# the oracle: attnres.md Eq. 2-4, float64, naive


def oracle(sources, w, g, eps: float, form: str) -> dict[str, torch.Tensor]:
    """Per token: k_i = RMSNorm(v_i) (paper: v / sqrt(mean(v^2) + eps); sqrt_d: v / sqrt(sum(v^2) + d eps)
    / sqrt(d)), s_i = w . (g * k_i), alpha = softmax_i(s) jointly over all sources, out = sum alpha_i v_i
    with RAW values. A loop over sources; subtracting the max before exp is an identity, for range only."""
    d = sources[0].shape[-1]
    scores, kscales = [], []
    for v in sources:
        if form == "paper":
            ks = 1.0 / torch.sqrt((v * v).mean(-1) + eps)
        else:
            ks = 1.0 / torch.sqrt((v * v).sum(-1) + d * eps) / math.sqrt(d)
        k = v * ks.unsqueeze(-1)
        if g is not None:
            k = k * g
        scores.append((k * w).sum(-1))
        kscales.append(ks)
    s = torch.stack(scores)
    smax = s.max(0).values.detach()
    e = torch.exp(s - smax)
    z = e.sum(0)
    alpha = e / z
    out = torch.zeros_like(sources[0])
    for i, v in enumerate(sources):
        out = out + alpha[i].unsqueeze(-1) * v
    return {"out": out, "s": s, "alpha": alpha, "lse": smax + torch.log(z), "ks": torch.stack(kscales)}


def oracle_merge(m1, l1, o1, m2, l2, o2):
    """Alg. 1 Phase 2 from its equations, float64; an empty partial (m = -inf) has weight 0."""
    m = torch.maximum(m1, m2)
    w1 = torch.where(torch.isinf(m1) & (m1 < 0), torch.zeros_like(m1), torch.exp(m1 - m))
    w2 = torch.where(torch.isinf(m2) & (m2 < 0), torch.zeros_like(m2), torch.exp(m2 - m))
    l = w1 * l1 + w2 * l2
    o = w1[..., None] * o1 + w2[..., None] * o2
    return m, l, o, w1, w2


# --------------------------------------------------------------------------------------------------------
# error bounds


def error_bounds(V, w, g, eps, form, G, u, e_store) -> dict[str, torch.Tensor]:
    """Per-element bounds on |kernel - exact| for a kernel that accumulates with unit roundoff ``u`` and
    stores in a dtype of epsilon ``e_store``. V: [L, N, d] float64 (the kernel's inputs, exactly); G:
    grad_out [N, d] float64. Forward-error analysis of what the kernels compute:

    * reductions over d (|v|^2, q.v, G.v, G.out) are trees of <= log2(dpad) levels, plus per-thread
      sequential runs of <= dpad/32 on GPU: rho = log2(dpad) + dpad/16 + 2 roundings (generous);
    * score s_i = (q.v) / sqrt(|v|^2 m + eps): |ds_i| <= gs * A_i, A_i = sum_j |q_j k_ij| (>= |s_i|),
      gs = (1.5 rho + 8) u (rho for q.v, rho/2 through the root, ~8 for root/div/scale);
    * alpha (online softmax over L sources, L rescales): relative error <= 2 max_i|ds_i| + (2L + 8) u;
    * out = acc / l: |d out| <= (that + (2L + 4) u) sum_i alpha_i |v_i|, then stored: + e_store |out|;
    * backward: alpha recomputed as exp(s - lse) (s error + lse error), ds = alpha (G.v - G.out) with
      the STORED out (its forward error enters through G.out), ds/dv = ks q - m s ks^2 v, and the
      query gradient accumulated sequentially over <= N*L terms: + (N L + N) u sum |terms|.
    """
    L, N, d = V.shape
    q = w if g is None else w * g
    dpad = max(16, 1 << (d - 1).bit_length())
    rho = math.log2(dpad) + dpad / 16 + 2
    ref = oracle(list(V), w, g, eps, form)
    ks, s, alpha, out, lse = ref["ks"], ref["s"], ref["alpha"], ref["out"], ref["lse"]
    k = V * ks[..., None]
    A = (k.abs() * q.abs()).sum(-1)  # [L, N]
    ds_max = ((1.5 * rho + 8) * u * A).max(0).values  # [N] max score error over the sources
    rel_alpha = 2 * ds_max + (2 * L + 8) * u
    mix_abs = (alpha[..., None] * V.abs()).sum(0)  # [N, d]
    tol_out = (rel_alpha + (2 * L + 4) * u)[:, None] * mix_abs + e_store * out.abs()
    bounds = {"out": SAFETY * tol_out, "lse": SAFETY * (rel_alpha + u * (1 + lse.abs()))}
    if G is None:
        return bounds

    m_norm = 1.0 / d if form == "paper" else float(d)  # ds/dv second term: m s ks^2 v
    Gv = (G * V).sum(-1)  # [L, N]
    Go = (G * out).sum(-1)  # [N]
    ds = alpha * (Gv - Go)  # magnitudes only: the bound's scale, not the oracle
    rel_alpha_b = 3 * ds_max + (2 * L + 12) * u + u * lse.abs()  # [N]
    dGo = rho * u * (G.abs() * out.abs()).sum(-1) + (G.abs() * tol_out).sum(-1)  # [N], stored out
    dGv = rho * u * (G.abs() * V.abs()).sum(-1)  # [L, N]
    d_ds = rel_alpha_b * ds.abs() + alpha * (dGv + dGo + u * (Gv - Go).abs())
    P = ks[..., None] * q.abs() + (s.abs() * ks**2 * m_norm)[..., None] * V.abs()  # |ds/dv| terms
    dP = (rho / 2 + 4) * u * ks[..., None] * q.abs() + (
        (ds_max * ks**2 * m_norm) + s.abs() * ks**2 * m_norm * (rho + 8) * u
    )[..., None] * V.abs()
    gv_abs = alpha[..., None] * G.abs() + ds.abs()[..., None] * P
    tol_gv = (
        (rel_alpha_b * alpha)[..., None] * G.abs()
        + d_ds[..., None] * P
        + ds.abs()[..., None] * dP
        + 3 * u * gv_abs
        + e_store * gv_abs
    )
    T = ds.abs()[..., None] * ks[..., None] * V.abs()  # |terms| of dq = sum_t sum_i ds k
    tol_dq = (d_ds[..., None] * ks[..., None] * V.abs() + T * (rho / 2 + 6) * u).sum((0, 1)) + (N * L + N) * u * T.sum(
        (0, 1)
    )
    dq_abs = T.sum((0, 1))
    bounds["sources"] = SAFETY * tol_gv
    if g is None:
        bounds["query"] = SAFETY * (tol_dq + u * dq_abs)
    else:
        bounds["query"] = SAFETY * (g.abs() * tol_dq + 2 * u * g.abs() * dq_abs)
        bounds["gain"] = SAFETY * (w.abs() * tol_dq + 2 * u * w.abs() * dq_abs)
    return bounds


def _dtype_id(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def assert_within(name: str, got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor) -> None:
    """|got - want| <= bound elementwise; NaN (an unwritten, poisoned element) always fails."""
    err = (got.to(F64) - want.to(F64)).abs()
    assert torch.isfinite(got).all(), f"{name}: non-finite element (unwritten?) deviation=inf"
    rel = err / bound.clamp_min(1e-300)
    ratio = rel.max().item()
    worst = rel.argmax()
    assert ratio <= 1.0, (
        f"{name}: deviation={ratio:.3g} bound=1 (max over elements of |err| / bound; at the worst element "
        f"|err| = {err.flatten()[worst].item():.3g}, bound = {bound.flatten()[worst].item():.3g})"
    )


# --------------------------------------------------------------------------------------------------------
# fixtures of the spec


@pytest.mark.parametrize(
    "form, eps, want",
    [("paper", 0.0, 0.9820137900), ("paper", 1e-6, 0.9820136487), ("paper", 1e-5, 0.9820123770),
     ("sqrt_d", 0.0, 0.7310585786)],
)  # fmt: skip
def test_oracle_and_kernel_reproduce_gold_fixture_a(form, eps, want):
    """attnres.md Fixture A (B = T = 1, v_0 = e_0, v_1 = e_1, w = 2 e_0, gain 1): out[0] = alpha_0.
    Validates the oracle against the spec's gold numbers, then the kernel (fp64) against them."""
    v0 = torch.tensor([[1.0, 0, 0, 0]], dtype=F64, device=DEVICE)
    v1 = torch.tensor([[0, 1.0, 0, 0]], dtype=F64, device=DEVICE)
    w = torch.tensor([2.0, 0, 0, 0], dtype=F64, device=DEVICE)
    gain = torch.ones(4, dtype=F64, device=DEVICE)
    ref = oracle([v0, v1], w, gain, eps, form)["out"][0, 0].item()
    # the gold numbers carry 10 decimals: 5e-11 is their rounding
    assert abs(ref - want) < 5e-11, f"oracle deviation={abs(ref - want):.3g} bound=5e-11"
    got = dk.depth_attend_fused([v0, v1], w, gain, eps, form)[0, 0].item()
    # fp64 kernel on d = 4, L = 2: a few dozen roundings of 1.1e-16, far under the gold rounding
    assert abs(got - want) < 5e-11, f"kernel deviation={abs(got - want):.3g} bound=5e-11"


def test_zero_query_is_the_plain_mean():
    """attnres.md: at w = 0 every input is the plain average of its sources (all scores 0)."""
    g = _gen(1)
    V = [_randn(7, 33, g=g, dtype=torch.float32) for _ in range(5)]
    got = dk.depth_attend_fused(V, torch.zeros(33, device=DEVICE), None, 1e-6, "paper")
    want = torch.stack([v.to(F64) for v in V]).mean(0)
    # alpha = exp(0)/5 exactly up to the division (1 rounding), L = 5 multiply-adds: (L + 4) u |v|
    mean_abs = torch.stack([v.to(F64).abs() for v in V]).mean(0)
    bound = SAFETY * (5 + 4) * 2.0**-24 * mean_abs + 2.0**-23 * want.abs()
    assert_within("mean", got, want, bound)


# --------------------------------------------------------------------------------------------------------
# forward

# (N, d, L): odd d (5, 33, 130), L = 1, N not a multiple of any block size
SHAPES = [(37, 5, 1), (50, 33, 3), (29, 130, 9), (64, 64, 4), (3, 16, 2)]


def _case(N, d, L, dtype, seed, w_scale=1.0, gain=True):
    g = _gen(seed)
    V = torch.stack([_randn(N, d, g=g, scale=0.5 + i, dtype=dtype) for i in range(L)])  # per-source scales
    w = _randn(d, g=g, scale=w_scale, dtype=F64).to(torch.float32 if dtype != F64 else F64)
    gn = (1 + 0.5 * _randn(d, g=g, dtype=F64)).to(w.dtype) if gain else None
    return V, w, gn


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.bfloat16, torch.float16], ids=_dtype_id)
@pytest.mark.parametrize("form", ["paper", "sqrt_d"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}-d{}-L{}".format(*s))
def test_forward_matches_oracle(shape, form, dtype):
    N, d, L = shape
    V, w, gn = _case(N, d, L, dtype, seed=N * d + L, gain=(N % 2 == 1))
    got = dk.depth_attend_fused(list(V), w, gn, 1e-6, form)
    V64 = V.to(F64)  # the oracle sees exactly the (rounded) inputs the kernel saw
    w64, g64 = w.to(F64), None if gn is None else gn.to(F64)
    want = oracle(list(V64), w64, g64, 1e-6, form)["out"]
    b = error_bounds(V64, w64, g64, 1e-6, form, None, U_ACC[dtype], EPS_STORE[dtype])
    assert got.dtype == dtype and got.shape == (N, d)
    assert_within(f"out[{dtype}]", got, want, b["out"])


def test_forward_large_scores_stay_finite():
    """|s| ~ 300: exp(s) overflows fp32 at 88, so an unstabilised softmax (or a skipped online rescale)
    is inf/NaN or O(1) off here; the online softmax is exact up to rounding."""
    V, w, gn = _case(21, 33, 6, torch.float32, seed=7, w_scale=50.0)
    got = dk.depth_attend_fused(list(V), w, gn, 1e-6, "paper")
    V64 = V.to(F64)
    want = oracle(list(V64), w.to(F64), gn.to(F64), 1e-6, "paper")["out"]
    b = error_bounds(V64, w.to(F64), gn.to(F64), 1e-6, "paper", None, U_ACC[torch.float32], 2.0**-23)
    assert_within("out", got, want, b["out"])


def test_forward_low_level_writes_every_element_of_caller_buffers():
    """The forward kernel fills caller-supplied NaN buffers completely: N = 37 over BLOCK_N = 8 leaves a
    5-token tail block, d = 33 a masked column tail. lse is checked against the oracle too."""
    N, d, L = 37, 33, 4
    V, w, gn = _case(N, d, L, torch.float32, seed=11)
    out = torch.full((N, d), float("nan"), device=DEVICE)
    lse = torch.full((N,), float("nan"), device=DEVICE)
    qg = w * gn
    dk_da.depth_attend_forward(list(V), qg, 1e-6, "paper", out=out, lse=lse, block_n=8)
    V64 = V.to(F64)
    ref = oracle(list(V64), w.to(F64), gn.to(F64), 1e-6, "paper")
    b = error_bounds(V64, w.to(F64), gn.to(F64), 1e-6, "paper", None, 2.0**-24, 2.0**-23)
    assert_within("out", out, ref["out"], b["out"])
    assert_within("lse", lse, ref["lse"], b["lse"])


def test_layouts_list_stacked_nd_and_noncontiguous():
    """The source table handles: separate tensors (list), views of one stacked tensor, [B, T, d] leading
    shapes and non-contiguous sources -- each checked against the oracle, with gradients shaped like
    their sources."""
    g = _gen(5)
    B, T, d, L = 3, 5, 20, 3
    base = [_randn(B, T, d, g=g, dtype=torch.float32) for _ in range(L)]
    w = _randn(d, g=g, dtype=torch.float32)
    want = oracle([b.to(F64) for b in base], w.to(F64), None, 1e-6, "paper")["out"]
    bnd = error_bounds(torch.stack(base).to(F64).view(L, B * T, d), w.to(F64), None, 1e-6, "paper", None,
                       2.0**-24, 2.0**-23)["out"].view(B, T, d)  # fmt: skip
    stacked = torch.stack(base)
    noncontig = [b.transpose(0, 1).contiguous().transpose(0, 1) for b in base]  # same values, strided
    assert not noncontig[0].is_contiguous()
    for label, srcs in (("list", base), ("stacked", stacked), ("noncontiguous", noncontig)):
        srcs = srcs.detach().requires_grad_(True) if isinstance(srcs, torch.Tensor) else [
            s.detach().requires_grad_(True) for s in srcs
        ]  # fmt: skip
        got = dk.depth_attend_fused(srcs, w, None, 1e-6, "paper")
        assert got.shape == (B, T, d), label
        assert_within(f"out[{label}]", got, want, bnd)
        got.sum().backward()
        grads = [srcs.grad] if isinstance(srcs, torch.Tensor) else [s.grad for s in srcs]
        assert all(gr is not None and torch.isfinite(gr).all() for gr in grads), label
        assert grads[0].shape == ((L, B, T, d) if label == "stacked" else (B, T, d)), label


def test_mixed_source_dtypes_are_promoted():
    """An fp32 source next to bf16 ones (the embedding beside autocast layer outputs) is promoted like
    torch.stack would: the read runs in fp32 on the bf16 values exactly, gradients reach every source."""
    g = _gen(12)
    V = [_randn(9, 33, g=g, dtype=torch.bfloat16) for _ in range(2)] + [_randn(9, 33, g=g)]
    V = [v.to(torch.float32) if i == 2 else v for i, v in enumerate(V)]
    srcs = [v.clone().requires_grad_(True) for v in V]
    w = _randn(33, g=g, dtype=torch.float32)
    got = dk.depth_attend_fused(srcs, w, None, 1e-6, "paper")
    assert got.dtype == torch.float32
    V64 = torch.stack([v.to(F64) for v in V])
    b = error_bounds(V64, w.to(F64), None, 1e-6, "paper", None, 2.0**-24, 2.0**-23)
    assert_within("out", got, oracle(list(V64), w.to(F64), None, 1e-6, "paper")["out"], b["out"])
    got.sum().backward()
    assert [s.grad.dtype for s in srcs] == [torch.bfloat16, torch.bfloat16, torch.float32]


def test_misaligned_sources_are_correct_and_not_hinted():
    """Sources at a 2-byte (not 16-byte) offset -- views into a larger buffer -- still read correctly, and
    the host must not claim 16-byte alignment for them: on a GPU the tl.multiple_of hint on a misaligned
    table turns into misaligned 128-bit loads. Aligned bf16 sources do get the hint (8 elements)."""
    g = _gen(14)
    N, d, L = 9, 24, 3
    big = _randn(L * N * d + 1, g=g, dtype=torch.bfloat16)
    V = [big[1 + i * N * d : 1 + (i + 1) * N * d].view(N, d) for i in range(L)]  # 2-byte offset
    assert all(v.data_ptr() % 16 for v in V)
    _, _, align = dk_da._source_table(V)
    assert align == 1, f"alignment hint {align} claimed for sources at a 2-byte offset"
    _, _, align = dk_da._source_table([v.clone() for v in V])
    assert align == 8, f"fresh (16-byte aligned) bf16 sources should carry an 8-element hint, got {align}"
    w = _randn(d, g=g, dtype=torch.float32)
    got = dk.depth_attend_fused(V, w, None, 1e-6, "paper")
    V64 = torch.stack(V).to(F64)
    b = error_bounds(V64, w.to(F64), None, 1e-6, "paper", None, 2.0**-24, EPS_STORE[torch.bfloat16])
    assert_within("out", got, oracle(list(V64), w.to(F64), None, 1e-6, "paper")["out"], b["out"])


def test_rejects_bad_inputs():
    v = torch.zeros(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="at least one source"):
        dk.depth_attend_fused([], torch.zeros(8, device=DEVICE))
    with pytest.raises(ValueError, match="must match"):
        dk.depth_attend_fused([v, torch.zeros(4, 9, device=DEVICE)], torch.zeros(8, device=DEVICE))
    with pytest.raises(ValueError, match="query must be"):
        dk.depth_attend_fused([v], torch.zeros(4, 8, device=DEVICE))
    with pytest.raises(ValueError, match="form"):
        dk.depth_attend_fused([v], torch.zeros(8, device=DEVICE), form="l2")


# --------------------------------------------------------------------------------------------------------
# backward


def _kernel_grads(V, w, gn, G, eps, form):
    srcs = [v.detach().clone().requires_grad_(True) for v in V]
    wq = w.detach().clone().requires_grad_(True)
    gq = None if gn is None else gn.detach().clone().requires_grad_(True)
    out = dk.depth_attend_fused(srcs, wq, gq, eps, form)
    out.backward(G.to(out.dtype))
    return out, torch.stack([s.grad for s in srcs]), wq.grad, None if gq is None else gq.grad


def _oracle_grads(V64, w64, g64, G64, eps, form):
    srcs = [v.detach().clone().requires_grad_(True) for v in V64]
    wq = w64.detach().clone().requires_grad_(True)
    gq = None if g64 is None else g64.detach().clone().requires_grad_(True)
    out = oracle(srcs, wq, gq, eps, form)["out"]
    out.backward(G64)
    return torch.stack([s.grad for s in srcs]), wq.grad, None if gq is None else gq.grad


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.bfloat16], ids=_dtype_id)
@pytest.mark.parametrize("form", ["paper", "sqrt_d"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}-d{}-L{}".format(*s))
def test_backward_matches_oracle_autograd(shape, form, dtype):
    """Source, query and gain gradients vs float64 autograd of the oracle; per-element bounds from
    ``error_bounds`` (fp64 kernel: u = 2^-53, so this is a ~1e-13 check; bf16: 2^-8 on the stored grads)."""
    N, d, L = shape
    V, w, gn = _case(N, d, L, dtype, seed=3 * N + d + L, gain=(N % 2 == 1) or L == 9)
    G = _randn(N, d, g=_gen(99), dtype=dtype)
    _, gV, gw, gg = _kernel_grads(V, w, gn, G, 1e-6, form)
    V64, w64, g64, G64 = V.to(F64), w.to(F64), None if gn is None else gn.to(F64), G.to(F64)
    rV, rw, rg = _oracle_grads(V64, w64, g64, G64, 1e-6, form)
    b = error_bounds(V64, w64, g64, 1e-6, form, G64, U_ACC[dtype], EPS_STORE[dtype])
    # query/gain gradients come back in the query's dtype (fp32 here): + its rounding
    qs = EPS_STORE[w.dtype]
    assert_within("grad sources", gV, rV, b["sources"])
    assert_within("grad query", gw, rw, b["query"] + qs * rw.abs())
    if gn is not None:
        assert_within("grad gain", gg, rg, b["gain"] + qs * rg.abs())


@pytest.mark.parametrize("form", ["paper", "sqrt_d"])
def test_backward_matches_finite_differences(form):
    """Kernel (fp64) gradients vs central differences of the kernel's own forward, every input element;
    and, as a sanity check of the reference, the oracle's autograd vs the same differences.

    Tolerance: step h = 1e-5. Truncation h^2/6 |f'''| with |f'''| <~ (ks |q|)^3 |G| |v| < 1e3 here is
    < 2e-8; roundoff 2 |df| / (2h) with |df| <= ~1e-14 (fp64 forward bound) is ~1e-9. 1e-6 absolute
    leaves >= 50x margin; a dropped 1/d in the norm derivative moves gradients by O(0.1-1)."""
    N, d, L = 3, 5, 3
    V, w, gn = _case(N, d, L, F64, seed=21 if form == "paper" else 22)
    G = _randn(N, d, g=_gen(5), dtype=F64)
    _, gV, gw, gg = _kernel_grads(V, w, gn, G, 1e-6, form)
    h = 1e-5

    def fd(fn, x):
        grad = torch.zeros_like(x)
        flat = x.view(-1)
        for j in range(flat.numel()):
            keep = flat[j].item()
            flat[j] = keep + h
            fp = fn()
            flat[j] = keep - h
            fm = fn()
            flat[j] = keep
            grad.view(-1)[j] = (fp - fm) / (2 * h)
        return grad

    def loss_kernel():
        return (dk.depth_attend_fused(list(V), w, gn, 1e-6, form) * G).sum().item()

    fd_V, fd_w, fd_g = fd(loss_kernel, V), fd(loss_kernel, w), fd(loss_kernel, gn)
    tol = 1e-6
    for name, got, want in (("sources", gV, fd_V), ("query", gw, fd_w), ("gain", gg, fd_g)):
        dev = (got - want).abs().max().item()
        assert dev <= tol, f"kernel grad {name} vs finite differences: deviation={dev:.3g} bound={tol}"
    rV, rw, rg = _oracle_grads(V, w, gn, G, 1e-6, form)
    for name, got, want in (("sources", rV, fd_V), ("query", rw, fd_w), ("gain", rg, fd_g)):
        dev = (got - want).abs().max().item()
        assert dev <= tol, f"oracle grad {name} vs finite differences: deviation={dev:.3g} bound={tol}"


def test_backward_low_level_fills_poisoned_buffers_across_programs():
    """Backward kernel with caller-supplied NaN buffers, BLOCK_N = 8 over N = 61 (8 blocks, tail 5) and
    3 persistent programs (3, 3, 2 blocks each): every gradient slot and every partial row is written,
    and the cross-program reduction of the query gradient is right."""
    N, d, L = 61, 33, 3
    V, w, gn = _case(N, d, L, torch.float32, seed=13, gain=False)
    G = _randn(N, d, g=_gen(4), dtype=torch.float32)
    rows = list(V)
    out, lse = dk_da.depth_attend_forward(rows, w, 1e-6, "paper", block_n=8)
    gsrc = torch.full((L, N, d), float("nan"), device=DEVICE)
    parts = torch.full((3, d), float("nan"), device=DEVICE)
    _, dq = dk_da.depth_attend_backward(
        rows, w, out, lse, G, 1e-6, "paper", grad_sources=gsrc, dqg_partials=parts, block_n=8, max_programs=3
    )
    V64, G64 = V.to(F64), G.to(F64)
    rV, rw, _ = _oracle_grads(V64, w.to(F64), None, G64, 1e-6, "paper")
    b = error_bounds(V64, w.to(F64), None, 1e-6, "paper", G64, 2.0**-24, 2.0**-23)
    assert torch.isfinite(parts).all(), "a program left its partial row unwritten"
    assert_within("grad sources", gsrc, rV, b["sources"])
    assert_within("grad query", dq, rw, b["query"])


def test_torch_path_matches_oracle():
    """dormouse.ops.attnres.depth_attend(kernel="torch") -- the plain-torch path the kernel is an alternative
    to -- forward and backward vs the oracle in float64 (reference sanity for the routing's fallback).
    That path computes in promote(dtype, float32) = float64 here, so the bound uses float64's u = 2^-53."""
    from dormouse.ops import attnres

    N, d, L = 9, 33, 4
    V, w, gn = _case(N, d, L, F64, seed=17)
    G = _randn(N, d, g=_gen(6), dtype=F64)
    srcs = [v.clone().requires_grad_(True) for v in V]
    wq, gq = w.clone().requires_grad_(True), gn.clone().requires_grad_(True)
    out = attnres.depth_attend(srcs, wq, gain=gq, eps=1e-6, form="paper", kernel="torch")
    out.backward(G)
    rV, rw, rg = _oracle_grads(V, w, gn, G, 1e-6, "paper")
    want = oracle(list(V), w, gn, 1e-6, "paper")["out"]
    b = error_bounds(V, w, gn, 1e-6, "paper", G, 2.0**-53, 2.0**-52)
    assert_within("torch out", out, want, b["out"])
    assert_within("torch grad sources", torch.stack([s.grad for s in srcs]), rV, b["sources"])
    assert_within("torch grad query", wq.grad, rw, b["query"])
    assert_within("torch grad gain", gq.grad, rg, b["gain"])


# --------------------------------------------------------------------------------------------------------
# merge (Alg. 1 Phase 2)


def _partials(V64, q64, eps, parts):
    """Oracle partials (m, l, o) of disjoint source groups, from the scores of the oracle."""
    s = oracle(list(V64), q64, None, eps, "paper")["s"]  # [L, N]
    res = []
    for idx in parts:
        if not idx:  # an empty partial
            N, d = V64.shape[1:]
            res.append((torch.full((N,), -math.inf, dtype=F64, device=DEVICE), torch.zeros(N, dtype=F64,
                        device=DEVICE), torch.zeros(N, d, dtype=F64, device=DEVICE)))  # fmt: skip
            continue
        ss = s[idx]
        m = ss.max(0).values
        e = torch.exp(ss - m)
        res.append((m, e.sum(0), (e[..., None] * V64[idx]).sum(0)))
    return res


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")  # the empty row's h = 0/0
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=_dtype_id)
def test_merge_matches_oracle_and_direct_mixture(dtype):
    """Fused merge vs the Phase 2 equations (float64 oracle), with h = o / l; and h equals the direct
    Eq. 6 softmax mixture over the union of the two source groups. One token row has both partials
    empty (m = -inf): it must stay empty (m = -inf, l = 0, o = 0), not turn NaN."""
    N, d, L = 45, 130, 5
    g = _gen(8)
    V64 = torch.stack([_randn(N, d, g=g, scale=1 + i, dtype=F64) for i in range(L)])
    q64 = _randn(d, g=g, scale=2.0, dtype=F64)
    (m1, l1, o1), (m2, l2, o2) = _partials(V64, q64, 1e-6, [[0, 3], [1, 2, 4]])
    m1[0], l1[0], o1[0] = -math.inf, 0.0, 0.0  # row 0: both empty; row 1: first empty
    m2[0], l2[0], o2[0] = -math.inf, 0.0, 0.0
    m1[1], l1[1], o1[1] = -math.inf, 0.0, 0.0
    ins = [t.to(dtype) for t in (m1, l1, o1, m2, l2, o2)]
    outs = tuple(torch.full_like(t, float("nan")) for t in (ins[0], ins[1], ins[2], ins[2]))
    dk_merge.merge_forward(*ins, write_h=True, outs=outs, block_n=16)
    m, l, o, h = outs
    rm, rl, ro, w1, w2 = oracle_merge(*[t.to(F64) for t in ins])
    u = U_ACC[dtype]
    # m is a max: exact. w = exp(m_i - m): subtraction + exp <= 3u relative; l = w1 l1 + w2 l2 of
    # non-negative terms: + 2u; o: |err| <= 5u (w1 |o1| + w2 |o2|); h = o / l: + 6u of |o| / l.
    scale_o = w1[..., None] * ins[2].to(F64).abs() + w2[..., None] * ins[5].to(F64).abs()
    assert torch.equal(m.to(F64), rm), "merged max is not exactly max(m1, m2)"
    assert_within("l", l[1:], rl[1:], SAFETY * 5 * u * rl[1:] + 2 * EPS_STORE[dtype] * rl[1:])
    assert_within("o", o, ro, SAFETY * 5 * u * scale_o + EPS_STORE[dtype] * ro.abs())
    assert l[0].item() == 0.0 and (o[0] == 0).all(), "two empty partials must merge to an empty one"
    assert torch.isnan(h[0]).all(), "h of an empty merge is 0/0"
    assert_within("h", h[1:], (ro / rl[..., None])[1:], SAFETY * 11 * u * (scale_o / rl[..., None])[1:])
    # the two-phase identity: merged h == Eq. 6 mixture over all 5 sources (rows with sources)
    direct = oracle(list(V64), q64, None, 1e-6, "paper")["out"]
    b = error_bounds(V64, q64, None, 1e-6, "paper", None, u, EPS_STORE[dtype])["out"]
    assert_within("h vs direct", h[2:], direct[2:], b[2:] + SAFETY * 11 * u * (scale_o / rl[..., None])[2:])


def test_merge_chained_fp32_is_scale_relative():
    """16 chained fp32 merges vs the float64 chain (the predecessor's coin-flip case: |o| ~ 3-4 made a
    1e-5 absolute bound fail 3 runs in 4). Each merge adds <= 5u relative to the sum of |terms|, so
    after K merges |err| <= 5 K u * (sum of weighted |o_k|) -- scale-relative, never absolute."""
    K, N, d = 16, 11, 33
    g = _gen(9)
    parts = [(_randn(N, g=g, scale=4.0, dtype=F64), 1 + _randn(N, g=g, dtype=F64).abs(),
              _randn(N, d, g=g, scale=3.0, dtype=F64)) for _ in range(K)]  # fmt: skip
    m32, l32, o32 = (t.float() for t in parts[0])
    m64, l64, o64 = parts[0]
    absacc = o64.abs()
    for mk, lk, ok in parts[1:]:
        m32, l32, o32 = dk.merge_partials(m32, l32, o32, mk.float(), lk.float(), ok.float())
        m64n, l64, o64, w1, w2 = oracle_merge(m64, l64, o64, mk, lk, ok)
        absacc = w1[..., None] * absacc + w2[..., None] * ok.abs()
        m64 = m64n
    bound = SAFETY * (5 * K * 2.0**-24 * absacc + K * 2.0**-23 * absacc)  # compute + per-step fp32 storage
    assert_within("chained o", o32, o64, bound)


def test_merge_backward_matches_oracle_autograd():
    """merge_partials is differentiable: fp64 gradients (through h) vs autograd of the oracle merge."""
    N, d = 13, 20
    g = _gen(10)
    ins = []
    for _ in range(2):  # (m, l > 0, o) twice
        ins += [_randn(N, g=g, dtype=F64), 1 + _randn(N, g=g, dtype=F64).abs(), _randn(N, d, g=g, dtype=F64)]
    ins[0][3], ins[1][3], ins[2][3] = -math.inf, 0.0, 0.0  # row 3: first partial empty (weight 0)
    G = _randn(N, d, g=g, dtype=F64)
    a = [t.clone().requires_grad_(True) for t in ins]
    m, l, o, h = dk.merge_partials(*a, return_h=True)
    ((h * G).sum() + l.sum()).backward()
    b = [t.clone().requires_grad_(True) for t in ins]
    rm, rl, ro, _, _ = oracle_merge(*b)
    ((ro / rl[..., None] * G).sum() + rl.sum()).backward()
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        # fp64 on elementwise formulas of O(1) values: a few dozen roundings of 1.1e-16
        assert torch.isfinite(x.grad).all(), f"merge grad input {i}: non-finite, deviation=inf"
        dev = (x.grad - y.grad).abs().max().item()
        assert dev <= 1e-12, f"merge grad input {i}: deviation={dev:.3g} bound=1e-12"


# --------------------------------------------------------------------------------------------------------
# availability


def test_kernels_compile_for_sm90_with_vectorised_source_loads():
    """The interpreter accepts code the compiler rejects, and CI has no GPU: compile every launched
    variant for sm_90 through Triton's real pipeline (incl. ptxas) in a fresh process without
    TRITON_INTERPRET. The 16-byte-aligned bf16 variants must load sources 128 bits at a time (no scalar
    ld.global.b16): the offset table's tl.multiple_of hint is what makes that possible."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU the other tests compile and run every variant natively")
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "dormouse_kernels._compile_check"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert {r["kernel"] for r in rows} == {"fwd", "bwd", "merge"}, proc.stdout
    for r in rows:
        if r.get("aligned") and r["dtype"] == "bf16":
            assert "ld.global.v4.b32" in r["loads"] and "ld.global.b16" not in r["loads"], r


def test_triton_unavailable_reason(monkeypatch):
    assert dk.triton_unavailable_reason(DEVICE) is None, dk.triton_unavailable_reason(DEVICE)
    meta = dk.triton_unavailable_reason(torch.device("meta"))
    assert meta is not None and "kernel=torch" in meta
    monkeypatch.setattr(dk, "INTERPRETED", False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cpu = dk.triton_unavailable_reason(torch.device("cpu"))
    assert cpu is not None and "TRITON_INTERPRET=1 before importing" in cpu and "kernel=torch" in cpu
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        dk.depth_attend_fused([torch.zeros(2, 4)], torch.zeros(4))
