"""The LAuReL arm (dormouse.arms.laurel; Menghani et al., ICML 2025, arXiv:2411.07501) against independent oracles.

* A float64 reference written here from the paper's Eq. 3 (LR), §2.1 (RW, and its softmax / sigmoid
  normalisations) and Eq. 5 (RW+LR), driven through the arm's begin / sublayer_input / absorb / readout_input
  with planted sublayers; agreement to 1e-12.
* Finite-difference gradients (gradcheck, float64) on every arm parameter and the embedding.
* At init (alpha = beta = 1, B = 0) every variant is the pre-norm residual: the logits equal pre-norm's.
* A hand-computed one-slot gold, A_s's §3.3 init, the probe against the parameters, and the option refusals.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from dormouse.arms.laurel import Laurel
from dormouse.arms.probes import learned_values
from dormouse.arms.specs import LaurelConfig
from dormouse.config.schema import compose_config, validate
from dormouse.model.looped import LoopedByteLM

F64 = torch.float64
D, R, MAX_ITER = 6, 2, 3
VARIANTS = [(v, n) for v in ("rw", "lr", "rw_lr") for n in ("none", "softmax", "sigmoid") if v != "lr" or n == "none"]


def arm_of(variant: str, rw_norm: str = "none", rank: int = R, d: int = D, a_init: str = "orthogonal") -> Laurel:
    return Laurel(d, MAX_ITER, LaurelConfig(variant=variant, rank=rank, rw_norm=rw_norm, a_init=a_init)).double()


def randomise(arm: Laurel, seed: int = 0) -> None:
    """Every arm parameter off its init: alpha, beta around 1 (or logits around 0), A and B dense."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in arm.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen, dtype=F64))


def sublayer(slot: int, h: torch.Tensor) -> torch.Tensor:
    """A planted sublayer: elementwise and slot-dependent, so each input reaches its output."""
    return torch.tanh((1.0 + 0.3 * slot) * h) - 0.2 * slot


def drive(arm: Laurel, x0: torch.Tensor, slots: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The loop driver's calls: the sublayer inputs and the state after each slot."""
    state, inputs, states = arm.begin(x0), [], []
    for s in range(slots):
        h = arm.sublayer_input(state, s)
        inputs.append(h)
        state = arm.absorb(state, s, sublayer(s, h))
        states.append(arm.readout_input(state, s // 2) if s % 2 else state)
    return inputs, states


def ref_weights(arm: Laurel, s: int, rw_norm: str) -> tuple[float, float]:
    """§2.1: raw (alpha, beta); softmax over the pair; sigmoid: alpha = 1/(1+e^-a), beta = 1 - alpha."""
    a = float(arm.alpha[s].detach())
    if rw_norm == "sigmoid":
        alpha = 1.0 / (1.0 + math.exp(-a))
        return alpha, 1.0 - alpha
    b = float(arm.beta[s].detach())
    if rw_norm == "softmax":
        return math.exp(a) / (math.exp(a) + math.exp(b)), math.exp(b) / (math.exp(a) + math.exp(b))
    return a, b


def ref_low_rank(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``B (A x)`` per token with explicit sums: (A x)_q = sum_i A_qi x_i, (B y)_o = sum_q B_oq y_q."""
    r, d = a.shape
    y = [sum(a[q, i] * x[..., i] for i in range(d)) for q in range(r)]
    return torch.stack([sum(b[o, q] * y[q] for q in range(r)) for o in range(d)], dim=-1)


def reference(arm: Laurel, variant: str, rw_norm: str, x0: torch.Tensor, slots: int) -> list[torch.Tensor]:
    """Eq. 3 / §2.1 / Eq. 5 slot by slot: x <- alpha f(x) + beta (x + B A x), alpha = beta = 1 and B A = 0
    where the variant has no such term."""
    x, states = x0.to(F64), []
    for s in range(slots):
        fx = sublayer(s, x)
        alpha, beta = ref_weights(arm, s, rw_norm) if variant != "lr" else (1.0, 1.0)
        carried = x
        if variant != "rw":
            carried = x + ref_low_rank(arm.lr_down_weight[s].detach(), arm.lr_up_weight[s].detach(), x)
        x = alpha * fx + beta * carried
        states.append(x)
    return states


@pytest.mark.parametrize(("variant", "rw_norm"), VARIANTS)
def test_laurel_states_match_a_float64_reference_of_eq5(variant: str, rw_norm: str):
    arm = arm_of(variant, rw_norm)
    randomise(arm)
    x0 = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(1), dtype=F64)
    _, got = drive(arm, x0, 2 * MAX_ITER)
    want = reference(arm, variant, rw_norm, x0, 2 * MAX_ITER)
    for s, (g, w) in enumerate(zip(got, want)):
        dev = (g - w).abs().max().item()
        # float64, a few dozen operations on O(1) values: ~1e-15; a wrong term is off by O(0.1)
        assert dev <= 1e-12, f"{variant}/{rw_norm} slot {s}: deviation={dev:.3e} bound=1e-12"


def test_laurel_gold_one_slot_by_hand():
    """x = (1, 2), f = (3, -1), alpha = 2, beta = 0.5, A = [[1, 1]], B = [[1], [0]] (r = 1, d = 2):
    A x = 3, B A x = (3, 0), x + B A x = (4, 2), beta (..) = (2, 1), alpha f = (6, -2): x' = (8, -1)."""
    arm = Laurel(2, 1, LaurelConfig(variant="rw_lr", rank=1)).double()
    with torch.no_grad():
        arm.alpha[0], arm.beta[0] = 2.0, 0.5
        arm.lr_down_weight[0] = torch.tensor([[1.0, 1.0]], dtype=F64)
        arm.lr_up_weight[0] = torch.tensor([[1.0], [0.0]], dtype=F64)
    got = arm.absorb(torch.tensor([1.0, 2.0], dtype=F64), 0, torch.tensor([3.0, -1.0], dtype=F64))
    # small integers and halves: exact in float64
    assert got.tolist() == [8.0, -1.0], f"gold (8, -1) != {got.tolist()}"


@pytest.mark.parametrize(("variant", "rw_norm"), [("rw_lr", "none"), ("rw_lr", "softmax"), ("rw", "sigmoid"),
                                                  ("lr", "none")])
def test_laurel_gradients_match_finite_differences(variant: str, rw_norm: str):
    arm = arm_of(variant, rw_norm)
    randomise(arm, seed=2)
    names = [n for n, _ in arm.named_parameters()]
    x0 = torch.randn(3, D, generator=torch.Generator().manual_seed(3), dtype=F64, requires_grad=True)
    arm.forward = lambda x: drive(arm, x, 2 * MAX_ITER)[1][-1]  # what functional_call calls

    def final_state(*tensors: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(arm, dict(zip(names, tensors[:-1])), (tensors[-1],))

    inputs = tuple(p.detach().clone().requires_grad_(True) for p in arm.parameters()) + (x0,)
    assert torch.autograd.gradcheck(final_state, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


def tiny(*extra: str) -> LoopedByteLM:
    cfg = compose_config(["preset=tiny", f"model.max_iter={MAX_ITER}", *extra])
    return LoopedByteLM(cfg.model, seed=0)


def shared_weights_moved(model: LoopedByteLM) -> None:
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in [*model.attn.parameters(), *model.mlp.parameters()]:
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


@pytest.mark.parametrize("variant", ["rw", "lr", "rw_lr"])
def test_laurel_at_init_gives_pre_norms_logits(variant: str):
    """alpha = beta = 1 and B = 0 (§2.1, §3.3): x <- 1 f(x) + 1 (x + 0) is exactly x + f(x)."""
    laurel = tiny("model.use_laurel=true", f"model.laurel.variant={variant}")
    prenorm = tiny("model.use_prenorm=true")
    for m in (laurel, prenorm):
        shared_weights_moved(m)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = laurel(idx), prenorm(idx)
    for k, (g, w) in enumerate(zip(got, want), start=1):
        dev = (g - w).abs().max().item()
        # multiplications by exact 1 and additions of exact 0: the same float32 rounding as x + f(x)
        assert dev == 0.0, f"{variant} readout {k} at init differs from pre-norm (deviation={dev:.3e}, bound=0)"


def test_laurel_a_starts_column_orthogonal_at_one_over_sqrt_rd():
    """§3.3 (footnote): A_ij = 1/sqrt(r D) where i mod r = j, else 0 (A in R^{D x r}; ours is its transpose)."""
    r, d = 3, 8
    a = Laurel(d, 2, LaurelConfig(variant="lr", rank=r)).lr_down_weight.detach().double()
    want = torch.tensor([[1 / math.sqrt(r * d) if i % r == j else 0.0 for i in range(d)] for j in range(r)], dtype=F64)
    for s in range(a.shape[0]):
        dev = (a[s] - want).abs().max().item()
        assert dev <= 1e-7, f"A_{s}: deviation={dev:.3e} bound=1e-7 (float32 storage of 1/sqrt(24))"
    xavier = Laurel(d, 2, LaurelConfig(variant="lr", rank=r, a_init="xavier")).lr_down_weight.detach()
    assert xavier.abs().max().item() <= math.sqrt(6 / (r + d)) and xavier.std().item() > 0.1


def test_laurel_probe_reads_alpha_beta_and_the_low_rank_norm():
    model = tiny("model.use_laurel=true", "model.laurel.rw_norm=softmax")
    randomise(model.arm)
    got = learned_values(model, torch.randint(0, 256, (2, 16)), 2)
    a, b = model.arm.alpha.detach().double(), model.arm.beta.detach().double()
    alpha = torch.exp(a) / (torch.exp(a) + torch.exp(b))
    product = torch.einsum("sor,srd->sod", model.arm.lr_up_weight.detach().double(),
                           model.arm.lr_down_weight.detach().double())
    norms = product.pow(2).sum(dim=(1, 2)).sqrt()
    for name, want in (("laurel_alpha", alpha), ("laurel_beta", 1 - alpha), ("laurel_lr_norm", norms)):
        dev = max(abs(g - w) for g, w in zip(got.fields[name], want.tolist()))
        assert dev <= 1e-12, f"{name}: deviation={dev:.3e} bound=1e-12"
    ratio = sum(x / y for x, y in zip(got.laurel_alpha, got.laurel_beta)) / 6
    assert got.summary() == ("alpha_over_beta", pytest.approx(ratio, rel=1e-12))


def test_laurel_plot_draws_the_ratio_and_without_rw_the_norm(tmp_path: Path):
    ratio = Laurel.plot({"probe/laurel_alpha": [1.0, 2.0], "probe/laurel_beta": [1.0, 0.5]}, tmp_path / "a.png", "")
    norm = Laurel.plot({"probe/laurel_lr_norm": [0.1, 0.2]}, tmp_path / "b.png", "")
    assert ratio is not None and ratio.stat().st_size > 0 and norm is not None and norm.stat().st_size > 0
    assert Laurel.plot({}, tmp_path / "c.png", "") is None


@pytest.mark.parametrize(("override", "field"), [
    ("model.laurel.variant=pa", "model.laurel.variant"),
    ("model.laurel.rw_norm=tanh", "model.laurel.rw_norm"),
    ("model.laurel.a_init=normal", "model.laurel.a_init"),
    ("model.laurel.rank=0", "model.laurel.rank"),
    ("model.laurel.rank=33", "model.laurel.rank"),  # > d_model = 32 (tiny)
])
def test_laurel_options_out_of_range_are_refused_naming_the_field(override: str, field: str):
    lines = validate(compose_config(["preset=tiny", "model.use_laurel=true", override]))
    assert any(line.startswith(field + "=") for line in lines), lines
    assert validate(compose_config(["preset=tiny", "model.use_laurel=true"])) == []


def test_laurel_flops_count_the_low_rank_products():
    """2 slots per iteration, each B_s (A_s x): 2 r d + 2 d r = 4 r d FLOPs per token; RW adds none."""
    cfg = compose_config(["preset=tiny", "model.use_laurel=true"]).model
    assert Laurel.flops_per_token(cfg, 2, (1,)) == 2 * 2 * 4 * 32 * 16
    rw = compose_config(["preset=tiny", "model.use_laurel=true", "model.laurel.variant=rw"]).model
    assert Laurel.flops_per_token(rw, 2, (1,)) == 0.0
