"""Fused Triton kernels for the AttnRes depth read (Kimi Team, arXiv:2603.15031, Eq. 2-4).

Per token t, with sources v_1..v_L in R^d, pseudo-query w, optional RMSNorm gain g and epsilon eps:

    paper form  (Eq. 2-3):  k_i = v_i / sqrt(mean(v_i^2) + eps)
    sqrt_d form (ablation): k_i = v_i / sqrt(sum(v_i^2) + d eps) / sqrt(d)  (= paper form with w/d, exactly)
    s_i = (w * g) . k_i        -- the gain is folded into the query: w.(g*k) = (w*g).k  (attnres.md)
    alpha = softmax_i(s)       -- one joint softmax over all L sources, no temperature
    out = sum_i alpha_i v_i    -- Eq. 4: values are RAW, only the keys are normalised

Forward (one pass over the sources, online softmax): each program owns BLOCK_N whole token rows and keeps
the running max m, normaliser l = sum exp(s - m) and the unnormalised accumulator acc = sum exp(s - m) v in
registers; it writes out = acc / l and lse = m + log(l) per token (the only statistic the backward needs:
alpha_i = exp(s_i - lse) is recomputed from s_i, which the backward recomputes anyway from the v_i it must
load for its own terms).

Backward (one pass over the sources), with G = grad_out, per token and source:

    da_i = G . v_i ;  sum_j alpha_j v_j = out, so  sum_j alpha_j da_j = G . out  (no second pass)
    ds_i = alpha_i (da_i - G . out)
    dv_i = alpha_i G + ds_i ds_i/dv_i
    ds_i/dv_i = c r (I - m v v^T r^2) q      with q = w * g, r = 1/sqrt(m |v|^2 + eps),
                                             paper: m = 1/d, c = 1;  sqrt_d: m = 1, c = 1/sqrt(d)
              = c r q - m s_i r^2 v_i        (the RMSNorm derivative: its 1/d is m -- the factor the
                                              predecessor's kernel dropped with every test green)
    dq = sum_t sum_i ds_i k_i ;  dw = dq * g ;  dg = dq * w

dq is a reduction over tokens: each program of a persistent grid accumulates its share in registers and
writes one [d] row of a partials buffer; the host sums the rows (deterministic, no atomics).

Source layout decision -- a table of element offsets, not a stacked buffer.
    The model keeps its history as separate tensors (one per iteration/sublayer). The kernel receives
    ``base`` (the source with the lowest address) plus an int64 table ``delta[i] = (ptr_i - ptr_base) /
    itemsize`` and loads source i at ``base + delta[i] + row * d + col``. Why not a preallocated
    [L_max, N, d] buffer filled slot by slot: writing slot i+1 in place bumps the buffer's autograd version
    counter, which invalidates every earlier read that saved the buffer for its backward (or forces a
    hack around the version check), and routes every read's gradient through CopySlices of the whole
    buffer. With the table each source stays its own node of the autograd graph: the autograd Function
    takes the L tensors as inputs, saves them (no copy), and returns L gradient views of one [L, N, d]
    gradient buffer. Offsets rather than raw pointers cast in-kernel: the same integer arithmetic runs
    unchanged under TRITON_INTERPRET=1 (tested in CI) and compiled, and when every source is 16-byte
    aligned the offsets carry a ``tl.multiple_of`` hint so the compiled loads stay 128-bit vectorised.
    Cost: one tiny host-to-device copy of L int64 per call (cached per distinct table). Reading data_ptr
    makes the call opaque to torch.compile (a graph break; the model compiles only its sublayers) and
    CUDA-graph capture would need the table precomputed. A stacked [L, ..., d] tensor is accepted too
    (unbound into views; its gradient is then re-stacked by autograd's unbind backward).

dtypes: fp32 / bf16 / fp16 inputs accumulate in fp32; fp64 inputs accumulate in fp64 (used by the tests'
finite-difference checks). The output and source gradients have the sources' dtype; the query/gain
gradients the query's/gain's dtype. Mixed source dtypes are promoted as torch.stack would (only the
differing sources are cast). Precision note for bf16/fp16: the backward's G . out uses the STORED
(rounded) output, as FlashAttention's backward does; when one source dominates (alpha ~ 1) da_i - G . out
cancels, and the rounding of out (2^-8 relative for bf16) enters ds_i as alpha_i G . delta_out -- an error
of order eps_bf16 * |G| |out| absolute, i.e. relative to the gradient's scale, not to each cancelling
element. tests/arms/test_kernels.py bounds exactly this. Saving an fp32 copy of out would remove it at the
cost of 2 extra bytes per element written in the forward and read in the backward.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from .forms import FORMS  # the score forms: one definition (kernels/forms.py)

# Register tile per program (elements of the [BLOCK_N, BLOCK_D] accumulator). 4096 fp32 = 16 regs/thread
# at 8 warps for the accumulator, the same again for the loaded source tile: no spills up to d = 4096.
_TILE = 4096


def _alloc(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> Tensor:
    """Allocate a kernel output. Test hook: tests monkeypatch this to return NaN-filled buffers, so an
    element the kernel fails to write shows up as NaN instead of as whatever memory happened to hold."""
    return torch.empty(tuple(shape), dtype=dtype, device=device)


@triton.jit
def _load_source(base_ptr, delta_ptr, i, tile, mask, row_ok, qg, eps, D, NORM_MEAN: tl.constexpr,
                 DELTA_ALIGN: tl.constexpr, ACC: tl.constexpr):
    """Source i of a row block, read through the offset table, and its score pieces (Eq. 2-3).

    Returns ``(v, dot, denom)`` with ``dot = (w * g) . v`` and ``denom`` such that ``s = dot / sqrt(denom)``:
    paper ``mean(v^2) + eps``; sqrt_d ``(sum(v^2) + d eps) * d`` (eps on the mean square, times d for the
    1/sqrt(d)). One definition for the forward and the backward, so the two cannot disagree on the key.
    """
    delta = tl.load(delta_ptr + i)
    if DELTA_ALIGN > 1:
        delta = tl.multiple_of(delta, DELTA_ALIGN)
    v = tl.load(base_ptr + delta + tile, mask=mask, other=0.0).to(ACC)
    ss = tl.sum(v * v, axis=1)
    dot = tl.sum(v * qg[None, :], axis=1)
    if NORM_MEAN:
        denom = ss / D + eps  # Eq. 3, RMSNorm: mean over d
    else:
        denom = (ss + eps * D) * D  # eps on the mean square; times d for 1/sqrt(d)
    # padded rows (beyond N) hold zeros: keep their root finite at eps = 0; they are never stored
    denom = tl.where(row_ok, denom, 1.0)
    return v, dot, denom


@triton.jit
def _depth_attend_fwd_kernel(
    base_ptr,  # the lowest-addressed source; every source is base + delta[i]
    delta_ptr,  # int64 [L] element offsets of the sources from base
    qg_ptr,  # [D] query with the gain folded in, accumulation dtype
    out_ptr,  # [N, D] output, source dtype
    lse_ptr,  # [N] logsumexp of the scores, accumulation dtype
    N,
    D,
    L,
    eps,
    NORM_MEAN: tl.constexpr,  # True: paper form (mean in the root); False: sqrt_d form
    DELTA_ALIGN: tl.constexpr,  # proven divisibility of every delta (1 = none)
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
):
    pid = tl.program_id(0)
    # int64 offsets: N * D exceeds 2^31 at realistic sizes (64K tokens x 2048 x a few sources)
    rows = (pid * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < N
    col_ok = cols < D
    mask = row_ok[:, None] & col_ok[None, :]
    tile = rows[:, None] * D + cols[None, :]

    qg = tl.load(qg_ptr + cols, mask=col_ok, other=0.0).to(ACC)
    m = tl.full([BLOCK_N], float("-inf"), ACC)
    l = tl.zeros([BLOCK_N], ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    for i in range(L):
        v, dot, denom = _load_source(base_ptr, delta_ptr, i, tile, mask, row_ok, qg, eps, D, NORM_MEAN,
                                     DELTA_ALIGN, ACC)
        s = dot / tl.sqrt(denom)
        # online softmax: rescale the running state to the new max (exp(-inf) = 0 on the first source)
        m_new = tl.maximum(m, s)
        rescale = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * rescale + p
        acc = acc * rescale[:, None] + p[:, None] * v
        m = m_new
    out = acc / l[:, None]
    tl.store(out_ptr + tile, out.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(lse_ptr + rows, m + tl.log(l), mask=row_ok)


@triton.jit
def _depth_attend_bwd_kernel(
    base_ptr,
    delta_ptr,
    qg_ptr,
    out_ptr,  # [N, D] forward output (source dtype)
    lse_ptr,  # [N]
    gout_ptr,  # [N, D] grad of the output (contiguous, source dtype)
    gsrc_ptr,  # [L, N, D] grad of the sources (source dtype)
    dqg_ptr,  # [NPROG, D] per-program partial grad of the folded query (accumulation dtype)
    N,
    D,
    L,
    eps,
    NUM_BLOCKS,
    NPROG,
    SLOT,  # N * D elements between gradient slots (passed, so Triton widens it to int64 when needed)
    NORM_MEAN: tl.constexpr,
    DELTA_ALIGN: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ACC: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < D
    qg = tl.load(qg_ptr + cols, mask=col_ok, other=0.0).to(ACC)
    dqg = tl.zeros([BLOCK_D], ACC)
    # persistent grid: the dq partial stays in registers across this program's token blocks
    for blk in range(pid, NUM_BLOCKS, NPROG):
        rows = (blk * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        row_ok = rows < N
        mask = row_ok[:, None] & col_ok[None, :]
        tile = rows[:, None] * D + cols[None, :]
        go = tl.load(gout_ptr + tile, mask=mask, other=0.0).to(ACC)
        o = tl.load(out_ptr + tile, mask=mask, other=0.0).to(ACC)
        # sum_j alpha_j (G . v_j) = G . out: the softmax-Jacobian centring term, without a second pass
        g_dot_out = tl.sum(go * o, axis=1)
        lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0).to(ACC)
        g_ptr = gsrc_ptr  # slot i of the gradient buffer, advanced by SLOT (no i * N * D in 32 bits)
        for i in range(L):
            v, dot, denom = _load_source(base_ptr, delta_ptr, i, tile, mask, row_ok, qg, eps, D, NORM_MEAN,
                                         DELTA_ALIGN, ACC)
            ks = 1.0 / tl.sqrt(denom)  # k_i = ks * v_i (ks = c r)
            s = dot * ks
            alpha = tl.exp(s - lse)
            ds = alpha * (tl.sum(go * v, axis=1) - g_dot_out)
            # ds/dv = c r q - m s r^2 v with ks = c r. paper (c = 1, m = 1/d): m r^2 = ks^2 / d -- the
            # RMSNorm's 1/d; sqrt_d (c = 1/sqrt(d), m = 1): m r^2 = r^2 = ks^2 d
            if NORM_MEAN:
                coef = s * ks * ks / D
            else:
                coef = s * ks * ks * D
            gv = alpha[:, None] * go + ds[:, None] * (ks[:, None] * qg[None, :] - coef[:, None] * v)
            tl.store(g_ptr + tile, gv.to(g_ptr.dtype.element_ty), mask=mask)
            dqg += tl.sum((ds * ks)[:, None] * v, axis=0)
            g_ptr += SLOT
    tl.store(dqg_ptr + pid * D + cols, dqg, mask=col_ok)


# ---------------------------------------------------------------------------------------------------------
# host side


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _tl_acc(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _blocks(d: int, block_n: int | None) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_D, num_warps): whole rows per program (the score needs all of d before the
    accumulator update), as many rows as fit the register tile."""
    block_d = max(16, triton.next_power_of_2(d))
    if block_n is None:
        block_n = max(1, min(64, _TILE // block_d))
    warps = 4 if block_n * block_d <= 2048 else 8
    return block_n, block_d, warps


_TABLE_CACHE: OrderedDict[tuple, Tensor] = OrderedDict()
_TABLE_CACHE_SIZE = 256


def _source_table(sources: Sequence[Tensor]) -> tuple[Tensor, Tensor, int]:
    """(base, delta table on the sources' device, DELTA_ALIGN) for already-validated contiguous sources."""
    itemsize = sources[0].element_size()
    ptrs = [s.data_ptr() for s in sources]
    base_idx = min(range(len(ptrs)), key=ptrs.__getitem__)
    base_ptr = ptrs[base_idx]
    diffs = [p - base_ptr for p in ptrs]
    if any(x % itemsize for x in diffs):  # unreachable for ordinary allocations; checked, not assumed
        raise ValueError("dormouse_kernels: source addresses are not element-aligned relative to each other")
    deltas = tuple(x // itemsize for x in diffs)
    align = 16 // itemsize if all(p % 16 == 0 for p in ptrs) else 1
    device = sources[0].device
    key = (device, deltas)
    table = _TABLE_CACHE.get(key)
    if table is None:
        host = torch.tensor(deltas, dtype=torch.int64)
        if device.type == "cuda":
            table = host.pin_memory().to(device, non_blocking=True)
        else:
            table = host.to(device)
        _TABLE_CACHE[key] = table
        if len(_TABLE_CACHE) > _TABLE_CACHE_SIZE:
            _TABLE_CACHE.popitem(last=False)
    else:
        _TABLE_CACHE.move_to_end(key)
    return sources[base_idx], table, max(1, align)


def _form_flag(form: str) -> bool:
    if form not in FORMS:
        raise ValueError(f"form={form!r}: expected one of {FORMS}")
    return form == "paper"


def _as_rows(sources: Sequence[Tensor]) -> list[Tensor]:
    """Validate the sources and view each as [N, d], contiguous (a copy only when one is not)."""
    if len(sources) == 0:
        raise ValueError("depth_attend_fused needs at least one source (L >= 1)")
    first = sources[0]
    for i, s in enumerate(sources):
        if s.shape != first.shape or s.dtype != first.dtype or s.device != first.device:
            raise ValueError(
                f"source {i} is {tuple(s.shape)}/{s.dtype}/{s.device} but source 0 is "
                f"{tuple(first.shape)}/{first.dtype}/{first.device}: all sources must match"
            )
    if first.dtype not in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        raise TypeError(f"sources are {first.dtype}: expected float32, bfloat16, float16 or float64")
    if first.dim() < 1 or first.shape[-1] == 0:
        raise ValueError(f"sources must be [..., d] with d >= 1, got {tuple(first.shape)}")
    d = first.shape[-1]
    return [s.contiguous().view(-1, d) for s in sources]


def depth_attend_forward(
    sources: Sequence[Tensor],
    qg: Tensor,
    eps: float,
    form: str = "paper",
    *,
    out: Tensor | None = None,
    lse: Tensor | None = None,
    block_n: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Launch the forward kernel (Eq. 2-4). ``sources``: L contiguous [N, d] tensors; ``qg``: [d] query with
    the gain already folded in. Writes into ``out`` [N, d] (sources' dtype) and ``lse`` [N] (accumulation
    dtype) when given -- the tests pass NaN-poisoned buffers -- and returns them."""
    norm_mean = _form_flag(form)
    n, d = sources[0].shape
    acc = _acc_dtype(sources[0].dtype)
    device = sources[0].device
    if out is None:
        out = _alloc((n, d), sources[0].dtype, device)
    if lse is None:
        lse = _alloc((n,), acc, device)
    base, table, align = _source_table(sources)
    bn, bd, warps = _blocks(d, block_n)
    qg = qg.to(acc).contiguous()
    grid = (triton.cdiv(n, bn),)
    if n > 0:
        _depth_attend_fwd_kernel[grid](
            base, table, qg, out, lse, n, d, len(sources), float(eps),
            NORM_MEAN=norm_mean, DELTA_ALIGN=align, BLOCK_N=bn, BLOCK_D=bd, ACC=_tl_acc(sources[0].dtype),
            num_warps=warps,
        )  # fmt: skip
    return out, lse


def _max_programs(device: torch.device) -> int:
    if device.type == "cuda":
        return 4 * torch.cuda.get_device_properties(device).multi_processor_count
    # Interpreter: two programs, so CI exercises the persistent loop (several blocks per program)
    # and the cross-program reduction of the query gradient.
    return 2


def depth_attend_backward(
    sources: Sequence[Tensor],
    qg: Tensor,
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    eps: float,
    form: str = "paper",
    *,
    grad_sources: Tensor | None = None,
    dqg_partials: Tensor | None = None,
    block_n: int | None = None,
    max_programs: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Launch the backward kernel. Returns (grad_sources [L, N, d] in the sources' dtype, dqg [d] in the
    accumulation dtype) -- dqg is the gradient wrt the folded query q = w * g. ``grad_sources`` and
    ``dqg_partials`` ([programs, d]) may be caller-supplied (the tests poison them)."""
    norm_mean = _form_flag(form)
    n, d = sources[0].shape
    L = len(sources)
    acc = _acc_dtype(sources[0].dtype)
    device = sources[0].device
    bn, bd, warps = _blocks(d, block_n)
    num_blocks = triton.cdiv(n, bn)
    nprog = max(1, min(num_blocks, max_programs or _max_programs(device)))
    if grad_sources is None:
        grad_sources = _alloc((L, n, d), sources[0].dtype, device)
    if dqg_partials is None:
        dqg_partials = _alloc((nprog, d), acc, device)
    if dqg_partials.shape != (nprog, d):
        raise ValueError(f"dqg_partials must be {(nprog, d)}, got {tuple(dqg_partials.shape)}")
    if n == 0:
        return grad_sources, torch.zeros(d, dtype=acc, device=device)
    base, table, align = _source_table(sources)
    _depth_attend_bwd_kernel[(nprog,)](
        base, table, qg.to(acc).contiguous(), out.contiguous(), lse, grad_out.contiguous(), grad_sources,
        dqg_partials, n, d, L, float(eps), num_blocks, nprog, n * d,
        NORM_MEAN=norm_mean, DELTA_ALIGN=align, BLOCK_N=bn, BLOCK_D=bd, ACC=_tl_acc(sources[0].dtype),
        num_warps=warps,
    )  # fmt: skip
    return grad_sources, dqg_partials.sum(0)


class _DepthAttendFn(torch.autograd.Function):
    """Autograd wrapper: inputs (query, gain or None, eps, form, *sources); one fused forward, one fused
    backward. The gain fold q = w * g is done here so its chain rule is explicit: dw = dq g, dg = dq w."""

    @staticmethod
    def forward(ctx, query: Tensor, gain: Tensor | None, eps: float, form: str, *sources: Tensor) -> Tensor:
        shape = sources[0].shape
        rows = _as_rows(sources)
        acc = _acc_dtype(rows[0].dtype)
        qg = query.to(acc) if gain is None else query.to(acc) * gain.to(acc)
        out, lse = depth_attend_forward(rows, qg, eps, form)
        ctx.save_for_backward(query, gain, qg, out, lse, *rows)
        ctx.eps, ctx.form, ctx.shape, ctx.has_gain = eps, form, shape, gain is not None
        return out.view(shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        query, gain, qg, out, lse, *rows = ctx.saved_tensors
        d = rows[0].shape[-1]
        g = grad_out.reshape(-1, d).to(rows[0].dtype)
        grad_src, dqg = depth_attend_backward(rows, qg, out, lse, g, ctx.eps, ctx.form)
        if ctx.has_gain:
            # s = (w * g) . k: the gain enters the score only through the folded query
            grad_query = (dqg * gain.to(dqg.dtype)).to(query.dtype)
            grad_gain = (dqg * query.to(dqg.dtype)).to(gain.dtype)
        else:
            grad_query, grad_gain = dqg.to(query.dtype), None
        grads_src = [grad_src[i].view(ctx.shape) for i in range(len(rows))]
        return (grad_query, grad_gain, None, None, *grads_src)


def depth_attend_fused(
    sources: Sequence[Tensor] | Tensor,
    query: Tensor,
    gain: Tensor | None = None,
    eps: float = 1e-6,
    form: str = "paper",
) -> Tensor:
    """h = sum_i softmax_i((w * g) . k_i) v_i (Eq. 2-4), fused; differentiable wrt sources, query, gain.

    sources: a list/tuple of L tensors [..., d] (same shape, dtype, device) or a stacked tensor
    [L, ..., d]; query and gain: [d]; form: "paper" (RMSNorm keys, the default) or "sqrt_d" (ablation).
    Returns [..., d] in the sources' dtype (mixed source dtypes are promoted, torch.stack-style, by
    casting only the differing sources).
    """
    _form_flag(form)
    srcs = tuple(sources.unbind(0)) if isinstance(sources, Tensor) else tuple(sources)
    if len(srcs) == 0:
        raise ValueError("depth_attend_fused needs at least one source (L >= 1)")
    dtypes = {s.dtype for s in srcs}
    if len(dtypes) > 1:
        # e.g. an fp32 embedding next to bf16 layer outputs under autocast: promote like torch.stack
        # would, casting (copying) only the sources that differ
        common = functools.reduce(torch.promote_types, dtypes)
        srcs = tuple(s if s.dtype == common else s.to(common) for s in srcs)
    d = srcs[0].shape[-1]
    if query.shape != (d,):
        raise ValueError(f"query must be [d] = [{d}], got {tuple(query.shape)} (per-token queries: use kernel=torch)")
    if gain is not None and gain.shape != (d,):
        raise ValueError(f"gain must be [d] = [{d}] or None, got {tuple(gain.shape)}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    return _DepthAttendFn.apply(query, gain, float(eps), form, *srcs)
