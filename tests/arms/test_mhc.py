"""Manifold-constrained hyper-connections (mHC): hand-computed toy values, an independent float64 reference,
finite-difference gradients, Sinkhorn's doubly stochastic comb, pre-norm at a zero projection, the options' checks
and the arm's FLOP count."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dormouse.arms.mhc import MHC, sinkhorn
from dormouse.arms.specs import MHCConfig
from dormouse.config.schema import compose_config, validate
from dormouse.model.flops import flop_count
from dormouse.model.looped import LoopedByteLM
from dormouse.train.run_config import load_run_config

LN3 = math.log(3.0)  # sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4, softmax([ln 3, 0]) = [3/4, 1/4]


# ----------------------------------------------------------------------------------------------------
# the float64 reference, written from the equations with plain loops (one token at a time)
# ----------------------------------------------------------------------------------------------------


def f64(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def ref_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def ref_logits(streams: list[torch.Tensor], weight: torch.Tensor, norm_eps: float) -> list[torch.Tensor]:
    """``phi RMSNorm(x_1 | ... | x_n)`` for one token: the streams concatenated, RMS-normalised, projected."""
    flat = torch.cat(streams)
    u = flat / torch.sqrt((flat * flat).sum() / flat.numel() + norm_eps)
    return [torch.dot(weight[r], u) for r in range(weight.shape[0])]


def ref_sinkhorn(logits: list[list[torch.Tensor]], iters: int, eps: float) -> list[list[torch.Tensor]]:
    n = len(logits)
    m = []
    for i in range(n):  # softmax over each row, plus eps
        z = sum(torch.exp(logits[i][j]) for j in range(n))
        m.append([torch.exp(logits[i][j]) / z + eps for j in range(n)])

    def columns(m: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        sums = [sum(m[i][j] for i in range(n)) + eps for j in range(n)]
        return [[m[i][j] / sums[j] for j in range(n)] for i in range(n)]

    def rows(m: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        sums = [sum(m[i][j] for j in range(n)) + eps for i in range(n)]
        return [[m[i][j] / sums[i] for j in range(n)] for i in range(n)]

    m = columns(m)
    for _ in range(iters - 1):
        m = columns(rows(m))
    return m


def ref_slot(streams: list[torch.Tensor], out: torch.Tensor, p: dict, slot: int, n: int, c: MHCConfig):
    """One slot for one token: (the sublayer input, the new streams)."""
    lg = ref_logits(streams, p["weight"][slot], c.norm_eps)
    b, a = p["bias"][slot], p["alpha"][slot]
    pre = [ref_sigmoid(a[0] * lg[k] + b[k]) + c.eps for k in range(n)]
    post = [2 * ref_sigmoid(a[1] * lg[n + k] + b[n + k]) for k in range(n)]
    comb_logits = [[a[2] * lg[2 * n + i * n + j] + b[2 * n + i * n + j] for j in range(n)] for i in range(n)]
    comb = ref_sinkhorn(comb_logits, c.sinkhorn_iters, c.eps)
    h = sum(pre[k] * streams[k] for k in range(n))
    new = [sum(comb[j][k] * streams[j] for j in range(n)) + post[k] * out for k in range(n)]
    return h, new


def ref_readout(streams: list[torch.Tensor], p: dict, k: int, n: int, c: MHCConfig) -> torch.Tensor:
    lg = ref_logits(streams, p["head_weight"][k], c.norm_eps)
    w = [ref_sigmoid(p["head_alpha"][k] * lg[i] + p["head_bias"][k][i]) + c.eps for i in range(n)]
    return sum(w[i] * streams[i] for i in range(n))


def ref_forward(emb: torch.Tensor, outs: list[torch.Tensor], p: dict, n: int, c: MHCConfig):
    """Every sublayer input and every readout for ``emb`` [B, T, d], the streams starting as n copies."""
    batch, seq, d = emb.shape
    inputs = torch.zeros(len(outs), batch, seq, d, dtype=torch.float64)
    reads = torch.zeros(len(outs) // 2, batch, seq, d, dtype=torch.float64)
    for b in range(batch):
        for t in range(seq):
            streams = [emb[b, t].clone() for _ in range(n)]
            for s, out in enumerate(outs):
                inputs[s, b, t], streams = ref_slot(streams, out[b, t], p, s, n, c)
                if s % 2 == 1:
                    reads[s // 2, b, t] = ref_readout(streams, p, s // 2, n, c)
    return inputs, reads


def drive(arm: MHC, emb: torch.Tensor, outs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The arm through the loop's calls with planted sublayer outputs: (the sublayer inputs, the readouts)."""
    state = arm.begin(emb)
    inputs, reads = [], []
    for s, out in enumerate(outs):
        inputs.append(arm.sublayer_input(state, s))
        state = arm.absorb(state, s, out)
        if s % 2 == 1:
            reads.append(arm.readout_input(state, s // 2))
    return torch.stack(inputs), torch.stack(reads)


def random_arm(n: int, d: int, max_iter: int, cfg: MHCConfig, seed: int = 0) -> MHC:
    """An arm off its initial values: projections O(1), biases and scales random, so every map is non-trivial."""
    arm = MHC(d, max_iter, cfg).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in arm.named_parameters():
            scale = 1.0 if "weight" in name else 0.5
            p.copy_((1.0 if "alpha" in name else 0.0) + scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return arm


# ----------------------------------------------------------------------------------------------------
# gold numbers: n = 2 streams, d = 2, one token, one iteration (two slots), two Sinkhorn iterations, eps 0
# ----------------------------------------------------------------------------------------------------

TOY = MHCConfig(n_streams=2, sinkhorn_iters=2, eps=0.0, norm_eps=0.0)
# projection rows: 0-1 pre, 2-3 post, 4-7 comb[i][j] at 4 + 2i + j; columns: stream k channel c at 2k + c


def toy_arm(cfg: MHCConfig = TOY) -> MHC:
    arm = MHC(2, 1, cfg).double()
    with torch.no_grad():
        for p in arm.parameters():
            p.zero_()
        arm.alpha.fill_(1.0)
        arm.head_alpha.fill_(1.0)
        w = arm.weight
        # slot 0 reads u0 = [1, -1, 1, -1] (X0 = two copies of e = [1, -1]; mean square 1)
        w[0, 0, 0] = LN3  # pre_0 logit ln 3
        w[0, 3, 1] = LN3  # post_1 logit -ln 3
        w[0, 4, 2] = LN3  # comb[0][0] logit ln 3
        # slot 1 reads u1 = [5, -1, 3, -1] / 3 (mean square (25 + 1 + 9 + 1) / 4 = 9)
        w[1, 0, 2] = LN3  # pre_0 logit ln 3 * 1
        w[1, 1, 1] = 3 * LN3  # pre_1 logit 3 ln 3 * (-1/3) = -ln 3
        w[1, 2, 3] = 1.5 * LN3  # post_0 logit alpha_post (3/2 ln 3)(-1/3) = 2 (-ln 3 / 2) = -ln 3
        arm.bias[1, 3] = LN3  # post_1 logit: bias ln 3
        w[1, 4, 0] = 1.2 * LN3  # comb[0][0] logit alpha_comb (6/5 ln 3)(5/3) = (1/2) 2 ln 3 = ln 3
        arm.alpha[1, 1], arm.alpha[1, 2] = 2.0, 0.5
        arm.head_bias[0, 0], arm.head_bias[0, 1] = LN3, -LN3  # head weights 3/4, 1/4 (head projection 0)
    return arm


TOY_EMB = torch.tensor([[[1.0, -1.0]]], dtype=torch.float64)
TOY_OUTS = [torch.tensor([[[4.0, 0.0]]], dtype=torch.float64), torch.tensor([[[0.0, 2.0]]], dtype=torch.float64)]
# Both slots' comb logits are [[ln 3, 0], [0, 0]]: softmax rows [[3/4, 1/4], [1/2, 1/2]];
# columns (sums 5/4, 3/4): [[3/5, 1/3], [2/5, 2/3]]; rows (sums 14/15, 16/15): [[9/14, 5/14], [3/8, 5/8]];
# columns (sums 57/56, 55/56): [[12/19, 4/11], [7/19, 7/11]]; its rows sum to 208/209 and 210/209.
TOY_COMB = [[12 / 19, 4 / 11], [7 / 19, 7 / 11]]


def test_toy_maps_inputs_streams_and_readout_are_the_hand_computed_values():
    arm = toy_arm()
    x0 = arm.begin(TOY_EMB).streams
    pre, post, comb = arm.maps(x0, 0)
    # slot 0: pre = [sigmoid(ln 3), sigmoid(0)] = [3/4, 1/2]; post = [2 sigmoid(0), 2 sigmoid(-ln 3)] = [1, 1/2]
    expected_maps = ([0.75, 0.5], [1.0, 0.5], TOY_COMB)
    # slot 0 input: (3/4 + 1/2) [1, -1]; comb^T X0 = column sums (1) x [1, -1], so
    # X1 = [[1, -1] + 1 [4, 0], [1, -1] + 1/2 [4, 0]] = [[5, -1], [3, -1]]
    # slot 1: pre = [3/4, 1/4], post = [2 sigmoid(-ln 3), 2 sigmoid(ln 3)] = [1/2, 3/2], comb as slot 0;
    # input 3/4 [5, -1] + 1/4 [3, -1] = [9/2, -1];
    # comb^T X1: stream 0 = 12/19 [5, -1] + 7/19 [3, -1] = [81/19, -1], stream 1 = 4/11 [5, -1] + 7/11 [3, -1]
    # = [41/11, -1]; X2 = [[81/19, -1] + 1/2 [0, 2], [41/11, -1] + 3/2 [0, 2]] = [[81/19, 0], [41/11, 2]]
    # readout: 3/4 [81/19, 0] + 1/4 [41/11, 2] = [243/76 + 41/44, 1/2] = [863/209, 1/2]
    gold = {"pre0": f64(expected_maps[0]), "post0": f64(expected_maps[1]),
            "comb0": f64(expected_maps[2]), "h0": f64([1.25, -1.25]),
            "x1": f64([[5.0, -1.0], [3.0, -1.0]]), "pre1": f64([0.75, 0.25]),
            "post1": f64([0.5, 1.5]), "comb1": f64(TOY_COMB), "h1": f64([4.5, -1.0]),
            "x2": f64([[81 / 19, 0.0], [41 / 11, 2.0]]), "read": f64([863 / 209, 0.5])}
    state = arm.begin(TOY_EMB)
    got = {"pre0": pre[0, 0], "post0": post[0, 0], "comb0": comb[0, 0], "h0": arm.sublayer_input(state, 0)[0, 0]}
    state = arm.absorb(state, 0, TOY_OUTS[0])
    got["x1"] = state.streams[0, 0]
    got["pre1"], got["post1"], got["comb1"] = (t[0, 0] for t in arm.maps(state.streams, 1))
    got["h1"] = arm.sublayer_input(state, 1)[0, 0]
    state = arm.absorb(state, 1, TOY_OUTS[1])
    got["x2"], got["read"] = state.streams[0, 0], arm.readout_input(state, 0)[0, 0]
    for key, want in gold.items():
        dev = (got[key] - want.double()).abs().max().item()
        # float64 arithmetic on O(1) values (log 3, exp, a square root of 9): ~1e-15
        assert dev < 1e-12, f"{key}: {got[key].tolist()} != {want.tolist()} (deviation={dev:.3e}, bound=1e-12)"


def test_toy_eps_enters_pre_the_softmax_and_every_sinkhorn_denominator():
    """eps = 1/4 on slot 0 of the toy: pre = [3/4, 1/2] + 1/4 = [1, 3/4]; post carries no eps."""
    arm = toy_arm(MHCConfig(n_streams=2, sinkhorn_iters=2, eps=0.25, norm_eps=0.0))
    pre, post, comb = (t[0, 0] for t in arm.maps(arm.begin(TOY_EMB).streams, 0))
    # softmax + 1/4: [[1, 1/2], [3/4, 3/4]]; columns (sums + 1/4 = 2, 3/2): [[1/2, 1/3], [3/8, 1/2]];
    # rows (sums + 1/4 = 13/12, 9/8): [[6/13, 4/13], [1/3, 4/9]];
    # columns (sums + 1/4 = 163/156, 469/468): [[72/163, 144/469], [52/163, 208/469]]
    want = {"pre": [1.0, 0.75], "post": [1.0, 0.5], "comb": [[72 / 163, 144 / 469], [52 / 163, 208 / 469]]}
    for key, value in (("pre", pre), ("post", post), ("comb", comb)):
        dev = (value - torch.tensor(want[key], dtype=torch.float64)).abs().max().item()
        assert dev < 1e-12, f"{key}: {value.tolist()} != {want[key]} (deviation={dev:.3e}, bound=1e-12)"


# ----------------------------------------------------------------------------------------------------
# the reference on random inputs, and finite differences
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "iters", "eps"), [(3, 5, 1e-3), (4, 20, 1e-6), (1, 1, 0.0)])
def test_the_arm_equals_the_float64_reference_on_random_inputs(n: int, iters: int, eps: float):
    cfg = MHCConfig(n_streams=n, sinkhorn_iters=iters, eps=eps, norm_eps=1e-5)
    d, max_iter = 4, 2
    arm = random_arm(n, d, max_iter, cfg)
    gen = torch.Generator().manual_seed(1)
    emb = torch.randn(2, 3, d, generator=gen, dtype=torch.float64)
    outs = [torch.randn(2, 3, d, generator=gen, dtype=torch.float64) for _ in range(2 * max_iter)]
    inputs, reads = drive(arm, emb, outs)
    params = {k: v.detach() for k, v in arm.named_parameters()}
    want_inputs, want_reads = ref_forward(emb, outs, params, n, cfg)
    for name, got, want in (("inputs", inputs, want_inputs), ("readouts", reads, want_reads)):
        dev = (got - want).abs().max().item()
        # float64, O(1) values, a few dozen operations per value: ~1e-15; 1e-12 leaves room for the Sinkhorn loop
        assert dev < 1e-12, f"{name}: the arm differs from the reference (deviation={dev:.3e}, bound=1e-12)"


def test_gradients_of_inputs_and_every_parameter_match_finite_differences():
    cfg = MHCConfig(n_streams=2, sinkhorn_iters=3, eps=1e-3, norm_eps=1e-3)
    d, max_iter = 3, 2
    arm = random_arm(2, d, max_iter, cfg, seed=2)
    names = [name for name, _ in arm.named_parameters()]
    gen = torch.Generator().manual_seed(3)
    emb = torch.randn(1, 2, d, generator=gen, dtype=torch.float64, requires_grad=True)
    outs = [torch.randn(1, 2, d, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2 * max_iter)]
    params = [p.detach().clone().requires_grad_(True) for p in arm.parameters()]

    def run(emb: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        outs, values = rest[:2 * max_iter], rest[2 * max_iter:]
        inputs, reads = _drive_with(arm, names, values, emb, outs)
        return torch.cat([inputs.reshape(-1), reads.reshape(-1)])

    assert torch.autograd.gradcheck(run, (emb, *outs, *params), eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True)


def _drive_with(arm: MHC, names: list[str], values: tuple, emb: torch.Tensor, outs: tuple):
    """:func:`drive` with the arm's parameters replaced by ``values`` (so gradcheck differentiates them)."""
    params = dict(zip(names, values))
    saved = {name: getattr(arm, name) for name in names}
    try:
        for name in names:
            delattr(arm, name)
            setattr(arm, name, params[name])
        return drive(arm, emb, list(outs))
    finally:
        for name in names:
            delattr(arm, name)
            arm.register_parameter(name, saved[name])


# ----------------------------------------------------------------------------------------------------
# Sinkhorn: how doubly stochastic comb is after t iterations
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
def test_comb_is_doubly_stochastic_to_the_birkhoff_bound_of_its_iterations(scale: float):
    """With eps = 0 the last step normalises the columns, so they sum to 1 exactly; the rows converge at Birkhoff's
    rate: each row-and-column pair contracts Hilbert's projective distance of the row sums from 1 by kappa^2,
    kappa = tanh(Delta / 4), Delta = max log(a_ik a_jl / (a_jk a_il)) of A = exp(logits) (Franklin & Lorenz 1989).
    The column-normalised row sums average 1, so max |r - 1| <= max r / min r - 1 = exp(d_H) - 1."""
    gen = torch.Generator().manual_seed(4)
    logits = scale * torch.randn(64, 4, 4, generator=gen, dtype=torch.float64)
    ratios = logits[:, :, None, :, None] + logits[:, None, :, None, :] - logits[:, None, :, :, None] \
        - logits[:, :, None, None, :]
    kappa = torch.tanh(ratios.flatten(1).amax(1) / 4)
    first = sinkhorn(logits, 1, 0.0).sum(-1)
    d_first = (first.amax(-1) / first.amin(-1)).log()
    for iters in (1, 2, 5, 20):
        comb = sinkhorn(logits, iters, 0.0)
        cols = (comb.sum(-2) - 1).abs().max().item()
        assert cols < 1e-14, f"iters={iters}: a column sum is off 1 (deviation={cols:.3e}, bound=1e-14)"
        rows = (comb.sum(-1) - 1).abs().amax(-1)
        bound = torch.expm1(kappa ** (2 * (iters - 1)) * d_first) + 1e-14  # + rounding at convergence
        worst = (rows - bound).max().item()
        assert worst <= 0, f"iters={iters}: a row sum exceeds Birkhoff's bound (deviation={worst:.3e}, bound=0)"
        assert (comb > 0).all()


def test_the_models_comb_at_init_is_doubly_stochastic_to_eps():
    """At init the comb logits are O(0.1) (a N(0, 0.02) projection of an RMS-normalised 4d vector): 20 iterations
    leave the rows ~kappa^38 ~ 1e-30 off, so the only deviation left is eps = 1e-6 in each denominator."""
    model = LoopedByteLM(compose_config(["preset=tiny", "model.use_mhc=true"]).model, seed=0)
    streams = model.arm.begin(model.embed(torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))))
    for slot in range(model.arm.n_slots):
        _, _, comb = model.arm.maps(streams.streams.double(), slot)
        for axis in (-1, -2):
            dev = (comb.sum(axis) - 1).abs().max().item()
            # each sum is s / (s + eps) with s ~ 1 (+ n eps from the softmax's eps): off by <= ~(n + 1) eps
            assert dev < 1e-5, f"slot {slot}: sums over axis {axis} off 1 (deviation={dev:.3e}, bound=1e-5)"


# ----------------------------------------------------------------------------------------------------
# the model: pre-norm at a zero projection, the options, the FLOPs
# ----------------------------------------------------------------------------------------------------


def test_with_zero_projections_and_no_eps_mhc_is_the_pre_norm_residual():
    """phi = 0, eps = 0: pre = 1/2 and post = 1 on every stream, comb = 1/n everywhere, so the n streams stay the
    pre-norm state x, every sublayer reads n/2 x and the head n/2 x; with the norms' eps 0 the scale vanishes."""
    models = {}
    for arm, extra in (("prenorm", ["model.use_prenorm=true"]), ("mhc", ["model.use_mhc=true", "model.mhc.eps=0",
                                                                         "model.mhc.norm_eps=0"])):
        model = LoopedByteLM(compose_config(["preset=tiny", "model.max_iter=3", *extra]).model, seed=0).double()
        for norm in (model.attn.norm, model.mlp.norm, model.final_norm):
            norm.eps = 0.0
        with torch.no_grad():
            for p in model.attn.parameters():  # non-trivial sublayer outputs
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3), dtype=p.dtype) * 0.05)
        models[arm] = model
    with torch.no_grad():
        models["mhc"].arm.weight.zero_()
        models["mhc"].arm.head_weight.zero_()
        idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
        want, got = models["prenorm"](idx), models["mhc"](idx)
    for k, (a, b) in enumerate(zip(want, got), start=1):
        dev = (a - b).abs().max().item()
        # float64: the same arithmetic up to scaling by n/2 before each norm, ~1e-15 relative on O(1) logits
        assert dev < 1e-10, f"readout {k}: mHC at phi = 0 is not pre-norm (deviation={dev:.3e}, bound=1e-10)"


@pytest.mark.parametrize(("override", "field"), [
    ("model.mhc.n_streams=0", "n_streams"),
    ("model.mhc.sinkhorn_iters=0", "sinkhorn_iters"),
    ("model.mhc.eps=-1e-3", "eps"),
    ("model.mhc.eps=nan", "eps"),
    ("model.mhc.norm_eps=-1", "norm_eps"),
    ("model.mhc.norm_eps=inf", "norm_eps"),
])
def test_each_option_out_of_range_is_refused_naming_its_field(override: str, field: str):
    problems = validate(compose_config(["preset=tiny", "model.use_mhc=true", override]))
    assert any(line.startswith(f"model.mhc.{field}=") and "is invalid" in line for line in problems), problems
    assert validate(compose_config(["preset=tiny", "model.use_mhc=true"])) == []


def test_the_arms_own_flops_are_what_torchs_counter_counts_and_the_hand_count():
    """d 32, n 4, 2 iterations, both readouts: per slot 2·128·24 + 2·128 + 2·16·32 = 7424, per readout
    2·16·32 + 2·128 = 1280: 4·7424 + 2·1280 = 32256; torch's counter sees exactly the block's and these (each
    collapse is a batched product it counts)."""
    cfg = load_run_config(["preset=tiny", "model.d_model=32", "model.n_heads=2", "model.max_iter=2",
                           "data.seq_len=32", "train.batch_size=4", "model.use_mhc=true"])
    count = flop_count(cfg)
    assert count.arm == 32256 and count.arm_counted
    model = LoopedByteLM(cfg.model)
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 256, (4, 32)))
    attention = 2 * 2 * 32 * 32  # causal attention, which CPU SDPA hides from the counter
    counted = counter.get_total_flops() / (4 * 32) + attention
    assert count.block + count.arm == counted


def test_the_state_is_one_stream_tensor_and_each_slot_adds_one_new_one():
    """The n streams are one [B, T, n, d] tensor, replaced (not stacked) by each absorb."""
    arm = MHC(8, 2, MHCConfig(n_streams=3))
    state = arm.begin(torch.randn(2, 5, 8))
    for slot in range(4):
        arm.sublayer_input(state, slot)
        state = arm.absorb(state, slot, torch.randn(2, 5, 8))
        assert state.streams.shape == (2, 5, 3, 8) and state.post is None and state.comb is None
    with pytest.raises(RuntimeError, match="without its sublayer_input"):
        arm.absorb(state, 0, torch.randn(2, 5, 8))


def test_the_whole_model_traces_as_one_graph_and_counts_every_compiled_call():
    """``train.compile`` (whole scope): the state object and its maps trace without a graph break, and the in-graph
    counter counts each compiled call's six aggregations."""
    model = LoopedByteLM(compose_config(["preset=tiny", "model.max_iter=3", "model.use_mhc=true"]).model, seed=0)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    compiled = model.compile_whole(backend="eager")  # fullgraph: a graph break is an error
    with torch.no_grad():
        eager = model(idx)
        for _ in range(3):
            got = compiled(idx)
    ran, asked = model.counters.ran["mhc"], model.counters.asked["mhc"]
    assert ran == asked == 4 * 2 * 3, f"ran={ran} asked={asked} (deviation={24 - min(ran, asked)}, bound=0)"
    dev = max((a - b).abs().max().item() for a, b in zip(eager, got))
    assert dev < 1e-5, f"compiled logits differ from eager (deviation={dev:.3e}, bound=1e-5)"


def test_the_probe_replays_the_streams_the_forward_built_and_starts_at_the_initial_maps(tmp_path):
    """learned() rebuilds the streams from the recorded sublayer outputs: its collapse with each slot's pre is the
    input the forward handed that sublayer. At init pre ~ 1/2, post ~ 1, comb ~ 1/n and the streams nearly one."""
    from dormouse.arms.mhc import collapse
    from dormouse.arms.probes import LoopTrace, learned_values

    model = LoopedByteLM(compose_config(["preset=tiny", "model.max_iter=3", "model.use_mhc=true"]).model, seed=0)
    idx = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(0))
    trace = LoopTrace()
    with torch.no_grad():
        model(idx, trace=trace)
        x = model.arm.begin(trace.embedding).streams
        for s, (h, out) in enumerate(zip(trace.inputs, trace.outputs)):
            pre, post, comb = model.arm.maps(x, s)
            dev = (collapse(pre, x) - h).abs().max().item()
            assert dev == 0.0, f"slot {s}: the replayed input differs from the forward's (deviation={dev:.3e}, bound=0)"
            x = model.arm.mix(x, post, comb, out)
    fields = learned_values(model, idx, batch_size=2).fields
    # N(0, 0.02) projections of a unit-RMS 4d = 128-vector: logits ~ N(0, 0.02^2 128) ~ 0.23 sd, so the maps sit
    # within a few percent of their centres (sigmoid' = 1/4 there)
    for name, centre, bound in (("pre_mean", 0.5, 0.05), ("post_mean", 1.0, 0.1), ("comb_diag", 0.25, 0.05)):
        worst = max(abs(v - centre) for v in fields[name])
        assert worst < bound, f"{name} at init {fields[name]} (deviation={worst:.3e}, bound={bound})"
    assert max(fields["stream_spread"]) < 0.1, fields["stream_spread"]
    row = {f"probe/{k}": v for k, v in fields.items()}
    written = MHC.plot(row, tmp_path / MHC.plot_file, "")
    assert written is not None and written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
