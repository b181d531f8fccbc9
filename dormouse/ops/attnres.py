"""Attention Residuals (Kimi Team, arXiv:2603.15031 v1), functional form; equation numbers are the paper's.

Layer l reads a softmax mixture of earlier sources instead of a residual sum: Full AttnRes (Eq. 1-4), Block
AttnRes (Eq. 5-6) and the two-phase Algorithm 1. docs/attnres.md states the equations and how the paper's gaps
are resolved (mean-form RMSNorm keys with a gain folded into the query, eps on the mean square, the ``sqrt_d``
ablation, the short tail block, N = 1 as Eq. 6). Two choices are this module's: with ``queries=`` a
:class:`BlockAttnResState` scores each source against every read's query in one ``[..., d] x [d, R]`` product
(O(L) passes per depth, not O(L^2)); and every read runs outside autocast in ``promote(dtype, float32)``,
since a bf16 score matmul errs by ~1 % at ``|s| ~ 20``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

# The score forms and the online-softmax merge are defined once, in the kernels package, which depends on
# nothing in dormouse (plain torch, no triton needed for these two); the mechanism re-exports them.
from dormouse_kernels.forms import FORMS
from dormouse_kernels.merge_torch import merge_partials_torch as online_softmax_merge

KERNELS: tuple[str, ...] = ("torch", "triton", "auto")

__all__ = [
    "FORMS",
    "KERNELS",
    "BlockAttnResState",
    "block_sources",
    "choose_kernel",
    "depth_attend",
    "depth_weights",
    "online_softmax_merge",
    "phase1_stats",
    "phase2_input",
    "resolve_kernel",
    "two_phase_block",
]


# ----------------------------------------------------------------------------------------------------
# argument checks: every refusal is a ValueError that names the argument
# ----------------------------------------------------------------------------------------------------


def _check_form(form: str) -> None:
    if form not in FORMS:
        raise ValueError(f"form={form!r} is unknown; expected one of {FORMS} ('paper' is Eq. 2)")


def _check_eps(eps: float) -> None:
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps={eps!r} must be a finite number >= 0 (the RMSNorm epsilon)")


def _check_block_size(block_size: int) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be an int >= 1 (1 = Full AttnRes)")


def _source_list(sources: Sequence[Tensor] | Tensor, name: str = "sources") -> list[Tensor] | Tensor:
    """Validate ``sources`` (a sequence of equal-shape ``[..., d]`` tensors or a stacked ``[L, ..., d]``)."""
    if isinstance(sources, Tensor):
        if sources.dim() < 2 or sources.shape[0] == 0 or sources.shape[-1] == 0:
            raise ValueError(
                f"{name}: a stacked tensor must be [L, ..., d] with L >= 1 and d >= 1, "
                f"got shape {tuple(sources.shape)}"
            )
        if not sources.is_floating_point():
            raise ValueError(f"{name} must be floating point, got {sources.dtype}")
        return sources
    srcs = list(sources)
    if not srcs:
        raise ValueError(f"{name} is empty: a read needs at least one source (b_0, the embedding)")
    first = srcs[0]
    for i, s in enumerate(srcs):
        if not isinstance(s, Tensor):
            raise ValueError(f"{name}[{i}] is a {type(s).__name__}, not a Tensor")
        if s.dim() == 0 or s.shape[-1] == 0:
            raise ValueError(f"{name}[{i}] has shape {tuple(s.shape)}; every source must be [..., d], d >= 1")
        if s.shape != first.shape:
            raise ValueError(
                f"{name}[{i}] has shape {tuple(s.shape)} but {name}[0] has {tuple(first.shape)}: "
                "every source must have the same shape [..., d]"
            )
        if s.dtype != first.dtype or s.device != first.device:
            raise ValueError(
                f"{name}[{i}] is {s.dtype} on {s.device} but {name}[0] is {first.dtype} on {first.device}"
            )
        if not s.is_floating_point():
            raise ValueError(f"{name}[{i}] must be floating point, got {s.dtype}")
    return srcs


def _source_shape(srcs: list[Tensor] | Tensor) -> torch.Size:
    return srcs.shape[1:] if isinstance(srcs, Tensor) else srcs[0].shape


def _check_vector(t: Tensor | None, d: int, name: str, allow_none: bool) -> None:
    if t is None:
        if not allow_none:
            raise ValueError(f"{name} is required")
        return
    if not isinstance(t, Tensor) or tuple(t.shape) != (d,):
        shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"{name} must have shape ({d},) to match the sources' last dim d={d}, got {shape}")


def _check_query_rows(queries: Tensor, gains: Tensor | None, d: int, rows: str, meaning: str) -> None:
    """``queries`` [rows, d] with rows >= 1, and ``gains`` None or of the queries' shape."""
    if not isinstance(queries, Tensor) or queries.dim() != 2 or queries.shape[1] != d or queries.shape[0] < 1:
        shape = tuple(queries.shape) if isinstance(queries, Tensor) else type(queries).__name__
        raise ValueError(f"queries must have shape ({rows}, {d}) with {rows} >= 1 ({meaning}), got {shape}")
    if gains is not None and (not isinstance(gains, Tensor) or gains.shape != queries.shape):
        shape = tuple(gains.shape) if isinstance(gains, Tensor) else type(gains).__name__
        raise ValueError(f"gains must have the queries' shape {tuple(queries.shape)}, got {shape}")


def _check_query(query: Tensor, source_shape: torch.Size) -> None:
    d = source_shape[-1]
    if not isinstance(query, Tensor) or (
        tuple(query.shape) != (d,) and tuple(query.shape) != tuple(source_shape)
    ):
        shape = tuple(query.shape) if isinstance(query, Tensor) else type(query).__name__
        raise ValueError(
            f"query must have shape ({d},) (the pseudo-query w_l) or the sources' shape "
            f"{tuple(source_shape)} (one query per position), got {shape}"
        )


# ----------------------------------------------------------------------------------------------------
# the score (Eq. 2-3), shared by every path
# ----------------------------------------------------------------------------------------------------


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # softmax (and the norm feeding it) at float32 at least: bf16 has 8 mantissa bits, so a score of
    # size 10 would carry an error of ~0.04 and every weight a ~4 % relative error.
    return torch.promote_types(dtype, torch.float32)


def _outside_autocast(device: torch.device) -> AbstractContextManager:
    """The read states its own precision (``_compute_dtype``); an enclosing autocast must not lower it."""
    return torch.autocast(device_type=device.type, enabled=False)


def _effective_query(query: Tensor, gain: Tensor | None, form: str, dtype: torch.dtype) -> Tensor:
    """The query with gain and form folded in: ``w * g`` (paper) or ``w * g / d`` (sqrt_d)."""
    q = query.to(dtype)
    if gain is not None:
        q = q * gain.to(dtype)
    if form == "sqrt_d":
        q = q / q.shape[-1]
    return q


def _inv_rms(x: Tensor, eps: float) -> Tensor:
    """``1 / sqrt(mean(x^2) + eps)`` over the last dim: the mean-form RMSNorm scale (ref. [66])."""
    return torch.rsqrt(x.pow(2).mean(dim=-1) + eps)


def _scores(x: Tensor, q: Tensor, eps: float) -> Tensor:
    """Eq. 2-3: sources ``x`` [N, ..., d], queries ``q`` [Q, d] -> scores ``q . x / rms(x)`` [Q, N, ...]."""
    dots = (x @ q.transpose(0, 1)).movedim(-1, 0)
    return dots * _inv_rms(x, eps)


# ----------------------------------------------------------------------------------------------------
# kernel routing
# ----------------------------------------------------------------------------------------------------

_TRITON_FIX = (
    "run on a CUDA device, or set TRITON_INTERPRET=1 in the environment before dormouse_kernels is "
    "imported (Triton's CPU interpreter; slow, for tests), or pass kernel='torch' (or 'auto')"
)


def _triton_unavailable(device: torch.device) -> str | None:
    """Why the fused kernel cannot run on ``device`` (None when it can). Imports lazily."""
    try:
        import dormouse_kernels  # noqa: PLC0415 - lazy on purpose: triton is optional at runtime
    except Exception as e:  # an ImportError, or triton failing at import time
        return f"importing dormouse_kernels failed ({type(e).__name__}: {e})"
    for attr in ("depth_attend_fused", "triton_unavailable_reason"):
        if not callable(getattr(dormouse_kernels, attr, None)):
            return f"dormouse_kernels has no {attr}() (is the kernels package installed and current?)"
    return dormouse_kernels.triton_unavailable_reason(device)


def choose_kernel(requested: str, device: torch.device | str, *, per_token_query: bool = False) -> tuple[str, str]:
    """The read path for ``kernel=requested`` on ``device`` (``"triton"`` or ``"torch"``) and why; the one owner of
    this choice. ``auto`` is triton on CUDA when available; per-token queries need torch (ValueError for triton)."""
    if requested not in KERNELS:
        raise ValueError(f"kernel={requested!r} is unknown; expected one of {KERNELS}")
    if per_token_query:
        if requested == "triton":
            raise ValueError(
                "model.kernel=triton with model.attnres.query=input: the fused kernel takes one static [d] "
                "pseudo-query per read, not a per-token one; use model.kernel=torch (or auto) or query=static")
        return "torch", "model.attnres.query=input gives per-token queries; the fused kernel reads with one [d] query"
    if requested == "torch":
        return "torch", "kernel=torch was asked for"
    device = torch.device(device)
    reason = _triton_unavailable(device) if device.type == "cuda" or requested == "triton" else None
    if requested == "auto":
        if device.type != "cuda":
            return "torch", f"device {device} is not CUDA"
        if reason is not None:
            return "torch", reason
        return "triton", "CUDA device and the fused Triton kernel is available"
    if reason is not None:
        raise RuntimeError(
            f"kernel='triton' was asked for on device {device}, but the fused kernel cannot run there: "
            f"{reason}. To fix: {_TRITON_FIX}."
        )
    return "triton", "kernel=triton was asked for and the fused kernel runs here"


def resolve_kernel(requested: str, device: torch.device | str) -> str:
    """The path of :func:`choose_kernel` (static queries): ``"triton"`` or ``"torch"``."""
    return choose_kernel(requested, device)[0]


# ----------------------------------------------------------------------------------------------------
# Full AttnRes read (Eq. 1-4)
# ----------------------------------------------------------------------------------------------------


def depth_attend(
    sources: Sequence[Tensor] | Tensor,
    query: Tensor,
    *,
    gain: Tensor | None = None,
    eps: float = 1e-6,
    form: str = "paper",
    kernel: str = "torch",
) -> Tensor:
    """Eq. 2-4: ``h = sum_i alpha_i v_i``, ``alpha = softmax_i(w . RMSNorm(v_i))``, over L sources ``[..., d]``.

    ``query`` is ``[d]`` (or ``[..., d]`` per position, torch path only), ``gain`` ``[d]`` or None; ``form`` is
    ``"paper"`` or ``"sqrt_d"``; ``kernel`` ``"torch"``, ``"triton"`` or ``"auto"``. Returns the sources' dtype.
    """
    _check_form(form)
    _check_eps(eps)
    srcs = _source_list(sources)
    shape = _source_shape(srcs)
    d = shape[-1]
    _check_query(query, shape)
    _check_vector(gain, d, "gain", allow_none=True)
    device = srcs.device if isinstance(srcs, Tensor) else srcs[0].device
    if resolve_kernel(kernel, device) == "triton" and query.dim() == 1:
        import dormouse_kernels  # noqa: PLC0415 - resolve_kernel has checked that it imports

        return dormouse_kernels.depth_attend_fused(srcs, query, gain, eps, form)
    if kernel == "triton":
        raise ValueError("query: the fused kernel takes a [d] pseudo-query; per-position queries need torch")

    return _attend(list(srcs.unbind(0)) if isinstance(srcs, Tensor) else srcs, None, query, gain, eps, form)


def _attend(
    sources: list[Tensor], inv_rms: list[Tensor] | None, query: Tensor, gain: Tensor | None, eps: float, form: str
) -> Tensor:
    """The torch read over validated sources; ``inv_rms`` the cached :func:`_inv_rms` per source, or None."""
    with _outside_autocast(sources[0].device):
        out_dtype = sources[0].dtype
        cdtype = _compute_dtype(out_dtype)
        xs = [x.to(cdtype) for x in sources]
        if inv_rms is None:
            inv_rms = [_inv_rms(x, eps) for x in xs]
        scores = _source_scores(xs, inv_rms, _effective_query(query, gain, form, cdtype))
        return _SoftmaxMix.apply(scores, *xs).to(out_dtype)


def _source_scores(xs: list[Tensor], inv_rms: list[Tensor], q: Tensor) -> Tensor:
    """Eq. 2-3 per source: ``s_i = r_i (q . x_i)`` -> [L, ...]; a per-position query dots token by token."""
    return torch.stack([(x @ q if q.dim() == 1 else torch.linalg.vecdot(x, q)) * r for x, r in zip(xs, inv_rms)])


def depth_weights(
    sources: Sequence[Tensor], query: Tensor, *, gain: Tensor | None = None, eps: float = 1e-6, form: str = "paper"
) -> Tensor:
    """Eq. 2-3 and the depth softmax: the weights ``alpha_i`` [L, ...] :func:`depth_attend` mixes with."""
    _check_form(form)
    _check_eps(eps)
    srcs = _source_list(sources)
    _check_query(query, _source_shape(srcs))
    _check_vector(gain, _source_shape(srcs)[-1], "gain", allow_none=True)
    with _outside_autocast(srcs[0].device):
        cdtype = _compute_dtype(srcs[0].dtype)
        xs = [x.to(cdtype) for x in srcs]
        scores = _source_scores(xs, [_inv_rms(x, eps) for x in xs], _effective_query(query, gain, form, cdtype))
        return torch.softmax(scores, dim=0)


class _SoftmaxMix(torch.autograd.Function):
    """Eq. 2 and 4 from scores [L, ...]: ``out = sum_i softmax(s)_i x_i`` over raw values, with a one-pass backward::

        ds_i = alpha_i (g . x_i - sum_j alpha_j g . x_j)      softmax Jacobian, g = dL/dout
        dx_i = alpha_i g                                      value path (the key path is autograd's)
    """

    @staticmethod
    def forward(ctx: Any, scores: Tensor, *xs: Tensor) -> Tensor:
        alpha = torch.softmax(scores, dim=0)  # Eq. 2: ONE softmax jointly over all L sources
        out = xs[0] * alpha[0].unsqueeze(-1)  # Eq. 4: the weights act on the RAW values
        for i in range(1, len(xs)):
            out.addcmul_(xs[i], alpha[i].unsqueeze(-1))
        ctx.save_for_backward(alpha, *xs)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        with _outside_autocast(g.device):  # a backward inside autocast keeps the read's precision
            return _SoftmaxMix._backward(ctx, g)

    @staticmethod
    def _backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        alpha, *xs = ctx.saved_tensors
        g = g.to(alpha.dtype)
        g_dots = torch.stack([torch.linalg.vecdot(x, g) for x in xs])  # g . x_i, [L, ...]
        ds = alpha * (g_dots - (alpha * g_dots).sum(dim=0))  # g . out = sum_j alpha_j g . x_j
        grad_s = ds if ctx.needs_input_grad[0] else None
        grad_x = [g * alpha[i].unsqueeze(-1) if ctx.needs_input_grad[1 + i] else None for i in range(len(xs))]
        return (grad_s, *grad_x)


class _KeyScores(torch.autograd.Function):
    """Eq. 2-3 for one source ``x`` [..., d] against R queries ``Q`` [R, d]: ``s = r (x @ Q^T)``, ``r = rsqrt(mean(x^2)
    + eps)``. Backward written out (autograd's runs in bf16 under autocast)::

        dQ = sum_tokens (gs r) x^T;  dr = sum_R gs (x @ Q^T);  dx = (gs r) @ Q - dr r^3 x / d"""

    @staticmethod
    def forward(ctx: Any, x: Tensor, table: Tensor, eps: float) -> Tensor:
        r = _inv_rms(x, eps)
        dots = x @ table.T
        ctx.save_for_backward(x, table, r, dots)
        return dots * r.unsqueeze(-1)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, gs: Tensor) -> tuple[Tensor | None, ...]:
        x, table, r, dots = ctx.saved_tensors
        with _outside_autocast(gs.device):
            gs = gs.to(table.dtype)
            d, rows = x.shape[-1], table.shape[0]
            g_dots = gs * r.unsqueeze(-1)  # d s / d (q . x) = r
            grad_x = grad_table = None
            if ctx.needs_input_grad[0]:
                g_r = (gs * dots).sum(dim=-1)  # d s / d r = q . x
                grad_x = torch.addcmul(g_dots @ table, x, (-g_r * r.pow(3) / d).unsqueeze(-1))
            if ctx.needs_input_grad[1]:
                grad_table = g_dots.reshape(-1, rows).T @ x.reshape(-1, d)
        return grad_x, grad_table, None


# ----------------------------------------------------------------------------------------------------
# Block AttnRes source sets (Eq. 5-6)
# ----------------------------------------------------------------------------------------------------


def _sum(terms: Sequence[Tensor]) -> Tensor:
    # a left fold, the order BlockAttnResState accumulates in, so both give bitwise-equal block sums
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def block_sources(embedding: Tensor, outputs: Sequence[Tensor], block_size: int) -> list[Tensor]:
    """Eq. 6: the sources of layer ``len(outputs) + 1``: ``[b_0, ..., b_{n-1}]`` plus the partial ``b_n^{i-1}`` if
    non-empty. ``b_0`` (the embedding) is never summed into a block; ``block_size = 1`` is Full AttnRes."""
    _check_block_size(block_size)
    if not isinstance(embedding, Tensor) or embedding.dim() == 0:
        raise ValueError("embedding must be a [..., d] Tensor (b_0)")
    outs = list(outputs)
    for j, f in enumerate(outs):
        if not isinstance(f, Tensor) or f.shape != embedding.shape:
            shape = tuple(f.shape) if isinstance(f, Tensor) else type(f).__name__
            raise ValueError(
                f"outputs[{j}] has shape {shape} but the embedding has {tuple(embedding.shape)}: "
                "every layer output must have the embedding's shape"
            )
    n_done = len(outs) // block_size  # completed blocks b_1 .. b_{n-1}
    sources = [embedding]
    for k in range(n_done):
        sources.append(_sum(outs[k * block_size : (k + 1) * block_size]))
    partial_terms = outs[n_done * block_size :]  # this block's layers before the reading one
    if partial_terms:  # b_n^0 = 0 is not a source (Eq. 6, i = 1)
        sources.append(_sum(partial_terms))
    return sources


class BlockAttnResState:
    """Streaming Block AttnRes (Eq. 5-6) in O(N) memory: per layer ``h = state.read(w_l)`` then
    ``state.push(f_l(h))``; a push is visible to every later read, never to its own layer's."""

    def __init__(
        self,
        embedding: Tensor,
        block_size: int,
        *,
        queries: Tensor | None = None,
        gains: Tensor | None = None,
        eps: float = 1e-6,
        form: str = "paper",
    ) -> None:
        _check_block_size(block_size)
        if not isinstance(embedding, Tensor) or embedding.dim() == 0:
            raise ValueError("embedding must be a [..., d] Tensor (b_0)")
        self.embedding: Tensor = embedding
        self.block_size: int = block_size
        self.layers_pushed: int = 0
        self._completed: list[Tensor] = []  # b_1 .. b_{n-1}
        self._partial: Tensor | None = None  # b_n^{i-1}; None while the block is empty (b_n^0 = 0)
        # Each source's inverse RMS (the key's norm, Eq. 3) is a property of the source: computed at its
        # first read and kept, not recomputed by every later read (O(L) norms over a depth, not O(L^2)).
        # The partial changes at every push, so its entry is dropped then. Valid for one eps at a time.
        self._inv_rms: dict[int, Tensor] = {}  # source index in sources() -> inverse RMS [...]
        self._inv_rms_eps: float | None = None
        # The query table (read_row): when every read's static query is known up front (a model's
        # pseudo-queries), a source's scores against ALL of them are one [..., d] x [d, R] product, made
        # once per source: O(L) passes over the sources for the scores of a whole depth, not O(L^2).
        self._table: Tensor | None = None  # [R, d] effective queries (gain and form folded in)
        self._table_eps = eps
        self._table_scores: dict[int, Tensor] = {}  # source index -> scores against every row [..., R]
        if queries is not None:
            self._table = self._query_table(queries, gains, eps, form)
        elif gains is not None:
            raise ValueError("gains= needs queries=: the gains belong to the rows of the query table")

    def sources(self) -> list[Tensor]:
        """What the next read sees (Eq. 6): ``[b_0, b_1, ..., b_{n-1}]`` + ``[b_n^{i-1}]`` if non-empty."""
        srcs = [self.embedding, *self._completed]
        if self._partial is not None:
            srcs.append(self._partial)
        return srcs

    def read(
        self,
        query: Tensor,
        *,
        gain: Tensor | None = None,
        eps: float = 1e-6,
        form: str = "paper",
        kernel: str = "torch",
    ) -> Tensor:
        """Eq. 2-4 over :meth:`sources`: the input of the next layer (or a readout)."""
        srcs = self.sources()
        if kernel != "torch":
            return depth_attend(srcs, query, gain=gain, eps=eps, form=form, kernel=kernel)
        _check_form(form)
        _check_eps(eps)
        _check_query(query, self.embedding.shape)
        _check_vector(gain, self.embedding.shape[-1], "gain", allow_none=True)
        if eps != self._inv_rms_eps:
            self._inv_rms, self._inv_rms_eps = {}, eps
        cdtype = _compute_dtype(self.embedding.dtype)
        with _outside_autocast(self.embedding.device):
            for i, x in enumerate(srcs):
                if i not in self._inv_rms:
                    self._inv_rms[i] = _inv_rms(x.to(cdtype), eps)
        return _attend(srcs, [self._inv_rms[i] for i in range(len(srcs))], query, gain, eps, form)

    def _query_table(self, queries: Tensor, gains: Tensor | None, eps: float, form: str) -> Tensor:
        _check_form(form)
        _check_eps(eps)
        _check_query_rows(queries, gains, self.embedding.shape[-1], "R", "one row per read")
        with _outside_autocast(self.embedding.device):
            return _effective_query(queries, gains, form, _compute_dtype(self.embedding.dtype))

    def read_row(self, row: int) -> Tensor:
        """:meth:`read` with row ``row`` of the query table; sources' scores are computed once."""
        if self._table is None:
            raise ValueError("read_row needs the query table: construct the state with queries=")
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < self._table.shape[0]:
            raise ValueError(f"row={row!r} is outside the query table's rows 0..{self._table.shape[0] - 1}")
        srcs = self.sources()
        cdtype = self._table.dtype
        with _outside_autocast(self.embedding.device):
            xs = [x.to(cdtype) for x in srcs]
            for i, x in enumerate(xs):
                if i not in self._table_scores:
                    self._table_scores[i] = _KeyScores.apply(x, self._table, self._table_eps)
            scores = torch.stack([self._table_scores[i][..., row] for i in range(len(xs))])
            return _SoftmaxMix.apply(scores, *xs).to(self.embedding.dtype)

    def push(self, output: Tensor) -> None:
        """Fold layer ``layers_pushed + 1``'s output in: ``b_n^i = b_n^{i-1} + f_l(h_l)`` (Eq. 5)."""
        if not isinstance(output, Tensor) or output.shape != self.embedding.shape:
            shape = tuple(output.shape) if isinstance(output, Tensor) else type(output).__name__
            raise ValueError(f"output has shape {shape} but the embedding has {tuple(self.embedding.shape)}")
        if output.dtype != self.embedding.dtype or output.device != self.embedding.device:
            raise ValueError(
                f"output is {output.dtype} on {output.device} but the embedding is {self.embedding.dtype} on "
                f"{self.embedding.device}: every source must have one dtype and device"
            )
        self._partial = output if self._partial is None else self._partial + output
        self._inv_rms.pop(1 + len(self._completed), None)  # the partial's entry: it just changed
        self._table_scores.pop(1 + len(self._completed), None)  # and its scores
        self.layers_pushed += 1
        if self.layers_pushed % self.block_size == 0:  # the block is complete: it becomes b_n, once
            self._completed.append(self._partial)
            self._partial = None


# ----------------------------------------------------------------------------------------------------
# the two-phase schedule (Algorithm 1)
# ----------------------------------------------------------------------------------------------------


def phase1_stats(
    sources: Sequence[Tensor] | Tensor,
    queries: Tensor,
    *,
    gains: Tensor | None = None,
    eps: float = 1e-6,
    form: str = "paper",
) -> tuple[Tensor, Tensor, Tensor]:
    """Alg. 1 Phase 1: S queries ``[S, d]`` against N sources -> ``(m, l, o)``, ``m``/``l`` [S, ...], ``o`` [S, ..., d]
    unnormalised, in ``promote(dtype, float32)``."""
    _check_form(form)
    _check_eps(eps)
    srcs = _source_list(sources)
    _check_query_rows(queries, gains, _source_shape(srcs)[-1], "S", "one per layer of the block")
    x = srcs if isinstance(srcs, Tensor) else torch.stack(srcs)
    with _outside_autocast(x.device):
        x = x.to(_compute_dtype(x.dtype))
        q = _effective_query(queries, gains, form, x.dtype)
        s = _scores(x, q, eps)  # [S, N, ...]
        m = s.amax(dim=1)
        p = torch.exp(s - m.unsqueeze(1))
        o = (p.unsqueeze(-1) * x.unsqueeze(0)).sum(dim=1)
        return m, p.sum(dim=1), o


MergeFn = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]


def phase2_input(
    phase1: tuple[Tensor, Tensor, Tensor],
    partial: Tensor | None,
    query: Tensor,
    *,
    gain: Tensor | None = None,
    eps: float = 1e-6,
    form: str = "paper",
    merge: MergeFn = online_softmax_merge,
) -> Tensor:
    """Alg. 1 Phase 2: Phase-1 state merged with the partial ``b_n^{i-1}`` (None: the input is ``o / l``)."""
    m1, l1, o1 = phase1
    with _outside_autocast(o1.device):
        if partial is not None:
            p = partial.to(m1.dtype)
            q = _effective_query(query.unsqueeze(0), None if gain is None else gain.unsqueeze(0), form, m1.dtype)
            m2 = _scores(p.unsqueeze(0), q, eps)[0, 0]
            _, l1, o1 = merge(m1, l1, o1, m2, torch.ones_like(m2), p)
        return o1 / l1.unsqueeze(-1)


def two_phase_block(
    queries: Tensor,
    completed: Sequence[Tensor],
    layer_fn: Callable[[int, Tensor], Tensor],
    *,
    gains: Tensor | None = None,
    eps: float = 1e-6,
    form: str = "paper",
) -> tuple[list[Tensor], Tensor]:
    """Algorithm 1 for one block: (the S layer inputs, the block sum ``b_n``); equals the direct Eq. 6 mixtures.
    ``layer_fn(i, h)`` runs the block's 0-based layer i; ``queries`` [S, d]; ``completed`` at least ``[b_0]``."""
    srcs = _source_list(completed, name="completed")
    shape = _source_shape(srcs)
    m1, l1, o1 = phase1_stats(srcs, queries, gains=gains, eps=eps, form=form)
    dtype = srcs.dtype if isinstance(srcs, Tensor) else srcs[0].dtype

    def layer_input(i: int, partial: Tensor | None) -> Tensor:
        gain = None if gains is None else gains[i]
        return phase2_input((m1[i], l1[i], o1[i]), partial, queries[i], gain=gain, eps=eps, form=form).to(dtype)

    inputs: list[Tensor] = []
    partial: Tensor | None = None  # b_n^{i-1}: this block's outputs before layer i
    for i in range(queries.shape[0]):
        h = layer_input(i, partial)
        y = layer_fn(i, h)
        if not isinstance(y, Tensor) or y.shape != shape:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(f"layer_fn({i}, h) returned shape {got}, expected the sources' {tuple(shape)}")
        inputs.append(h)
        partial = y if partial is None else partial + y  # Eq. 5: the layer OUTPUT, not its input
    assert partial is not None  # S >= 1 was checked by phase1_stats
    return inputs, partial
