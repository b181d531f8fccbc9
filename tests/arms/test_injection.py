"""Gates for the stable input injection arm (dormouse/arms/injection.py; Parcae, arXiv:2604.12946).

The equations (docs/arms.md, "Stable input injection"): before iteration k's attention slot
``x <- A * x + Delta B e`` with ``A = exp(-exp(delta + a))`` and ``Delta = exp(delta)`` per channel, e the
embedding RMS-normalised (eps 1e-5, no gain) when ``normalize``; then ``x <- x + f(x)`` per sublayer; readout k
reads x. Oracles independent of the module: a float64 reference written here with loops over channels, hand
arithmetic, the closed form of the linear recurrence, finite differences.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from dormouse.arms.injection import Injection
from dormouse.arms.specs import InjectionConfig
from dormouse.config.schema import compose_config, validate
from dormouse.model.looped import LoopedByteLM

F64 = torch.float64
Sublayer = Callable[[Tensor], Tensor]


def _dev(got: Tensor, want: Tensor) -> float:
    return (got.double() - want.double()).abs().max().item()


def arm64(d: int, max_iter: int, seed: int | None = 0, **options: object) -> Injection:
    """An arm in float64; ``seed`` moves delta, a and B off their init (None keeps the init)."""
    arm = Injection(d, max_iter, InjectionConfig(**options)).double()  # type: ignore[arg-type]
    if seed is not None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            arm.log_step.add_(0.5 * torch.randn(d, generator=gen, dtype=F64))
            arm.log_decay.add_(0.5 * torch.randn(d, generator=gen, dtype=F64))
            arm.B.add_(0.3 * torch.randn(d, d, generator=gen, dtype=F64))
    return arm


def planted(d: int, n: int, seed: int = 1) -> list[Sublayer]:
    """``n`` nonlinear sublayers ``f_s(h) = tanh(W_s h)`` (attention, MLP, attention, ...)."""
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(d, d, generator=gen, dtype=F64) / math.sqrt(d) for _ in range(n)]
    return [lambda h, w=w: torch.tanh(h @ w.T) for w in weights]


def drive(arm: Injection, embedding: Tensor, sublayers: list[Sublayer], depth: int) -> list[Tensor]:
    """The loop driver's calls, made directly: begin, then per slot sublayer_input / absorb, readout per iteration."""
    state = arm.begin(embedding)
    readouts = []
    for k in range(depth):
        for j in range(2):
            slot = 2 * k + j
            state = arm.absorb(state, slot, sublayers[slot](arm.sublayer_input(state, slot)))
        readouts.append(arm.readout_input(state, k))
    return readouts


# ----------------------------------------------------------------------------------------------------
# the float64 reference, written from the equations
# ----------------------------------------------------------------------------------------------------


def ref_loop(delta: Tensor, a: Tensor, B: Tensor, embedding: Tensor, sublayers: list[Sublayer], depth: int,
             *, normalize: bool, state_init: str, eps: float = 1e-5) -> list[Tensor]:
    """x_0 = 0 or e; per iteration x <- A x + Delta B e, then x <- x + f(x) twice; readout k = x. Channel loops."""
    d = embedding.shape[-1]
    emb = embedding.to(F64)
    if normalize:
        rms = torch.sqrt(sum(emb[..., j] ** 2 for j in range(d)) / d + eps)
        e = torch.stack([emb[..., j] / rms for j in range(d)], dim=-1)
    else:
        e = emb
    decay = [math.exp(-math.exp(float(delta[i]) + float(a[i]))) for i in range(d)]
    step = [math.exp(float(delta[i])) for i in range(d)]
    inject = torch.stack([step[i] * sum(float(B[i, j]) * e[..., j] for j in range(d)) for i in range(d)], dim=-1)
    x = torch.zeros_like(e) if state_init == "zeros" else e
    readouts = []
    for k in range(depth):
        x = torch.stack([decay[i] * x[..., i] + inject[..., i] for i in range(d)], dim=-1)
        for slot in (2 * k, 2 * k + 1):
            x = x + sublayers[slot](x)
        readouts.append(x)
    return readouts


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("state_init", ["zeros", "embedding"])
def test_injection_matches_a_float64_reference_from_the_equations(normalize: bool, state_init: str):
    d, depth = 6, 4
    arm = arm64(d, depth, normalize=normalize, state_init=state_init)
    emb = torch.randn(2, 5, d, generator=torch.Generator().manual_seed(2), dtype=F64) * 0.7
    subs = planted(d, 2 * depth)
    with torch.no_grad():
        got = drive(arm, emb, subs, depth)
        want = ref_loop(arm.log_step, arm.log_decay, arm.B, emb, subs, depth, normalize=normalize,
                        state_init=state_init)
    for k, (g, w) in enumerate(zip(got, want, strict=True), start=1):
        dev = _dev(g, w)
        # float64, O(1) values through <= 4 iterations of tanh sublayers: a reordering of sums, ~1e-15
        assert dev <= 1e-12, f"readout {k}: deviation={dev:.3e} bound=1e-12"


def test_model_readouts_match_the_reference_with_planted_sublayers():
    """Through LoopedByteLM's own driver: the final norm's input after iteration k is the reference's x_k."""
    cfg = compose_config(["preset=tiny", "model.max_iter=3", "model.use_injection=true"])
    model = LoopedByteLM(cfg.model, seed=0).double()
    d = model.d_model
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        model.arm.log_step.add_(0.5 * torch.randn(d, generator=gen, dtype=F64))
        model.arm.log_decay.add_(0.5 * torch.randn(d, generator=gen, dtype=F64))
        model.arm.B.add_(0.3 * torch.randn(d, d, generator=gen, dtype=F64))
    subs = planted(d, 2)  # the block is shared: the same two sublayers at every iteration
    model.sublayers = subs
    idx = torch.randint(0, 256, (2, 8), generator=gen)
    seen: list[Tensor] = []
    hook = model.final_norm.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        with torch.no_grad():
            model(idx)
            want = ref_loop(model.arm.log_step, model.arm.log_decay, model.arm.B, model.embed(idx), subs * 3, 3,
                            normalize=True, state_init="zeros")
    finally:
        hook.remove()
    for k, (g, w) in enumerate(zip(seen, want, strict=True), start=1):
        dev = _dev(g, w)
        assert dev <= 1e-12, f"readout {k}: deviation={dev:.3e} bound=1e-12"


def test_gold_two_iterations_by_hand():
    """d = 2, e = (1, 2) unnormalised, x_0 = 0, A-bar = 0.5 (so Delta = ln 2), B = I; constant sublayer outputs
    f_attn = (0.1, 0), f_mlp = (0, 0.1).
    iteration 1: x = 0.5 * 0 + ln2 * (1, 2) = (0.6931471805599453, 1.3862943611198906); + 0.1 each channel
                 -> (0.7931471805599453, 1.4862943611198906)
    iteration 2: x = 0.5 * x + ln2 * (1, 2) = (0.39657359027997264 + 0.6931471805599453,
                 0.7431471805599453 + 1.3862943611198906) = (1.089720770839918, 2.129441541679836); + 0.1 each
                 -> (1.189720770839918, 2.229441541679836)"""
    arm = arm64(2, 2, seed=None, normalize=False)
    with torch.no_grad():  # set in float64: the float32 init rounds log(ln 2) by ~1e-8
        arm.log_step.fill_(math.log(math.log(2.0)))
    const = [lambda h: torch.tensor([0.1, 0.0], dtype=F64).expand_as(h),
             lambda h: torch.tensor([0.0, 0.1], dtype=F64).expand_as(h)] * 2
    with torch.no_grad():
        got = drive(arm, torch.tensor([[1.0, 2.0]], dtype=F64), const, 2)
    gold = [torch.tensor([[0.7931471805599453, 1.4862943611198906]], dtype=F64),
            torch.tensor([[1.189720770839918, 2.229441541679836]], dtype=F64)]
    for k, (g, w) in enumerate(zip(got, gold, strict=True), start=1):
        dev = _dev(g, w)
        assert dev <= 1e-14, f"iteration {k}: deviation={dev:.3e} bound=1e-14"


def test_init_is_the_sources_decay_step_and_identity():
    """Parcae's init: A_log = 0, Delta = softplus(dt_bias) = -ln(sqrt(1/5)) ~ 0.8047, so A-bar = sqrt(1/5) ~ 0.4472;
    B = I."""
    arm = Injection(8, 3)
    decay, step = arm.decay().detach().double(), torch.exp(arm.log_step.detach().double())
    assert _dev(decay, torch.full((8,), math.sqrt(0.2), dtype=F64)) <= 1e-6
    assert _dev(step, torch.full((8,), -math.log(math.sqrt(0.2)), dtype=F64)) <= 1e-6
    assert torch.equal(arm.B.detach(), torch.eye(8)) and torch.equal(arm.log_decay.detach(), torch.zeros(8))


# ----------------------------------------------------------------------------------------------------
# gradients, contraction, fixed point
# ----------------------------------------------------------------------------------------------------


class _Loop(nn.Module):
    def __init__(self, arm: Injection, subs: list[Sublayer], depth: int) -> None:
        super().__init__()
        self.arm, self.subs, self.depth = arm, subs, depth

    def forward(self, emb: Tensor) -> Tensor:
        return torch.stack(drive(self.arm, emb, self.subs, self.depth))


@pytest.mark.parametrize("normalize", [True, False])
def test_gradients_match_finite_differences(normalize: bool):
    d, depth = 4, 3
    loop = _Loop(arm64(d, depth, normalize=normalize, state_init="embedding"), planted(d, 2 * depth), depth)
    gen = torch.Generator().manual_seed(7)
    inputs = (loop.arm.log_step.detach().clone().requires_grad_(), loop.arm.log_decay.detach().clone().requires_grad_(),
              loop.arm.B.detach().clone().requires_grad_(),
              torch.randn(2, 3, d, generator=gen, dtype=F64).requires_grad_())

    def fn(delta: Tensor, a: Tensor, B: Tensor, emb: Tensor) -> Tensor:
        params = {"arm.log_step": delta, "arm.log_decay": a, "arm.B": B}
        return torch.func.functional_call(loop, params, (emb,))

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_decay_is_strictly_between_0_and_1_for_any_delta_and_a():
    """A-bar = exp(-exp(z)), z = delta + a: 0 < A-bar < 1 for every real z (exp(z) > 0); float64 resolves it for
    z in about (-36, 6.5), so the grid spans z in [-30, 6]."""
    d = 61
    arm = Injection(d, 1).double()
    grid = torch.linspace(-15.0, 3.0, d, dtype=F64)
    for shift in (0.0, 0.37, -0.81):
        with torch.no_grad():
            arm.log_step.copy_(grid + shift)
            arm.log_decay.copy_(grid.flip(0) if shift else grid)
        decay = arm.decay().detach()
        lo, hi = decay.min().item(), decay.max().item()
        assert 0.0 < lo and hi < 1.0, f"A-bar outside (0, 1): min={lo:.3e} max={hi:.17g} (deviation>0, bound=0)"


def test_with_zero_sublayer_outputs_the_state_converges_to_the_fixed_point():
    """f = 0: x_k = (1 - A^k) / (1 - A) B-bar e (the geometric sum from x_0 = 0) -> x* = (1 - A)^-1 B-bar e."""
    d, depth = 5, 200
    arm = arm64(d, depth, seed=4, normalize=True)
    with torch.no_grad():
        arm.log_step.clamp_(-1.0, 0.5)
        arm.log_decay.clamp_(-1.0, 0.0)  # exp(-exp(z)) for z in [-2, 0.5]: A-bar in [0.19, 0.87]
    emb = torch.randn(3, d, generator=torch.Generator().manual_seed(5), dtype=F64)
    zero = [torch.zeros_like] * (2 * depth)
    with torch.no_grad():
        xs = drive(arm, emb, zero, depth)
        e = emb / torch.sqrt(emb.pow(2).mean(-1, keepdim=True) + 1e-5)
        decay = torch.exp(-torch.exp(arm.log_step + arm.log_decay))
        inject = torch.exp(arm.log_step) * (e @ arm.B.T)
    for k in (1, 2, 7):
        dev = _dev(xs[k - 1], (1 - decay**k) / (1 - decay) * inject)
        assert dev <= 1e-12, f"x_{k} vs the geometric sum: deviation={dev:.3e} bound=1e-12"
    dev = _dev(xs[-1], inject / (1 - decay))  # 0.87^200 ~ 1e-12 of |x*| left
    assert dev <= 1e-9, f"x_{depth} vs the fixed point: deviation={dev:.3e} bound=1e-9"


# ----------------------------------------------------------------------------------------------------
# options, probes, dtype
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "field"), [
    ("model.injection.state_init=noise", "model.injection.state_init"),
    ("model.injection.decay_init=0.0", "model.injection.decay_init"),
    ("model.injection.decay_init=1.0", "model.injection.decay_init"),
    ("model.injection.decay_init=-0.5", "model.injection.decay_init"),
    ("model.injection.decay_init=nan", "model.injection.decay_init"),
])
def test_each_option_is_refused_out_of_range_naming_its_field(override: str, field: str):
    lines = validate(compose_config(["preset=tiny", "model.use_injection=true", override]))
    assert any(line.startswith(field + "=") for line in lines), lines
    assert not validate(compose_config(["preset=tiny", "model.use_injection=true"]))


def test_probe_reports_the_decay_and_the_injected_share_per_iteration():
    """At init with x_0 = 0 the first attention reads B-bar e alone: inject_ratio[0] = 1; decay = sqrt(1/5)."""
    from dormouse.arms.probes import learned_values

    cfg = compose_config(["preset=tiny", "model.max_iter=3", "model.use_injection=true"])
    model = LoopedByteLM(cfg.model, seed=0)
    got = learned_values(model, torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(0)), 2)
    assert abs(got.fields["decay_mean"] - math.sqrt(0.2)) <= 1e-6
    assert len(got.inject_ratio) == 3 and abs(got.inject_ratio[0] - 1.0) <= 1e-5
    assert all(0.0 < r < 1.0 for r in got.inject_ratio[1:]), got.inject_ratio
    assert got.summary() == ("decay", got.fields["decay_mean"])
    scalars = Injection.probe_scalars({f"probe/{k}": v for k, v in got.fields.items()})
    assert set(scalars) == {"probe/decay_mean", "probe/decay_min", "probe/decay_max", "probe/inject_ratio/iter1",
                            "probe/inject_ratio/iter2", "probe/inject_ratio/iter3"}


def test_under_autocast_the_state_stays_in_the_embeddings_dtype():
    cfg = compose_config(["preset=tiny", "model.use_injection=true"])
    model = LoopedByteLM(cfg.model, seed=0)
    seen: list[Tensor] = []
    hook = model.final_norm.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randint(0, 256, (2, 8)))
    finally:
        hook.remove()
    assert seen and all(x.dtype == torch.float32 for x in seen), [x.dtype for x in seen]
