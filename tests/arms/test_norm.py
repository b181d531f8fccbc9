"""Gates for RMSNorm (dormouse.ops.norm): its hand-written backward on CPU, and the dispatch that picks it.

Oracles, both independent of the implementation: autograd of a float64 reference written here from the
definition ``x / sqrt(mean(x^2) + eps) * g`` (Zhang & Sennrich 2019, Eq. 4), and central finite differences
in float64 (``torch.autograd.gradcheck``). The implementation uses ``||x||^2 / d`` for the mean square and
its own backward ``dx = r (u - x_hat mean(u x_hat))``.

Bounds. In float64 the two forward computations differ by rounding only: ~d u relative with d = 48 and
u = 2^-53, i.e. ~1e-14 on values of size ~3; the backward adds a few such terms. ``_F64_BOUND = 1e-12``
leaves 100x. A dropped projection term, a sum for the mean or a gain gradient without x_hat moves them by
O(0.1). In float32 the same argument with u = 2^-24 gives ~50 * 6e-8 * 3 ~ 1e-5 on values of size ~3:
``_F32_BOUND = 2e-5``. Measured: 2.2e-15 (float64) and 7.0e-7 (float32) at most over y, dx and dgain.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from dormouse.ops.norm import RMSNorm, rms_norm

F64 = torch.float64
D = 48
_F64_BOUND = 1e-12
_F32_BOUND = 2e-5


def ref_rms_norm(x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    y = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def _inputs(dtype: torch.dtype, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(3, 5, D, generator=gen, dtype=F64) * 2 + 0.5).to(dtype)
    weight = (1 + 0.3 * torch.randn(D, generator=gen, dtype=F64)).to(dtype)  # away from 1: a lost gain shows
    grad_y = torch.randn(3, 5, D, generator=gen, dtype=F64).to(dtype)
    return x, weight, grad_y


def _value_and_grads(fn: Callable[[Tensor, Tensor | None], Tensor], x: Tensor, weight: Tensor | None,
                     grad_y: Tensor) -> list[Tensor]:
    x = x.detach().clone().requires_grad_()
    w = None if weight is None else weight.detach().clone().requires_grad_()
    y = fn(x, w)
    y.backward(grad_y)
    return [y.detach(), x.grad] + ([] if w is None else [w.grad])


@pytest.mark.parametrize("with_gain", [True, False], ids=["gain", "no-gain"])
def test_rms_norm_and_its_gradients_match_autograd_of_the_float64_reference(with_gain: bool) -> None:
    x, weight, grad_y = _inputs(F64)
    weight = weight if with_gain else None
    got = _value_and_grads(lambda x, w: rms_norm(x, w, 1e-6), x, weight, grad_y)
    want = _value_and_grads(lambda x, w: ref_rms_norm(x, w, 1e-6), x, weight, grad_y)
    for name, g, w in zip(["y", "dx", "dgain"], got, want):
        dev = (g - w).abs().max().item()
        assert dev <= _F64_BOUND, f"{name}: deviation {dev:.3e} from the float64 reference (bound {_F64_BOUND:.0e})"


def test_rms_norm_gradients_match_finite_differences() -> None:
    x, weight, _ = _inputs(F64, seed=1)
    x, weight = x[:1, :2].clone().requires_grad_(), weight.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w, 1e-6), (x, weight), eps=1e-6, atol=1e-8)


def test_default_eps_is_the_machine_epsilon_of_the_input_dtype() -> None:
    """GR normalises its gate input with ``eps=None``, as ``F.rms_norm`` does: finfo(dtype).eps. On a
    near-zero input the eps decides the output, so a different default moves it by O(1)."""
    x = torch.full((2, D), 1e-4)
    want = ref_rms_norm(x.double(), None, torch.finfo(torch.float32).eps)
    dev = (rms_norm(x).double() - want).abs().max().item()
    assert dev <= _F32_BOUND, f"eps=None: deviation {dev:.3e} from the reference at finfo(float32).eps"


def test_rms_norm_in_float32_stays_within_float32_rounding_of_the_reference() -> None:
    x, weight, grad_y = _inputs(torch.float32)
    got = _value_and_grads(lambda x, w: rms_norm(x, w, 1e-6), x, weight, grad_y)
    want = _value_and_grads(lambda x, w: ref_rms_norm(x, w, 1e-6), x.double(), weight.double(), grad_y.double())
    for name, g, w in zip(["y", "dx", "dgain"], got, want):
        assert g.dtype == torch.float32, f"{name} left float32: {g.dtype}"
        dev = (g.double() - w).abs().max().item()
        assert dev <= _F32_BOUND, f"{name}: deviation {dev:.3e} in float32 (bound {_F32_BOUND:.0e})"


def test_bf16_input_is_normalised_in_float32_and_rounded_once() -> None:
    """A bf16 input (CPU autocast standing in for CUDA's) keeps its dtype; the maths is float32, so the
    output is the float32 result rounded once to bf16's 8 significant bits: within u = 2^-8 relative, plus
    the float32 maths' ~5e-7 absolute over the smallest |y| counted (1e-3): bound 2^-8 + 1e-3. Measured
    3.5e-3; the same maths done in bf16 (several roundings) gave 1.05e-2."""
    x, weight, _ = _inputs(torch.float32)
    xb = x.bfloat16()
    got = rms_norm(xb, weight, 1e-6)
    assert got.dtype == torch.bfloat16
    want = ref_rms_norm(xb.double(), weight.double(), 1e-6)
    rel = ((got.double() - want).abs() / want.abs().clamp_min(1e-3)).max().item()
    bound = 2**-8 + 1e-3
    assert rel <= bound, f"bf16 RMSNorm: relative deviation {rel:.3e} > one bf16 rounding ({bound:.2e})"


def test_cpu_eager_rms_norm_takes_the_hand_written_backward() -> None:
    """The CPU path exists for speed (torch 2.13's CPU rms_norm is a composite; scripts/BENCHMARKS.md): a
    dispatch that silently went back to it would pass every numeric gate."""
    norm = RMSNorm(D)
    y = norm(torch.randn(2, D, requires_grad=True))
    assert type(y.grad_fn).__name__ == "_RMSNormFunctionBackward", type(y.grad_fn).__name__
