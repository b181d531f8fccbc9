"""Gates for dormouse.ops.attnres (Attention Residuals, arXiv:2603.15031; spec: attnres.md).

Every oracle here is independent of the implementation:
* gold literals copied from attnres.md (Fixture A, Fixture B);
* a deliberately naive float64 reference written in this file from the equations (explicit Python loops
  over sources and feature components, Eq. 6 source sets by block-membership arithmetic);
* central finite differences in float64 for gradients.
Every assertion message carries ``deviation=<measured> bound=<allowed>`` so tests/falsification can report by
how much a gate went red. Notation for tolerance arguments: u = 2**-53 ~ 1.1e-16 is the float64 unit
roundoff.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Callable, Sequence

import pytest
import torch
from torch import Tensor

from dormouse.ops.attnres import (
    BlockAttnResState,
    block_sources,
    depth_attend,
    online_softmax_merge,
    phase1_stats,
    phase2_input,
    resolve_kernel,
    two_phase_block,
)

F64 = torch.float64


def _dev(got: Tensor, want: Tensor) -> float:
    """Max abs deviation; NaN propagates (and fails every ``<=``)."""
    return (got.double() - want.double()).abs().max().item()


def _assert_close(got: Tensor, want: Tensor, bound: float, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)} (deviation=inf)"
    dev = _dev(got, want)
    assert dev <= bound, f"{what}: deviation={dev:.3e} bound={bound:.1e}"


# ----------------------------------------------------------------------------------------------------
# the naive float64 reference, written from the equations
# ----------------------------------------------------------------------------------------------------


def ref_attend(
    sources: Sequence[Tensor], w: Tensor, g: Tensor | None = None, eps: float = 1e-6, form: str = "paper"
) -> Tensor:
    """Eq. 2-4 with loops: s_i = sum_k w_k g_k x_ik / sqrt(mean_k x_ik^2 + eps); softmax; sum_i a_i v_i.

    ``form="sqrt_d"``: the L2-normalised key divided by sqrt(d), with eps on the mean square:
    s_i = sum_k w_k g_k x_ik / sqrt(sum_k x_ik^2 + d*eps) / sqrt(d). ``w`` may be [d] or [..., d].
    """
    d = w.shape[-1]
    vs = [v.to(F64) for v in sources]
    w = w.to(F64)
    scores = []
    for v in vs:
        sq = sum(v[..., k] ** 2 for k in range(d))
        dot = sum(w[..., k] * (1.0 if g is None else g[k].to(F64)) * v[..., k] for k in range(d))
        if form == "paper":
            scores.append(dot / torch.sqrt(sq / d + eps))
        else:
            scores.append(dot / torch.sqrt(sq + d * eps) / math.sqrt(d))
    top = scores[0]
    for s in scores[1:]:
        top = torch.maximum(top, s)
    weights = [torch.exp(s - top) for s in scores]
    z = sum(weights)
    out = torch.zeros_like(vs[0])
    for wt, v in zip(weights, vs, strict=True):
        out = out + (wt / z).unsqueeze(-1) * v
    return out


def _fold(terms: list[Tensor]) -> Tensor:
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def ref_eq6_sources(b0: Tensor, outputs: Sequence[Tensor], S: int, l: int) -> list[Tensor]:
    """Eq. 6 for layer l (1-based) from block membership: layer j is in block (j-1)//S + 1."""
    n = (l - 1) // S + 1  # block of layer l
    i = (l - 1) % S + 1  # its position in the block
    srcs = [b0]
    for k in range(1, n):  # the completed blocks b_1 .. b_{n-1}, each once
        srcs.append(_fold([outputs[j - 1] for j in range(1, l) if (j - 1) // S + 1 == k]))
    if i >= 2:  # b_n^{i-1}: layers of block n before layer l (never l itself)
        srcs.append(_fold([outputs[j - 1] for j in range(1, l) if (j - 1) // S + 1 == n]))
    return srcs


# ----------------------------------------------------------------------------------------------------
# gold: Fixture A
# ----------------------------------------------------------------------------------------------------

# attnres.md, Fixture A: v_0 = e_0, v_1 = e_1, d = 4, w = 2 e_0, gain = 1; alpha_0 = out[0].
FIXTURE_A = [
    ("paper", 0.0, 0.9820137900),
    ("paper", 1e-6, 0.9820136487),
    ("paper", 1e-5, 0.9820123770),
    ("sqrt_d", 0.0, 0.7310585786),
]


@pytest.mark.parametrize(("form", "eps", "alpha0"), FIXTURE_A, ids=[f"{f}-eps{e:g}" for f, e, _ in FIXTURE_A])
def test_gold_fixture_a(form: str, eps: float, alpha0: float) -> None:
    e = torch.eye(4, dtype=F64)
    gain = torch.ones(4, dtype=F64)
    for sources in ([e[0], e[1]], torch.stack([e[0], e[1]])):  # list and stacked input
        out = depth_attend(sources, 2 * e[0], gain=gain, eps=eps, form=form)
        want = torch.tensor([alpha0, 1 - alpha0, 0.0, 0.0], dtype=F64)
        # the literal has 10 decimals (rounding <= 5e-11); float64 evaluation adds ~1e-16. The rows differ
        # by >= 1.3e-6 (eps) and 0.25 (form), so 1e-10 separates every row from every other.
        _assert_close(out, want, 1e-10, f"Fixture A {form} eps={eps}")


# ----------------------------------------------------------------------------------------------------
# gold: Fixture B (Block AttnRes, S = 2, eps = 0)
# ----------------------------------------------------------------------------------------------------

_B0 = [1.0, 0.0, 0.0, 0.0]
_F = [[0.0, 2.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 3.0], [-1.0, 1.0, 0.0, 0.0]]
# attnres.md, Fixture B table: per layer the source set (as literal vectors) and h_l.
_B_SETS = [
    [_B0],
    [_B0, [0.0, 2.0, 0.0, 0.0]],
    [_B0, [1.0, 2.0, 1.0, 0.0]],
    [_B0, [1.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 3.0]],
    [_B0, [1.0, 2.0, 1.0, 0.0], [-1.0, 1.0, 0.0, 3.0]],
]
_B_H = [
    [1.0, 0.0, 0.0, 0.0],
    [0.9820137900, 0.0359724199, 0.0, 0.0],
    [1.0, 0.1714468752, 0.0857234376, 0.0],
    [0.9835302360, 0.1686231856, 0.0843115928, 0.0494092919],
    [0.9900234816, 0.1755799129, 0.0852958269, 0.0149647776],
]
_W = torch.tensor([2.0, 0.0, 0.0, 0.0], dtype=F64)
# 10-decimal literals: rounding <= 5e-11; the float64 evaluation adds ~1e-15.
_GOLD_BOUND = 1e-10


def _t(v: list[float]) -> Tensor:
    return torch.tensor(v, dtype=F64)


def _assert_source_set(got: list[Tensor], want: list[list[float]], layer: int) -> None:
    # the sets are sums of small integers: exact in float64, so "exactly" means torch.equal
    assert len(got) == len(want), (
        f"layer {layer}: {len(got)} sources but Eq. 6 has {len(want)} "
        f"(deviation={abs(len(got) - len(want))} sources bound=0)"
    )
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(g, _t(w)), (
            f"layer {layer} source {k}: {g.tolist()} != {w} (deviation={_dev(g, _t(w)):.3e} bound=0)"
        )


def test_gold_fixture_b_block_sources() -> None:
    b0, fs = _t(_B0), [_t(f) for f in _F]
    for l in range(1, 6):
        srcs = block_sources(b0, fs[: l - 1], 2)
        _assert_source_set(srcs, _B_SETS[l - 1], l)
        _assert_close(depth_attend(srcs, _W, eps=0.0), _t(_B_H[l - 1]), _GOLD_BOUND, f"Fixture B h_{l}")


def test_gold_fixture_b_streaming() -> None:
    b0, fs = _t(_B0), [_t(f) for f in _F]
    state = BlockAttnResState(b0, 2)
    for l in range(1, 6):
        assert state.layers_pushed == l - 1, (
            f"layers_pushed={state.layers_pushed} (deviation={state.layers_pushed - l + 1})"
        )
        _assert_source_set(state.sources(), _B_SETS[l - 1], l)
        h = state.read(_W, gain=torch.ones(4, dtype=F64), eps=0.0)
        _assert_close(h, _t(_B_H[l - 1]), _GOLD_BOUND, f"Fixture B streaming h_{l}")
        if l <= 4:
            state.push(fs[l - 1])


def test_gold_fixture_b_two_phase() -> None:
    b0, fs = _t(_B0), [_t(f) for f in _F]
    completed = [b0]
    got: list[Tensor] = []
    for start, size in ((0, 2), (2, 2), (4, 1)):  # blocks {1,2}, {3,4}, and the short tail {5}
        queries = _W.repeat(size, 1)
        inputs, b_n = two_phase_block(
            queries,
            completed,
            lambda i, h, s=start: fs[s + i] if s + i < 4 else torch.zeros(4, dtype=F64),
            eps=0.0,
        )
        got += inputs
        if start < 4:
            want_b = _fold(fs[start : start + size])
            assert torch.equal(b_n, want_b), (  # sums of small integers: exact
                f"b_n={b_n.tolist()} != {want_b.tolist()} (deviation={_dev(b_n, want_b):.3e} bound=0)"
            )
        completed = [*completed, b_n]
    for l in range(1, 6):
        _assert_close(got[l - 1], _t(_B_H[l - 1]), _GOLD_BOUND, f"Fixture B two-phase h_{l}")


# ----------------------------------------------------------------------------------------------------
# equivalences against the naive reference, float64, random inputs
# ----------------------------------------------------------------------------------------------------

SHAPE = (2, 3)  # batch, time
D = 8


def _problem(L: int, seed: int, gains: bool = True) -> tuple[Tensor, list[Tensor], Tensor, Tensor | None]:
    """b_0, fixed outputs f_1..f_L (teacher forcing), queries and gains [L + 1, d] (the last: the readout)."""
    gen = torch.Generator().manual_seed(seed)
    b0 = torch.randn(*SHAPE, D, generator=gen, dtype=F64)
    outs = [torch.randn(*SHAPE, D, generator=gen, dtype=F64) for _ in range(L)]
    queries = torch.randn(L + 1, D, generator=gen, dtype=F64)  # |s| up to ~10: sharp, non-uniform weights
    g = 1 + 0.3 * torch.randn(L + 1, D, generator=gen, dtype=F64) if gains else None
    return b0, outs, queries, g


# Bound for one read vs the naive reference, float64. A score is a d-term dot product divided by a norm:
# relative error <= (d + 4) u ~ 1.3e-15, |s| <= ~15, so |ds| <= ~2e-14; the mixture moves by at most
# |ds| * max|v - h| <= 2e-14 * 2 * max|v| (max|v| <= S * 4 ~ 30 for sums of S N(0,1) outputs) ~ 1.2e-12;
# the weighted sum adds (L + 1) u max|v| ~ 3e-14. Bound 1e-11 (>= 8x margin). Every defect gated here
# moves h by > 1e-3 (see docs/falsification.md).
_READ_BOUND = 1e-11

CASES = [  # (L, S, form, eps, gains): uneven tails (7,3), (5,2); S = 1 (Full); S > L (4,8); S = L
    (7, 3, "paper", 1e-6, True),
    (6, 2, "paper", 0.0, False),
    (5, 2, "sqrt_d", 1e-6, True),
    (5, 1, "paper", 1e-5, True),
    (4, 8, "paper", 1e-6, True),
    (8, 4, "sqrt_d", 0.0, True),
    (3, 3, "paper", 1e-6, True),
]


@pytest.mark.parametrize(
    ("L", "S", "form", "eps", "gains"), CASES, ids=[f"L{c[0]}-S{c[1]}-{c[2]}" for c in CASES]
)
def test_paths_agree_with_naive_reference(L: int, S: int, form: str, eps: float, gains: bool) -> None:
    """Streaming == block_sources + depth_attend == two_phase_block == the naive Eq. 6 reference."""
    b0, outs, Q, G = _problem(L, seed=L * 100 + S, gains=gains)
    gain = (lambda l: G[l]) if G is not None else (lambda l: None)
    want = [
        ref_attend(ref_eq6_sources(b0, outs, S, l), Q[l - 1], gain(l - 1), eps, form) for l in range(1, L + 2)
    ]
    # (layer L + 1 is the readout after the last layer: every source, the short tail's partial included)

    state = BlockAttnResState(b0, S)
    # the model's path: every read's query (and gain) given up front as a table, each source scored against
    # all of them once (read_row)
    table = BlockAttnResState(b0, S, queries=Q[: L + 1], gains=None if G is None else G[: L + 1], eps=eps,
                              form=form)
    for l in range(1, L + 2):
        # the source SET first: exact, because the implementation and Eq. 6 fold the same terms in order
        ref_set = ref_eq6_sources(b0, outs, S, l)
        for name, got_set in (
            ("streaming", state.sources()),
            ("block_sources", block_sources(b0, outs[: l - 1], S)),
        ):
            assert len(got_set) == len(ref_set), (
                f"{name} layer {l}: {len(got_set)} sources, Eq. 6 has {len(ref_set)} "
                f"(deviation={abs(len(got_set) - len(ref_set))} sources bound=0)"
            )
            dev = max(_dev(a, b) for a, b in zip(got_set, ref_set, strict=True))
            assert dev == 0.0, f"{name} layer {l}: source set differs (deviation={dev:.3e} bound=0)"
        kw = {"gain": gain(l - 1), "eps": eps, "form": form}
        _assert_close(state.read(Q[l - 1], **kw), want[l - 1], _READ_BOUND, f"streaming h_{l}")
        _assert_close(table.read_row(l - 1), want[l - 1], _READ_BOUND, f"query-table h_{l}")
        direct = depth_attend(block_sources(b0, outs[: l - 1], S), Q[l - 1], **kw)
        _assert_close(direct, want[l - 1], _READ_BOUND, f"block_sources+depth_attend h_{l}")
        if l <= L:
            state.push(outs[l - 1])
            table.push(outs[l - 1])
    assert state.layers_pushed == L

    completed, got, received = [b0], [], {}
    for start in range(0, L, S):
        size = min(S, L - start)

        def layer_fn(i: int, h: Tensor, s: int = start) -> Tensor:
            received[s + i] = h
            return outs[s + i]

        inputs, b_n = two_phase_block(
            Q[start : start + size],
            completed,
            layer_fn,
            gains=None if G is None else G[start : start + size],
            eps=eps,
            form=form,
        )
        got += inputs
        _assert_close(b_n, _fold(outs[start : start + size]), 0.0, f"two-phase b_n (block at {start})")
        completed = [*completed, b_n]
    for l in range(1, L + 1):
        _assert_close(got[l - 1], want[l - 1], _READ_BOUND, f"two-phase h_{l}")
        # the layer must be run on exactly the input that two_phase_block returns for it
        _assert_close(received[l - 1], got[l - 1], 0.0, f"two-phase layer_fn input {l}")


def test_block_size_one_is_full_attnres() -> None:
    """S = 1: the sources of layer l are [h_1, f_1, ..., f_{l-1}] (Eq. 3), nothing summed."""
    L = 5
    b0, outs, Q, G = _problem(L, seed=7)
    state = BlockAttnResState(b0, 1)
    for l in range(1, L + 2):
        full = [b0, *outs[: l - 1]]  # Full AttnRes, Eq. 3: every earlier output is its own source
        for name, got_set in (
            ("streaming", state.sources()),
            ("block_sources", block_sources(b0, outs[: l - 1], 1)),
        ):
            assert len(got_set) == len(full) and all(a is b for a, b in zip(got_set, full, strict=True)), (
                f"{name} layer {l}: not the Full source list "
                f"(deviation={abs(len(got_set) - len(full))} sources bound=0)"
            )
        _assert_close(
            state.read(Q[l - 1], gain=G[l - 1]),
            ref_attend(full, Q[l - 1], G[l - 1]),
            _READ_BOUND,
            f"S=1 h_{l}",
        )
        if l <= L:
            state.push(outs[l - 1])


def test_zero_queries_give_the_plain_mean() -> None:
    """At init (w = 0) every score is 0, so every input is the plain average of its sources (paper §5)."""
    L, S = 7, 3
    b0, outs, _, G = _problem(L, seed=3)
    zero = torch.zeros(D, dtype=F64)
    state = BlockAttnResState(b0, S)
    completed, tp = [b0], []
    for start in range(0, L, S):
        size = min(S, L - start)
        inputs, b_n = two_phase_block(
            torch.zeros(size, D, dtype=F64),
            completed,
            lambda i, h, s=start: outs[s + i],
            gains=G[start : start + size],
        )
        tp += inputs
        completed = [*completed, b_n]
    for l in range(1, L + 1):
        srcs = ref_eq6_sources(b0, outs, S, l)
        mean = _fold(srcs) / len(srcs)
        # alpha = 1/n exactly up to one rounding; sum of n terms: <= (n + 1) u max|v| ~ 1e-14 for n <= 4,
        # |v| <= 12. Bound 1e-13. (A wrong source set moves the mean by ~|v|/n.)
        for name, h in (
            ("depth_attend", depth_attend(srcs, zero, gain=G[l - 1])),
            ("streaming", state.read(zero, gain=G[l - 1])),
            ("two-phase", tp[l - 1]),
        ):
            _assert_close(h, mean, 1e-13, f"{name} zero-query h_{l}")
        state.push(outs[l - 1])


def test_depth_attend_matches_naive_reference() -> None:
    gen = torch.Generator().manual_seed(11)
    for L, form, eps in ((1, "paper", 1e-6), (3, "paper", 0.0), (6, "sqrt_d", 1e-6), (9, "paper", 1e-5)):
        srcs = [3 * torch.randn(*SHAPE, D, generator=gen, dtype=F64) for _ in range(L)]
        w, g = torch.randn(D, generator=gen, dtype=F64), 1 + 0.3 * torch.randn(D, generator=gen, dtype=F64)
        want = ref_attend(srcs, w, g, eps, form)
        _assert_close(
            depth_attend(srcs, w, gain=g, eps=eps, form=form), want, _READ_BOUND, f"list L={L} {form}"
        )
        _assert_close(
            depth_attend(torch.stack(srcs), w, gain=g, eps=eps, form=form),
            want,
            _READ_BOUND,
            f"stacked L={L} {form}",
        )
        wp = torch.randn(*SHAPE, D, generator=gen, dtype=F64)  # one query per position
        _assert_close(
            depth_attend(srcs, wp, gain=g, eps=eps, form=form),
            ref_attend(srcs, wp, g, eps, form),
            _READ_BOUND,
            f"per-position query L={L} {form}",
        )


def test_gain_in_the_norm_equals_gain_folded_into_the_query() -> None:
    """w . (g * RMSNorm(x)) = (w * g) . RMSNorm(x): the naive reference puts g in the norm."""
    gen = torch.Generator().manual_seed(5)
    srcs = [torch.randn(*SHAPE, D, generator=gen, dtype=F64) for _ in range(4)]
    w, g = torch.randn(D, generator=gen, dtype=F64), 1 + 0.5 * torch.randn(D, generator=gen, dtype=F64)
    want = ref_attend(srcs, w, g)  # gain applied to the normalised key
    _assert_close(depth_attend(srcs, w, gain=g), want, _READ_BOUND, "gain= vs gain in the norm")
    # (w * g) rounds once per component (u |w g|), which moves a score by <= d u |w|_inf |x|/rms ~ 1e-14
    _assert_close(depth_attend(srcs, w * g), want, _READ_BOUND, "query w*g vs gain in the norm")
    _assert_close(
        depth_attend(srcs, w, gain=torch.ones(D, dtype=F64)), ref_attend(srcs, w), _READ_BOUND, "gain=1"
    )


@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_sqrt_d_form_is_paper_form_with_w_over_d(eps: float) -> None:
    """L2(x)/sqrt(d) = RMSNorm(x)/d (eps on the mean square): sqrt_d(w) = paper(w/d), a d-fold temperature."""
    gen = torch.Generator().manual_seed(9)
    srcs = [torch.randn(*SHAPE, D, generator=gen, dtype=F64) for _ in range(5)]
    w, g = 4 * torch.randn(D, generator=gen, dtype=F64), 1 + 0.3 * torch.randn(D, generator=gen, dtype=F64)
    sqrt_d = depth_attend(srcs, w, gain=g, eps=eps, form="sqrt_d")
    _assert_close(sqrt_d, ref_attend(srcs, w, g, eps, "sqrt_d"), _READ_BOUND, "sqrt_d vs naive L2/sqrt(d)")
    _assert_close(
        sqrt_d, depth_attend(srcs, w / D, gain=g, eps=eps, form="paper"), _READ_BOUND, "sqrt_d vs paper(w/d)"
    )
    # and the two forms are NOT the same function at the same w (the d-fold temperature is real)
    apart = _dev(sqrt_d, depth_attend(srcs, w, gain=g, eps=eps, form="paper"))
    assert apart > 1e-2, f"paper and sqrt_d agree at the same w (deviation={apart:.3e}, expected > 1e-2)"


def test_online_softmax_merge_matches_one_joint_softmax() -> None:
    """Two states over disjoint sets merge to the softmax over their union, even at |s| ~ 800 (no inf)."""
    gen = torch.Generator().manual_seed(13)
    s = torch.randn(6, 5, generator=gen, dtype=F64) * 3
    s[:, :3] += 800.0  # exp(800) overflows float64: only a max-subtracted merge survives
    v = torch.randn(6, 5, D, generator=gen, dtype=F64)

    def state(idx: slice) -> tuple[Tensor, Tensor, Tensor]:
        m = s[:, idx].amax(dim=1)
        p = torch.exp(s[:, idx] - m[:, None])
        return m, p.sum(1), (p.unsqueeze(-1) * v[:, idx]).sum(1)

    alpha = torch.softmax(s, dim=1)
    want = sum(alpha[:, j, None] * v[:, j] for j in range(5))
    # both orders: the larger max on the left, then on the right (each side must be rescaled by e^{m_k - m})
    for left, right in ((slice(0, 2), slice(2, 5)), (slice(2, 5), slice(0, 2))):
        m, l, o = online_softmax_merge(*state(left), *state(right))
        # a handful of exp/mul/add roundings on O(1) quantities: ~10 u |v| ~ 1e-14. Bound 1e-12.
        _assert_close(o / l.unsqueeze(-1), want, 1e-12, f"merged mixture ({left.start}.. first)")
        _assert_close(m, s.amax(dim=1), 0.0, "merged max")


def test_depth_attend_backward_under_autocast_is_its_fp32_backward() -> None:
    """A backward called inside bf16 autocast (CPU standing in for CUDA) keeps the read's float32 precision."""
    gen = torch.Generator().manual_seed(24)
    srcs = [(3 * torch.randn(4, 16, 64, generator=gen)).requires_grad_() for _ in range(5)]
    w = torch.randn(64, generator=gen).requires_grad_()  # |s| up to ~20
    r = torch.randn(4, 16, 64, generator=gen)
    want = torch.autograd.grad((depth_attend(srcs, w) * r).sum(), [*srcs, w])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = torch.autograd.grad((depth_attend(srcs, w) * r).sum(), [*srcs, w])
    # the same float32 ops both ways (bitwise expected); 8 ulps of the largest gradient leave room for a
    # backend's summation order. A bf16 dq matmul (2^-8 relative on a sum over 1024 tokens) is ~1e2 ulps.
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        _assert_close(a, b, 8 * 2.0**-23 * b.abs().max().item(), f"gradient {i} under autocast vs float32")


def test_online_softmax_merge_of_empty_states_weighs_them_zero() -> None:
    """An empty state (m = -inf, l = 0, o = 0) weighs 0: merged with a live one it returns the live one;
    two empty ones merge to an empty one. Both with finite (zero) gradients, never NaN."""
    live_m, live_l, live_o = torch.tensor([0.7]), torch.tensor([2.5]), torch.tensor([[1.0, -2.0]])
    empty_m, empty_l, empty_o = torch.tensor([-math.inf]), torch.tensor([0.0]), torch.zeros(1, 2)
    ins = [t.clone().requires_grad_() for t in (empty_m, empty_l, empty_o, live_m, live_l, live_o)]
    m, l, o = online_softmax_merge(*ins)
    for what, got, want in (("m", m, live_m), ("l", l, live_l), ("o", o, live_o)):
        dev = (got - want).abs().max().item()  # exact: exp(-inf) = 0 and exp(0) = 1 are exact
        assert dev == 0.0, f"empty + live: {what} deviation={dev:.3e} bound=0"
    both = [t.clone().requires_grad_() for t in (empty_m, empty_l, empty_o, empty_m, empty_l, empty_o)]
    m, l, o = online_softmax_merge(*both)
    assert torch.isneginf(m).all() and l.item() == 0.0 and (o == 0).all(), (
        f"two empty states merged to m={m.tolist()} l={l.tolist()} o={o.tolist()} (deviation=nan, bound=empty)"
    )
    (l.sum() + o.sum()).backward()
    bad = sum(int((~torch.isfinite(t.grad)).sum()) for t in both)
    assert bad == 0, f"two empty states: {bad} non-finite gradient entries (deviation={bad}, bound=0)"


def test_bf16_sources_are_mixed_in_float32() -> None:
    """bf16 in, bf16 out; score, softmax and sum in float32 (attnres.md: the softmax in float32 at least)."""
    gen = torch.Generator().manual_seed(17)
    srcs = [(3 * torch.randn(4, 16, 64, generator=gen)).bfloat16() for _ in range(6)]
    w = torch.randn(64, generator=gen)  # |w| ~ 8: scores ~ N(0, 64), sharp weights
    out = depth_attend(srcs, w)
    assert out.dtype == torch.bfloat16, f"output dtype {out.dtype} (deviation=dtype)"
    want = ref_attend([s.double() for s in srcs], w.double())
    # float32 internals: relative error ~1e-6; the final cast to bf16 rounds to 8 significant bits:
    # bf16 keeps 8 significant bits, so round-to-nearest of the float32 result x32 obeys
    # |fl(x32) - x| <= 2**-8 |x| + (1 + 2**-8) |x32 - x|: a hard bound, not a statistical one. float32
    # internals: score error ~ sqrt(d) 6e-8 |s| ~ 1.5e-5 for |s| ~ 30, times max|v - h| ~ 10 -> |x32 - x| <=
    # ~2e-4 (measured 5e-6). A bf16 score/softmax puts 2**-8 |s| ~ 0.1 on each score: measured error 0.10,
    # ~100x this bound.
    err = (out.double() - want).abs()
    allowed = 2.0**-8 * want.abs() + 2e-4
    ratio = (err / allowed).max().item()
    assert ratio <= 1.0, (
        f"bf16 read vs float64: deviation={err.max().item():.3e} ({ratio:.2f}x the bound) bound=2^-8|h|+2e-4"
    )


def test_depth_attend_under_autocast_is_its_fp32_result() -> None:
    """The read leaves autocast: under bf16 autocast (CPU standing in for CUDA) the torch read of float32
    sources is its float32 result, and so is Alg. 1's Phase 1 + Phase 2."""
    gen = torch.Generator().manual_seed(23)
    srcs = [(3 * torch.randn(4, 16, 64, generator=gen)) for _ in range(6)]
    w = torch.randn(64, generator=gen)  # |w| ~ 8: scores ~ N(0, 64), |s| up to ~20
    g = 1 + 0.5 * torch.randn(64, generator=gen)
    queries, gains = torch.randn(3, 64, generator=gen), 1 + 0.5 * torch.randn(3, 64, generator=gen)
    want = depth_attend(srcs, w, gain=g, kernel="torch")
    want_p1 = phase1_stats(srcs[:-1], queries, gains=gains)
    want_p2 = phase2_input(tuple(t[1] for t in want_p1), srcs[-1], queries[1], gain=gains[1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = depth_attend(srcs, w, gain=g, kernel="torch")
        got_p1 = phase1_stats(srcs[:-1], queries, gains=gains)
        got_p2 = phase2_input(tuple(t[1] for t in got_p1), srcs[-1], queries[1], gain=gains[1])
    # The same float32 ops on the same inputs: bitwise equal is expected; 8 float32 ulps of the largest
    # value (|h| <= ~10) leave room for a backend that picks another summation order. A bf16 score matmul
    # puts 2^-8 |s| ~ 0.08 on each score: outputs move by ~1e-1 (measured 0.10 in the bf16 test above).
    for what, a, b in [("depth_attend", got, want), ("phase1 m", got_p1[0], want_p1[0]),
                       ("phase1 l", got_p1[1], want_p1[1]), ("phase1 o", got_p1[2], want_p1[2]),
                       ("phase2 h", got_p2, want_p2)]:
        assert a.dtype == b.dtype == torch.float32, f"{what}: dtype {a.dtype} under autocast (deviation=dtype)"
        _assert_close(a, b, 8 * 2.0**-23 * b.abs().max().item(), f"{what} under autocast vs float32")


def test_query_table_read_under_autocast_is_its_fp32_result_and_backward() -> None:
    """The model's read (a query table, every source scored against all rows at once) leaves autocast too:
    under bf16 autocast (CPU standing in for CUDA) its output and its gradients are their float32 values."""
    gen = torch.Generator().manual_seed(25)
    b0 = (3 * torch.randn(4, 16, 64, generator=gen)).requires_grad_()
    outs = [(3 * torch.randn(4, 16, 64, generator=gen)).requires_grad_() for _ in range(4)]
    queries = torch.randn(5, 64, generator=gen).requires_grad_()  # |s| up to ~20, as above
    gains = (1 + 0.5 * torch.randn(5, 64, generator=gen)).requires_grad_()
    r = torch.randn(5, 4, 16, 64, generator=gen)

    def reads() -> list[Tensor]:
        state, hs = BlockAttnResState(b0, 2, queries=queries, gains=gains), []
        for l in range(5):
            hs.append(state.read_row(l))
            if l < 4:
                state.push(outs[l])
        return hs

    params = [b0, *outs, queries, gains]
    want = reads()
    want_g = torch.autograd.grad(sum((h * r[i]).sum() for i, h in enumerate(want)), params)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = reads()
        got_g = torch.autograd.grad(sum((h * r[i]).sum() for i, h in enumerate(got)), params)
    # the same float32 ops both ways (bitwise expected; 8 ulps of the largest value for a backend's summation
    # order). A bf16 score matmul moves outputs by ~1e-1 and the query gradient by ~1e2 ulps (see above).
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == torch.float32, f"h_{i + 1}: dtype {a.dtype} under autocast (deviation=dtype)"
        _assert_close(a, b, 8 * 2.0**-23 * b.abs().max().item(), f"query-table h_{i + 1} under autocast")
    for i, (a, b) in enumerate(zip(got_g, want_g, strict=True)):
        _assert_close(a, b, 8 * 2.0**-23 * b.abs().max().item(), f"query-table gradient {i} under autocast")


# ----------------------------------------------------------------------------------------------------
# gradients vs central finite differences (float64)
# ----------------------------------------------------------------------------------------------------

# Step h = 1e-5. Central-difference truncation error h^2 |f'''| / 6 ~ 2e-11 * |f'''| (|f'''| <= ~1e2 for these
# O(1) softmax mixtures) ~ 2e-9; roundoff ~ u |loss| * n_ops / h ~ 1.1e-16 * 10 * 10 / 1e-5 ~ 1e-9.
# So each fd component is good to ~3e-9: per-component bound 1e-6 |fd| + 1e-7 (30x the noise floor) and an
# aggregate ||analytic - fd|| / ||fd|| <= 1e-6 per parameter group (gradients are O(0.1-1)). A dropped or
# wrong gradient term gives relative errors of O(1e-2 .. 1).
_FD_H = 1e-5
_FD_RTOL = 1e-6
_FD_FLOOR = 1e-7


def _fd_grads(loss_fn: Callable[[], Tensor], params: Sequence[Tensor]) -> list[Tensor]:
    grads = []
    with torch.no_grad():
        for p in params:
            flat, g = p.detach().view(-1), torch.zeros(p.numel(), dtype=F64)
            for k in range(flat.numel()):
                x0 = flat[k].item()
                flat[k] = x0 + _FD_H
                lp = loss_fn().item()
                flat[k] = x0 - _FD_H
                lm = loss_fn().item()
                flat[k] = x0
                g[k] = (lp - lm) / (2 * _FD_H)
            grads.append(g.view_as(p))
    return grads


def _check_grads(loss_fn: Callable[[], Tensor], groups: dict[str, list[Tensor]]) -> None:
    params = [p for ps in groups.values() for p in ps]
    analytic = torch.autograd.grad(loss_fn(), params, allow_unused=True)
    # a gradient that autograd never reaches (e.g. a detached gain) counts as zero
    analytic = [torch.zeros_like(p) if a is None else a for a, p in zip(analytic, params, strict=True)]
    fd = _fd_grads(loss_fn, params)
    k = 0
    for name, ps in groups.items():
        a = torch.cat([t.reshape(-1) for t in analytic[k : k + len(ps)]])
        f = torch.cat([t.reshape(-1) for t in fd[k : k + len(ps)]])
        k += len(ps)
        rel = ((a - f).norm() / f.norm()).item()
        assert rel <= _FD_RTOL, (
            f"d loss/d {name}: ||analytic - fd|| / ||fd|| deviation={rel:.3e} bound={_FD_RTOL:.0e}"
        )
        excess = ((a - f).abs() - (_FD_RTOL * f.abs() + _FD_FLOOR)).max().item()
        worst = (a - f).abs().max().item()
        assert excess <= 0, (
            f"d loss/d {name}: a component misses |a - fd| <= {_FD_RTOL:.0e}|fd| + {_FD_FLOOR:.0e} "
            f"(deviation={worst:.3e} bound={_FD_FLOOR:.0e}+rel)"
        )


@pytest.mark.parametrize("form", ["paper", "sqrt_d"])
def test_depth_attend_gradients_match_finite_differences(form: str) -> None:
    gen = torch.Generator().manual_seed(21)
    srcs = [torch.randn(2, 3, D, generator=gen, dtype=F64).requires_grad_() for _ in range(4)]
    w = (torch.randn(D, generator=gen, dtype=F64) * (D if form == "sqrt_d" else 1)).requires_grad_()
    g = (1 + 0.3 * torch.randn(D, generator=gen, dtype=F64)).requires_grad_()
    r = torch.randn(2, 3, D, generator=gen, dtype=F64)
    _check_grads(
        lambda: (depth_attend(srcs, w, gain=g, form=form) * r).sum(),
        {"sources": srcs, "query": [w], "gain": [g]},
    )


def _streaming_loss(b0: Tensor, outs: list[Tensor], Q: Tensor, G: Tensor, R: Tensor, S: int, attend) -> Tensor:
    """Every read of a depth of len(outs) layers (+ the readout), each weighted by its own R: the sources are
    read many times, so a cached inverse RMS must collect its gradient from every read."""
    loss = torch.zeros((), dtype=F64)
    for l in range(1, len(outs) + 2):
        loss = loss + (attend(l, ref_eq6_sources(b0, outs, S, l)) * R[l - 1]).sum()
    return loss


@pytest.mark.parametrize("path", ["read", "read_row"])
@pytest.mark.parametrize(("S", "form"), [(1, "paper"), (2, "paper"), (1, "sqrt_d")])
def test_streaming_read_gradients_match_autograd_of_the_float64_reference(S: int, form: str, path: str) -> None:
    """The torch read's one-pass backward (sources read where they lie; inverse RMS, or with a query table
    every score, cached per source) against autograd of the naive float64 reference, at every read of a
    depth; then against finite differences."""
    gen = torch.Generator().manual_seed(29)
    L = 4
    b0 = torch.randn(1, 2, D, generator=gen, dtype=F64).requires_grad_()
    outs = [(torch.randn(1, 2, D, generator=gen, dtype=F64) * (1 + i)).requires_grad_() for i in range(L)]
    Q = (2 * torch.randn(L + 1, D, generator=gen, dtype=F64)).requires_grad_()
    G = (1 + 0.3 * torch.randn(L + 1, D, generator=gen, dtype=F64)).requires_grad_()
    R = torch.randn(L + 1, 1, 2, D, generator=gen, dtype=F64)
    params = {"embedding": [b0], "outputs": outs, "queries": [Q], "gains": [G]}

    def streamed() -> Tensor:
        loss = torch.zeros((), dtype=F64)
        if path == "read":
            state = BlockAttnResState(b0, S)
            read = lambda l: state.read(Q[l - 1], gain=G[l - 1], form=form)  # noqa: E731
        else:
            state = BlockAttnResState(b0, S, queries=Q, gains=G, form=form)
            read = lambda l: state.read_row(l - 1)  # noqa: E731
        for l in range(1, L + 2):
            loss = loss + (read(l) * R[l - 1]).sum()
            if l <= L:
                state.push(outs[l - 1])
        return loss

    flat = [p for ps in params.values() for p in ps]
    # a parameter the backward never reaches counts as a zero gradient (measured, not an autograd error)
    got = torch.autograd.grad(streamed(), flat, allow_unused=True)
    got = [torch.zeros_like(p) if a is None else a for a, p in zip(got, flat, strict=True)]
    want = torch.autograd.grad(
        _streaming_loss(b0, outs, Q, G, R, S, lambda l, srcs: ref_attend(srcs, Q[l - 1], G[l - 1], form=form)), flat
    )
    # float64 both ways, different association of the same sums: ~1e-15 relative on O(1-10) gradients.
    # A dropped term of the backward (the g . out shift, the key's norm path, the q term) is O(0.1-1).
    for (name, _), a, b in zip([(n, p) for n, ps in params.items() for p in ps], got, want, strict=True):
        _assert_close(a, b, 1e-10 * (1 + b.abs().max().item()), f"d loss/d {name} vs autograd of the reference")
    if S == 2:  # and once against central differences, independent of any autograd (slow: one case, two groups)
        _check_grads(streamed, {"outputs": outs, "queries": [Q]})


def test_per_position_query_gradients_match_autograd_of_the_float64_reference() -> None:
    """One query per position (the input-dependent query) through the same one-pass backward."""
    gen = torch.Generator().manual_seed(31)
    srcs = [(torch.randn(2, 3, D, generator=gen, dtype=F64) * (1 + i)).requires_grad_() for i in range(4)]
    w = (2 * torch.randn(2, 3, D, generator=gen, dtype=F64)).requires_grad_()
    g = (1 + 0.3 * torch.randn(D, generator=gen, dtype=F64)).requires_grad_()
    r = torch.randn(2, 3, D, generator=gen, dtype=F64)
    flat = [*srcs, w, g]
    got = torch.autograd.grad((depth_attend(srcs, w, gain=g) * r).sum(), flat)
    want = torch.autograd.grad((ref_attend(srcs, w, g) * r).sum(), flat)
    # float64 both ways: ~1e-15 relative; a wrong per-position dq (e.g. summed over positions) is O(1)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        _assert_close(a, b, 1e-10 * (1 + b.abs().max().item()), f"gradient {i} vs autograd of the reference")


def test_two_phase_gradients_match_finite_differences() -> None:
    gen = torch.Generator().manual_seed(23)
    S = 3
    completed = [torch.randn(2, 3, D, generator=gen, dtype=F64).requires_grad_() for _ in range(2)]
    Q = torch.randn(S, D, generator=gen, dtype=F64).requires_grad_()
    G = (1 + 0.3 * torch.randn(S, D, generator=gen, dtype=F64)).requires_grad_()
    Ws = torch.randn(S, D, D, generator=gen, dtype=F64) / math.sqrt(D)  # input-dependent layers
    R = torch.randn(S + 1, 2, 3, D, generator=gen, dtype=F64)

    def loss() -> Tensor:
        inputs, b_n = two_phase_block(Q, completed, lambda i, h: torch.tanh(h @ Ws[i]), gains=G)
        return sum((h * R[i]).sum() for i, h in enumerate(inputs)) + (b_n * R[S]).sum()

    _check_grads(loss, {"completed": completed, "queries": [Q], "gains": [G]})


# ----------------------------------------------------------------------------------------------------
# refusals: a ValueError naming the argument
# ----------------------------------------------------------------------------------------------------

_x = torch.zeros(3, 4)
_fn = lambda i, h: h  # noqa: E731


def _push_wrong() -> None:
    BlockAttnResState(_x, 2).push(torch.zeros(3, 5))


REFUSALS: list[tuple[str, str, Callable[[], object]]] = [
    ("mismatched source shapes", "sources", lambda: depth_attend([_x, torch.zeros(2, 4)], torch.zeros(4))),
    ("no sources", "sources", lambda: depth_attend([], torch.zeros(4))),
    ("stacked without L", "sources", lambda: depth_attend(torch.zeros(4), torch.zeros(4))),
    ("query of size d+1", "query", lambda: depth_attend([_x, _x], torch.zeros(5))),
    ("query of a wrong 2-D shape", "query", lambda: depth_attend([_x, _x], torch.zeros(2, 4))),
    ("unknown form", "form", lambda: depth_attend([_x], torch.zeros(4), form="l2")),
    ("unknown kernel", "kernel", lambda: depth_attend([_x], torch.zeros(4), kernel="cuda")),
    ("gain of size d+1", "gain", lambda: depth_attend([_x], torch.zeros(4), gain=torch.ones(5))),
    ("negative eps", "eps", lambda: depth_attend([_x], torch.zeros(4), eps=-1e-6)),
    ("block_size 0", "block_size", lambda: block_sources(_x, [], 0)),
    ("state block_size 0", "block_size", lambda: BlockAttnResState(_x, 0)),
    ("output of another shape", "outputs", lambda: block_sources(_x, [torch.zeros(3, 5)], 2)),
    ("pushed output of another shape", "output", _push_wrong),
    ("query table of the wrong width", "queries", lambda: BlockAttnResState(_x, 1, queries=torch.zeros(2, 5))),
    ("table gains of another shape", "gains",
     lambda: BlockAttnResState(_x, 1, queries=torch.zeros(2, 4), gains=torch.ones(3, 4))),
    ("table gains without queries", "gains", lambda: BlockAttnResState(_x, 1, gains=torch.ones(2, 4))),
    ("read_row without a table", "read_row", lambda: BlockAttnResState(_x, 1).read_row(0)),
    ("read_row past the table", "row", lambda: BlockAttnResState(_x, 1, queries=torch.zeros(2, 4)).read_row(2)),
    ("queries of the wrong width", "queries", lambda: two_phase_block(torch.zeros(2, 5), [_x], _fn)),
    ("no completed blocks (b_0 missing)", "completed", lambda: two_phase_block(torch.zeros(2, 4), [], _fn)),
    (
        "gains of another shape",
        "gains",
        lambda: two_phase_block(torch.zeros(2, 4), [_x], _fn, gains=torch.ones(3, 4)),
    ),
    ("unknown two-phase form", "form", lambda: two_phase_block(torch.zeros(2, 4), [_x], _fn, form="L2")),
]


@pytest.mark.parametrize(("case", "arg", "call"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_argument(case: str, arg: str, call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=rf"\b{arg}\b"):
        call()


# ----------------------------------------------------------------------------------------------------
# kernel routing
# ----------------------------------------------------------------------------------------------------


def _fake_kernels(reason: str | None, result: Tensor | None = None) -> types.ModuleType:
    mod = types.ModuleType("dormouse_kernels")
    mod.calls = []  # type: ignore[attr-defined]

    def depth_attend_fused(sources: object, query: Tensor, gain: object, eps: float, form: str) -> Tensor:
        mod.calls.append((sources, query, gain, eps, form))  # type: ignore[attr-defined]
        assert result is not None
        return result

    mod.depth_attend_fused = depth_attend_fused  # type: ignore[attr-defined]
    mod.triton_unavailable_reason = lambda device: reason  # type: ignore[attr-defined]
    return mod


def test_triton_where_it_cannot_run_is_refused_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """kernel='triton' that cannot run raises, saying what was asked, why not, and how to fix it."""
    for why, module in (
        ("does not import", None),
        ("reports a reason", _fake_kernels("no CUDA device found")),
    ):
        monkeypatch.setitem(sys.modules, "dormouse_kernels", module)  # None makes `import` raise ImportError
        for call in (
            lambda: resolve_kernel("triton", torch.device("cpu")),
            lambda: depth_attend([_x], torch.zeros(4), kernel="triton"),
        ):
            with pytest.raises(RuntimeError) as info:
                call()
            msg = str(info.value)
            for needed in ("kernel='triton'", "TRITON_INTERPRET=1", "CUDA"):
                assert needed in msg, f"{why}: message lacks {needed!r}: {msg}"
            assert ("dormouse_kernels" in msg) if module is None else ("no CUDA device found" in msg), msg
        # auto never raises: it falls back to torch, on CPU and on CUDA alike
        assert resolve_kernel("auto", "cpu") == "torch"
        assert resolve_kernel("auto", torch.device("cuda")) == "torch"
        assert resolve_kernel("torch", torch.device("cuda")) == "torch"


def test_triton_routing_calls_the_fused_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = torch.full((3, 4), 7.0)
    fake = _fake_kernels(None, sentinel)
    monkeypatch.setitem(sys.modules, "dormouse_kernels", fake)
    assert resolve_kernel("triton", "cpu") == "triton"
    assert resolve_kernel("auto", torch.device("cuda")) == "triton"
    assert resolve_kernel("auto", "cpu") == "torch"  # auto picks triton on CUDA only
    w, g = torch.zeros(4), torch.ones(4)
    out = depth_attend([_x, _x], w, gain=g, eps=1e-5, form="sqrt_d", kernel="triton")
    assert out is sentinel and len(fake.calls) == 1  # type: ignore[attr-defined]
    srcs, q, gain, eps, form = fake.calls[0]  # type: ignore[attr-defined]
    assert len(srcs) == 2 and q is w and gain is g and eps == 1e-5 and form == "sqrt_d"
    assert depth_attend([_x, _x], w, kernel="torch") is not sentinel  # torch never routes


# A large eps makes its placement visible (0.13 apart at d = 16 between eps on the sum and on the mean
# square). 0.125, not 0.1: Triton passes a Python float to a kernel as fp32, so eps = 0.1 enters the float64
# kernel as 0.1 + 1.5e-9 and moves the output by ~1e-9, above this test's 1e-11 float64 bound; 0.125 is
# exact in fp32, so what is compared is the formula, not eps's representation.
_KERNEL_CASES = [
    pytest.param("paper", 1e-6, id="paper-eps1e-06"),
    pytest.param("paper", 0.125, id="paper-eps0.125"),
    pytest.param("sqrt_d", 0.0, id="sqrt_d-eps0"),
    pytest.param("sqrt_d", 0.125, id="sqrt_d-eps0.125"),
]


@pytest.mark.parametrize(("form", "eps"), _KERNEL_CASES)
def test_triton_kernel_matches_reference(form: str, eps: float) -> None:
    """kernel='triton' computes the same function as the naive reference, and the same gradients as torch."""
    try:
        resolve_kernel("triton", "cpu")
    except RuntimeError as e:
        pytest.skip(f"fused kernel not runnable here: {e}")
    gen = torch.Generator().manual_seed(29)
    srcs = [(0.5 * torch.randn(2, 5, 16, generator=gen, dtype=F64)).requires_grad_() for _ in range(3)]
    w = (4 * torch.randn(16, generator=gen, dtype=F64)).requires_grad_()
    g = (1 + 0.3 * torch.randn(16, generator=gen, dtype=F64)).requires_grad_()
    out = depth_attend(srcs, w, gain=g, eps=eps, form=form, kernel="triton")
    # float64 throughout; only the accumulation order differs from the reference: the _READ_BOUND argument
    _assert_close(out, ref_attend(srcs, w, g, eps, form), _READ_BOUND, f"fused {form} eps={eps}")
    # the fused backward against torch autograd of the torch path (two independent derivations);
    # float64, O(1) gradients, a few dozen roundings each: 1e-10 is > 1e3 ulps of headroom
    r = torch.randn(2, 5, 16, generator=gen, dtype=F64)
    params = [*srcs, w, g]
    fused = torch.autograd.grad((out * r).sum(), params)
    plain = torch.autograd.grad((depth_attend(srcs, w, gain=g, eps=eps, form=form) * r).sum(), params)
    dev = max(_dev(a, b) for a, b in zip(fused, plain, strict=True))
    assert dev <= 1e-10, f"fused vs torch gradients ({form}, eps={eps}): deviation={dev:.3e} bound=1e-10"
