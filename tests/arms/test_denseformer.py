"""The DenseFormer arm (dormouse.arms.denseformer; Pagliardini et al. 2024, arXiv:2402.02622) against independent
oracles.

* A float64 reference written here from the paper's §3 (``X_i = B_i(Y_{i-1})``, ``Y_i = sum_j alpha_ij X_j``) and
  §3.2 (dilation k: j = i mod k; period p: ``Y_i = X_i`` where p does not divide i), one block being one loop
  iteration (pre-norm attention then MLP), driven through the arm with planted sublayers; agreement to 1e-12.
* Finite-difference gradients (gradcheck, float64) on the DWA weights and the embedding.
* At init (alpha_ii = 1, others 0) it is the pre-norm residual: the logits equal pre-norm's.
* A hand-computed two-block gold, the paper's parameter count d(d+3)/2, the probe, and the option refusals.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from dormouse.arms.denseformer import DenseFormer
from dormouse.arms.probes import learned_values
from dormouse.arms.specs import DenseFormerConfig
from dormouse.config.schema import compose_config, validate
from dormouse.model.looped import LoopedByteLM

F64 = torch.float64
D = 5


def arm_of(max_iter: int, dilation: int = 1, period: int = 1) -> DenseFormer:
    return DenseFormer(D, max_iter, DenseFormerConfig(dilation=dilation, period=period)).double()


def sublayer(slot: int, h: torch.Tensor) -> torch.Tensor:
    """A planted sublayer: elementwise and slot-dependent, so each input reaches its output."""
    return torch.tanh((1.0 + 0.3 * slot) * h) - 0.2 * slot


def drive(arm: DenseFormer, x0: torch.Tensor, blocks: int, sub=sublayer) -> tuple[list, list]:
    """The loop driver's calls: every sublayer input, and every readout input (one per block)."""
    state, inputs, readouts = arm.begin(x0), [], []
    for s in range(2 * blocks):
        h = arm.sublayer_input(state, s)
        inputs.append(h)
        state = arm.absorb(state, s, sub(s, h))
        if s % 2:
            readouts.append(arm.readout_input(state, s // 2))
    return inputs, readouts


def table(max_iter: int, dilation: int, period: int, seed: int) -> dict[int, list[float]]:
    """Random DWA weights alpha_i[j] for each block i with a DWA (p | i), over j <= i with j = i (mod k)."""
    gen = torch.Generator().manual_seed(seed)
    return {i: (torch.randn(len(range(i % dilation, i + 1, dilation)), generator=gen, dtype=F64) * 0.7).tolist()
            for i in range(1, max_iter + 1) if i % period == 0}


def planted(arm: DenseFormer, alphas: dict[int, list[float]]) -> None:
    with torch.no_grad():
        for i, w in alphas.items():
            arm.dwa[str(i)].copy_(torch.tensor(w, dtype=F64))


def reference(x0: torch.Tensor, alphas: dict[int, list[float]], dilation: int, blocks: int) -> tuple[list, list]:
    """§3 with §3.2: block i reads Y_{i-1}; X_i = Y_{i-1} + a + m (a = attn(Y_{i-1}), m = mlp(Y_{i-1} + a));
    Y_i = sum over j in {j <= i : j = i mod k}, ascending, of alpha_i[.] X_j, or X_i without a DWA."""
    xs, y, inputs, readouts = [x0.to(F64)], x0.to(F64), [], []
    for i in range(1, blocks + 1):
        a = sublayer(2 * (i - 1), y)
        m = sublayer(2 * (i - 1) + 1, y + a)
        inputs += [y, y + a]
        xs.append(y + a + m)
        if i in alphas:
            js = [j for j in range(i + 1) if (i - j) % dilation == 0]
            y = torch.zeros_like(x0, dtype=F64)
            for w, j in zip(alphas[i], js, strict=True):
                y = y + w * xs[j]
        else:
            y = xs[i]
        readouts.append(y)
    return inputs, readouts


@pytest.mark.parametrize(("dilation", "period"), [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1)])
def test_denseformer_matches_a_float64_reference_of_dwa(dilation: int, period: int):
    max_iter = 4
    arm = arm_of(max_iter, dilation, period)
    alphas = table(max_iter, dilation, period, seed=dilation + 10 * period)
    planted(arm, alphas)
    x0 = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(1), dtype=F64)
    got_in, got_out = drive(arm, x0, max_iter)
    want_in, want_out = reference(x0, alphas, dilation, max_iter)
    for what, got, want in (("sublayer input", got_in, want_in), ("readout", got_out, want_out)):
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            dev = (g - w).abs().max().item()
            # float64 sums of O(1) terms: ~1e-15; reading Y_j for X_j or dropping a source is off by O(0.1)
            assert dev <= 1e-12, f"k={dilation} p={period} {what} {n}: deviation={dev:.3e} bound=1e-12"


def test_denseformer_gold_two_blocks_by_hand():
    """X_0 = (1, 0); outputs attn1 = (0, 1), mlp1 = (1, 1), attn2 = (2, 0), mlp2 = (0, -1);
    alpha_1 = (0.5, 2), alpha_2 = (1, -1, 0.5).
    X_1 = X_0 + attn1 + mlp1 = (2, 2); Y_1 = 0.5 (1, 0) + 2 (2, 2) = (4.5, 4);
    X_2 = Y_1 + attn2 + mlp2 = (6.5, 3); Y_2 = (1, 0) - (2, 2) + 0.5 (6.5, 3) = (2.25, -0.5).
    Sublayer inputs: (1, 0), (1, 1), (4.5, 4), (6.5, 4)."""
    arm = DenseFormer(2, 2, DenseFormerConfig()).double()
    planted(arm, {1: [0.5, 2.0], 2: [1.0, -1.0, 0.5]})
    outs = [[0.0, 1.0], [1.0, 1.0], [2.0, 0.0], [0.0, -1.0]]
    inputs, readouts = drive(arm, torch.tensor([1.0, 0.0], dtype=F64), 2,
                             sub=lambda s, h: torch.tensor(outs[s], dtype=F64))
    # every number is a short sum of dyadic rationals: exact in float64
    assert [h.tolist() for h in inputs] == [[1.0, 0.0], [1.0, 1.0], [4.5, 4.0], [6.5, 4.0]]
    assert [y.tolist() for y in readouts] == [[4.5, 4.0], [2.25, -0.5]]


@pytest.mark.parametrize("blocks", [1, 4, 12])
def test_denseformer_adds_the_papers_d_d_plus_3_over_2_weights(blocks: int):
    """§3: a depth-d DenseFormer adds d(d+3)/2 parameters (block i's DWA has i + 1 weights)."""
    n = sum(p.numel() for p in DenseFormer(D, blocks, DenseFormerConfig()).parameters())
    assert n == blocks * (blocks + 3) // 2


@pytest.mark.parametrize(("dilation", "period"), [(1, 1), (2, 2)])
def test_denseformer_gradients_match_finite_differences(dilation: int, period: int):
    arm = arm_of(4, dilation, period)
    planted(arm, table(4, dilation, period, seed=5))
    names = [n for n, _ in arm.named_parameters()]
    arm.forward = lambda x: torch.stack(drive(arm, x, 4)[1])  # what functional_call calls
    x0 = torch.randn(3, D, generator=torch.Generator().manual_seed(3), dtype=F64, requires_grad=True)

    def readouts(*tensors: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(arm, dict(zip(names, tensors[:-1])), (tensors[-1],))

    inputs = tuple(p.detach().clone().requires_grad_(True) for p in arm.parameters()) + (x0,)
    assert torch.autograd.gradcheck(readouts, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


def tiny(*extra: str) -> LoopedByteLM:
    cfg = compose_config(["preset=tiny", "model.max_iter=3", *extra])
    return LoopedByteLM(cfg.model, seed=0)


@pytest.mark.parametrize("options", [[], ["model.denseformer.dilation=2", "model.denseformer.period=2"]])
def test_denseformer_at_init_gives_pre_norms_logits(options: list[str]):
    """alpha_ii = 1, every other 0: Y_i = X_i exactly, so every readout is pre-norm's."""
    dense, prenorm = tiny("model.use_denseformer=true", *options), tiny("model.use_prenorm=true")
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in (dense, prenorm):
            for p in m.attn.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.05)
    idx = torch.randint(0, 256, (2, 16), generator=gen)
    with torch.no_grad():
        got, want = dense(idx), prenorm(idx)
    for k, (g, w) in enumerate(zip(got, want), start=1):
        dev = (g - w).abs().max().item()
        # products by exact 0 and 1 and additions of exact zeros: pre-norm's float32 rounding
        assert dev == 0.0, f"readout {k} at init differs from pre-norm (deviation={dev:.3e}, bound=0)"


def test_denseformer_probe_is_the_weight_matrix_and_draws_it(tmp_path: Path):
    model = tiny("model.use_denseformer=true", "model.max_iter=4", "model.denseformer.dilation=2")
    alphas = table(4, 2, 1, seed=7)
    with torch.no_grad():
        for i, w in alphas.items():
            model.arm.dwa[str(i)].copy_(torch.tensor(w))
    got = learned_values(model, torch.randint(0, 256, (2, 16)), 2)
    assert got.dwa_rows == ["dwa1", "dwa2", "dwa3", "dwa4"]
    assert got.dwa_sources == ["emb", "block1", "block2", "block3", "block4"]
    for i, row in enumerate(got.dwa_weights, start=1):
        js = [j for j in range(i + 1) if (i - j) % 2 == 0]
        want = [float(torch.tensor(alphas[i])[js.index(j)].float()) if j in js else None for j in range(5)]
        for j, (g, w) in enumerate(zip(row, want)):
            assert (math.isnan(g) if w is None else g == w), f"dwa{i} <- source {j}: {g} != {w}"
    off = [abs(w) for i, r in enumerate(got.dwa_weights) for j, w in enumerate(r) if j != i + 1 and not math.isnan(w)]
    assert got.summary() == ("off_diag", pytest.approx(sum(off) / len(off), rel=1e-12))
    scalars = DenseFormer.probe_scalars(got.to_row())
    assert len(scalars) == sum(len(w) for w in alphas.values()) and "probe/dwa_weights/dwa2<-emb" in scalars
    path = DenseFormer.plot(got.to_row(), tmp_path / "dwa.png", "")
    assert path is not None and path.stat().st_size > 0


@pytest.mark.parametrize(("overrides", "field"), [
    (["model.denseformer.dilation=0"], "model.denseformer.dilation"),
    (["model.denseformer.period=0"], "model.denseformer.period"),
    (["model.denseformer.dilation=3"], "model.denseformer.dilation"),  # > max_iter = 2 (tiny)
    (["model.denseformer.period=3"], "model.denseformer.period"),
    (["model.max_iter=3", "model.denseformer.dilation=3", "model.denseformer.period=2"], "model.denseformer.dilation"),
])
def test_denseformer_options_out_of_range_are_refused_naming_the_field(overrides: list[str], field: str):
    lines = validate(compose_config(["preset=tiny", "model.use_denseformer=true", *overrides]))
    assert any(line.startswith(field + "=") for line in lines), lines
    assert validate(compose_config(["preset=tiny", "model.use_denseformer=true"])) == []


def test_denseformer_flops_count_one_multiply_add_per_source():
    """Block i's DWA over m sources: 2 d m FLOPs per token; depth 2, k = p = 1: (2 + 3) sources, d = 32."""
    cfg = compose_config(["preset=tiny", "model.use_denseformer=true"]).model
    assert DenseFormer.flops_per_token(cfg, 2, (1,)) == 2 * 32 * (2 + 3)


@pytest.mark.parametrize("block", [1, 2, 3])
def test_a_blocks_dwa_weights_move_only_the_readouts_from_its_iteration_on(block: int):
    """Each iteration has its own DWA weights: block i's move readouts i.. and leave the earlier ones bit-identical."""
    model = tiny("model.use_denseformer=true")
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(idx)
        model.arm.dwa[str(block)].add_(torch.randn(block + 1, generator=torch.Generator().manual_seed(block)))
        after = model(idx)
    for k in range(3):
        moved = (after[k] - before[k]).abs().max().item()
        if k < block - 1:
            assert moved == 0.0, f"block {block}'s DWA moved readout {k + 1} (deviation={moved:.3e} bound=0)"
        else:
            assert moved > 1e-4, f"block {block}'s DWA did not move readout {k + 1} (deviation={moved:.3e} bound=>1e-4)"
