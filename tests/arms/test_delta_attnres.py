"""Gates for Delta AttnRes (dormouse/arms/delta_attnres.py; arXiv:2605.18855, upstream ``delta_attn_res``).

The mechanism (upstream mode "delta"): sublayer l reads ``u_l = x + sum_i softmax_i(w_l . RMSNorm(v_i)) v_i`` over
the sources ``[embedding, f_1 .. f_{l-1}]`` (the first sublayer, with no source yet, reads x), and the stream takes
its output, ``x <- x + f(u_l)``. Oracles independent of the implementation: gold numbers computed by hand on a
2-channel toy; a float64 reference written here with explicit loops; finite differences (gradcheck); pre-norm's
logits. Messages carry ``deviation=<measured> bound=<allowed>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from dormouse.arms.delta_attnres import DeltaAttnRes
from dormouse.arms.specs import DeltaAttnResConfig
from dormouse.config.schema import compose_config, validate
from dormouse.model.looped import LoopedByteLM
from tests.helpers.model_hooks import hooked_trace

F64 = torch.float64
Sublayer = Callable[[Tensor], Tensor]


def _dev(got: Tensor, want: Tensor) -> float:
    return (got.double() - want.double()).abs().max().item()


def drive(arm: DeltaAttnRes, emb: Tensor, sublayers: list[Sublayer] | None = None,
          outputs: list[Tensor] | None = None) -> tuple[list[Tensor], list[Tensor]]:
    """The loop driver's calls on ``arm``: (every sublayer input, every readout input). Each slot's output is
    ``sublayers[slot % 2](u)``, or the planted ``outputs[slot]``."""
    state = arm.begin(emb)
    inputs, readouts = [], []
    for k in range(arm.max_iter):
        for j in range(2):
            slot = 2 * k + j
            u = arm.sublayer_input(state, slot)
            inputs.append(u)
            out = outputs[slot] if outputs is not None else sublayers[j](u)
            state = arm.absorb(state, slot, out)
        readouts.append(arm.readout_input(state, k))
    return inputs, readouts


# ----------------------------------------------------------------------------------------------------
# gold numbers, by hand
# ----------------------------------------------------------------------------------------------------


def test_gold_toy_two_channels_by_hand() -> None:
    """d = 2, one token, eps = 0, gains 1, 2 iterations, readout=read. Embedding e = [1, 0]; planted outputs
    f0 = [0, 2], f1 = [-1, 1], f2 = [3, 0], f3 = [0, -1]. Keys RMSNorm(v) = v / sqrt(mean v^2):
    k_e = [sqrt2, 0], k_f0 = [0, sqrt2], k_f1 = [-1, 1], k_f2 = [sqrt2, 0], k_f3 = [0, -sqrt2].

    slot 0: no source yet: u0 = x = e = [1, 0];                                  x <- e + f0 = [1, 2]
    slot 1: w = [ln3/sqrt2, 0]: scores (ln3, 0), alpha = (3/4, 1/4),
            read = 3/4 [1, 0] + 1/4 [0, 2] = [0.75, 0.5]; u1 = [1, 2] + read = [1.75, 2.5];   x <- [0, 3]
    out1:   w = 0: alpha uniform over (e, f0, f1): read = [0, 3] / 3 = [0, 1]; readout1 = [0, 4]
    slot 2: w = [c, c], sqrt2 c = ln2: scores (ln2, ln2, 0), exp (2, 2, 1), alpha = (.4, .4, .2),
            read = [.4 - .2, .8 + .2] = [0.2, 1.0]; u2 = [0.2, 4.0];                      x <- [3, 3]
    slot 3: w = [c, c], sqrt2 c = ln3: scores (ln3, ln3, 0, ln3), exp (3, 3, 1, 3), alpha = (.3, .3, .1, .3),
            read = [.3 - .1 + .9, .6 + .1] = [1.1, 0.7]; u3 = [4.1, 3.7];                 x <- [3, 2]
    out2:   w = [c, c], sqrt2 c = ln2: exp (2, 2, 1, 2, 1/2), Z = 7.5, alpha = (4, 4, 2, 4, 1) / 15,
            read = (4[1,0] + 4[0,2] + 2[-1,1] + 4[3,0] + [0,-1]) / 15 = [14, 9] / 15; readout2 = [59/15, 39/15]
    """
    arm = DeltaAttnRes(2, 2, DeltaAttnResConfig(eps=0.0, readout="read")).double()
    r2 = 1 / math.sqrt(2)
    with torch.no_grad():  # rows: slots 1, 2, 3, then readouts 1, 2
        arm.queries.copy_(torch.tensor([[math.log(3) * r2, 0.0], [math.log(2) * r2] * 2, [math.log(3) * r2] * 2,
                                        [0.0, 0.0], [math.log(2) * r2] * 2], dtype=F64))
    outputs = [torch.tensor([v], dtype=F64) for v in ([0.0, 2.0], [-1.0, 1.0], [3.0, 0.0], [0.0, -1.0])]
    with torch.no_grad():
        inputs, readouts = drive(arm, torch.tensor([[1.0, 0.0]], dtype=F64), outputs=outputs)
    gold_inputs = [[1.0, 0.0], [1.75, 2.5], [0.2, 4.0], [4.1, 3.7]]
    gold_readouts = [[0.0, 4.0], [59 / 15, 39 / 15]]
    for what, got, gold in (("input", inputs, gold_inputs), ("readout", readouts, gold_readouts)):
        for i, (g, w) in enumerate(zip(got, gold, strict=True)):
            dev = _dev(g, torch.tensor([w], dtype=F64))
            # float64 on O(1) values: a few ulps
            assert dev <= 1e-12, f"{what} {i}: {g.tolist()} vs hand-computed {w} (deviation={dev:.3e} bound=1e-12)"


# ----------------------------------------------------------------------------------------------------
# the float64 reference, written from the equations with loops
# ----------------------------------------------------------------------------------------------------


def ref_read(sources: list[Tensor], x: Tensor, w: Tensor, g: Tensor | None, a: float, eps: float, form: str) -> Tensor:
    """``x + a sum_i softmax_i(s_i) v_i``, ``s_i = sum_c w_c g_c v_ic / sqrt(mean_c v_ic^2 + eps)`` (paper) or
    ``/ sqrt(sum_c v_ic^2 + d eps) / sqrt(d)`` (sqrt_d)."""
    d = x.shape[-1]
    scores = []
    for v in sources:
        sq = sum(v[..., c] ** 2 for c in range(d))
        dot = sum(w[c] * (1.0 if g is None else g[c]) * v[..., c] for c in range(d))
        scores.append(dot / torch.sqrt(sq / d + eps) if form == "paper" else dot / torch.sqrt(sq + d * eps) / d**0.5)
    top = scores[0]
    for s in scores[1:]:
        top = torch.maximum(top, s)
    exps = [torch.exp(s - top) for s in scores]
    z = sum(exps)
    mix = sum((e / z).unsqueeze(-1) * v for e, v in zip(exps, sources))
    return x + a * mix


def ref_loop(emb: Tensor, sublayers: list[Sublayer], max_iter: int, q: Tensor, g: Tensor | None,
             alpha: Tensor | None, eps: float, form: str, readout: str) -> tuple[list[Tensor], list[Tensor]]:
    """Upstream's "delta" layer loop: no read before the first output; then sources [emb, f_0, ...]."""
    x, outs, inputs, readouts = emb, [], [], []
    n_slots = 2 * max_iter

    def read(row: int) -> Tensor:
        a = 1.0 if alpha is None else alpha[row]
        return ref_read([emb, *outs], x, q[row], None if g is None else g[row], a, eps, form)

    for k in range(max_iter):
        for j in range(2):
            slot = 2 * k + j
            u = x if slot == 0 else read(slot - 1)
            inputs.append(u)
            f = sublayers[j](u)
            outs.append(f)
            x = x + f
        readouts.append(read(n_slots - 1 + k) if readout == "read" else x)
    return inputs, readouts


def planted(d: int, gen: torch.Generator) -> list[Sublayer]:
    """Two nonlinear sublayers ``2 tanh(u A_j)``: each output depends on what the read gave it."""
    mats = [torch.randn(d, d, generator=gen, dtype=F64) / d**0.5 for _ in range(2)]
    return [lambda u, a=a: 2 * torch.tanh(u @ a) for a in mats]


def planted_arm(d: int, max_iter: int, cfg: DeltaAttnResConfig, gen: torch.Generator) -> DeltaAttnRes:
    arm = DeltaAttnRes(d, max_iter, cfg).double()
    with torch.no_grad():
        scale = d if cfg.form == "sqrt_d" else 1  # sqrt_d scores are d times smaller
        arm.queries.copy_(scale * torch.randn(arm.queries.shape, generator=gen, dtype=F64))
        if arm.gains is not None:
            arm.gains.copy_(1 + 0.3 * torch.randn(arm.gains.shape, generator=gen, dtype=F64))
        if arm.alpha is not None:
            arm.alpha.copy_(torch.randn(arm.alpha.shape, generator=gen, dtype=F64))
    return arm


@pytest.mark.parametrize("form", ["paper", "sqrt_d"])
@pytest.mark.parametrize("gain", [True, False])
@pytest.mark.parametrize("gate", ["none", "alpha"])
@pytest.mark.parametrize("readout", ["stream", "read"])
def test_arm_matches_the_float64_reference(form: str, gain: bool, gate: str, readout: str) -> None:
    gen = torch.Generator().manual_seed(7)
    d, m, eps = 8, 3, 1e-6
    cfg = DeltaAttnResConfig(form=form, eps=eps, gain=gain, readout=readout, gate=gate)
    arm = planted_arm(d, m, cfg, gen)
    sublayers = planted(d, gen)
    emb = torch.randn(2, 3, d, generator=gen, dtype=F64)
    with torch.no_grad():
        got_in, got_out = drive(arm, emb, sublayers)
        want_in, want_out = ref_loop(emb, sublayers, m, arm.queries, arm.gains, arm.alpha, eps, form, readout)
    for what, got, want in (("input", got_in, want_in), ("readout", got_out, want_out)):
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            dev = _dev(a, b)
            # float64, O(1-10) values through 6 reads and tanh layers: ~1e-15; 1e-12 leaves room for reordering
            assert dev <= 1e-12, f"{what} {i} vs float64 reference (deviation={dev:.3e} bound=1e-12)"


class _Loop(nn.Module):
    """The arm driven through planted sublayers: every sublayer input and readout, concatenated."""

    def __init__(self, arm: DeltaAttnRes, sublayers: list[Sublayer]) -> None:
        super().__init__()
        self.arm, self.sublayers = arm, sublayers

    def forward(self, emb: Tensor) -> Tensor:
        inputs, readouts = drive(self.arm, emb, self.sublayers)
        return torch.cat([*inputs, *readouts], dim=-1)


@pytest.mark.parametrize("gate", ["none", "alpha"])
def test_gradients_match_finite_differences(gate: str) -> None:
    """Queries, key gains, gate and embedding: autograd (through the custom key and mix backwards) against
    central differences, float64 (gradcheck's eps 1e-6, atol 1e-5 on O(1) Jacobians)."""
    gen = torch.Generator().manual_seed(3)
    arm = planted_arm(4, 2, DeltaAttnResConfig(readout="read", gate=gate), gen)
    loop = _Loop(arm, planted(4, gen))
    names = ["queries", "gains", *(["alpha"] if gate == "alpha" else [])]
    params = tuple(arm.get_parameter(n).detach().clone().requires_grad_(True) for n in names)
    emb = torch.randn(2, 4, generator=gen, dtype=F64, requires_grad=True)

    def run(e: Tensor, *ps: Tensor) -> Tensor:
        return torch.func.functional_call(loop, {f"arm.{n}": p for n, p in zip(names, ps)}, (e,))

    assert torch.autograd.gradcheck(run, (emb, *params), eps=1e-6, atol=1e-5)


# ----------------------------------------------------------------------------------------------------
# the starting point: pre-norm
# ----------------------------------------------------------------------------------------------------


def tiny(*overrides: str) -> LoopedByteLM:
    return LoopedByteLM(compose_config(["preset=tiny", "model.max_iter=3", *overrides]).model, seed=0)


def live(model: LoopedByteLM) -> LoopedByteLM:
    """Non-trivial sublayers (equal for every arm: the same seed and the same perturbation)."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in [*model.attn.parameters(), *model.mlp.parameters()]:
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def idx_batch() -> Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))


def test_gate_alpha_at_init_gives_pre_norms_logits_and_the_gate_gets_a_gradient() -> None:
    """gate=alpha: ``u = x + 0 * read = x`` exactly, so every readout is pre-norm's bit for bit; the zero gate
    is not stuck: each read's alpha gets a nonzero gradient (the read is not x's multiple once queries move)."""
    prenorm = live(tiny("model.use_prenorm=true"))
    delta = live(tiny("model.use_delta_attnres=true", "model.delta_attnres.gate=alpha"))
    with torch.no_grad():
        delta.arm.queries.copy_(torch.randn(delta.arm.queries.shape, generator=torch.Generator().manual_seed(1)))
    idx = idx_batch()
    with torch.no_grad():
        want = prenorm(idx)
    got = delta(idx)
    for k, (a, b) in enumerate(zip(got, want, strict=True), start=1):
        dev = _dev(a, b)
        assert dev == 0.0, f"readout {k}: gate=alpha at init differs from pre-norm (deviation={dev:.3e} bound=0)"
    torch.stack([lg.logsumexp(-1).mean() for lg in got]).sum().backward()
    grad = delta.arm.alpha.grad.abs()
    assert grad.min().item() > 0, f"a zero gate gets no gradient: {grad.tolist()} (deviation=0 bound=>0)"


@pytest.mark.parametrize("readout", ["stream", "read"])
def test_zero_queries_add_x_over_n_so_the_sublayer_norm_sees_pre_norms_input(readout: str) -> None:
    """Zero queries weigh the n sources [e, f_1 .. f_{n-1}] uniformly, and they sum to the stream x: the read is
    x / n and ``u = (1 + 1/n) x``. The sublayers' (and head's) RMSNorm removes that scale, so with their eps at 0
    the logits are pre-norm's up to rounding (float64: 1e-10 on O(1) logits through 3 iterations); with eps > 0
    they differ by O(eps / mean x^2)."""
    models = [live(tiny(*arm)).double() for arm in (["model.use_prenorm=true"],
                                                     ["model.use_delta_attnres=true",
                                                      f"model.delta_attnres.readout={readout}"])]
    for model in models:
        for norm in (model.attn.norm, model.mlp.norm, model.final_norm):
            norm.eps = 0.0
    idx = idx_batch()
    emb, inputs, outputs = hooked_trace(models[1], idx)
    for s, u in enumerate(inputs):
        x = emb + sum(outputs[:s]) if s else emb
        dev = _dev(u, (1 + 1 / (s + 1)) * x if s else x)
        assert dev <= 1e-12, f"slot {s}: input is not (1 + 1/{s + 1}) x (deviation={dev:.3e} bound=1e-12)"
    with torch.no_grad():
        want, got = (model(idx) for model in models)
    for k, (a, b) in enumerate(zip(got, want, strict=True), start=1):
        dev = _dev(a, b)
        assert dev <= 1e-10, f"readout {k}: zero-query Delta AttnRes vs pre-norm (deviation={dev:.3e} bound=1e-10)"


# ----------------------------------------------------------------------------------------------------
# probes, cost, options
# ----------------------------------------------------------------------------------------------------


def test_mix_ratio_probe_is_the_added_read_over_the_stream() -> None:
    """``delta_mix_ratio[r]`` = mean ``||u - x|| / ||x||``, from hooked inputs (a float64 recomputation); at init
    the read is x / n, so the ratio is 1 / n and the weights 1 / n."""
    from dormouse.arms.probes import learned_values

    model = live(tiny("model.use_delta_attnres=true")).eval()
    idx = idx_batch()
    init = learned_values(model, idx, 2)
    for r, (ratio, row) in enumerate(zip(init.delta_mix_ratio, init.delta_weights, strict=True)):
        n = r + 2  # read r is slot r + 1: the embedding and r + 1 outputs
        assert abs(ratio - 1 / n) <= 1e-6, f"read {r}: init ratio {ratio} vs 1/{n} (deviation bound=1e-6)"
        assert all(abs(w - 1 / n) <= 1e-6 for w in row[:n]) and all(math.isnan(w) for w in row[n:]), row
    with torch.no_grad():
        model.arm.queries.copy_(3 * torch.randn(model.arm.queries.shape, generator=torch.Generator().manual_seed(2)))
    emb, inputs, outputs = hooked_trace(model, idx)
    probe = learned_values(model, idx, 2)
    for r, ratio in enumerate(probe.delta_mix_ratio):
        x = (emb + sum(outputs[:r + 1])).double()
        want = (torch.linalg.vector_norm(inputs[r + 1].double() - x, dim=-1)
                / torch.linalg.vector_norm(x, dim=-1)).mean().item()
        # float32 forward (u - x cancels to ~1e-7 relative of |x|) vs the probe's float64 read
        assert abs(ratio - want) <= 1e-5, f"read {r}: ratio {ratio} vs {want} (deviation bound=1e-5)"
    assert probe.summary() == ("mix", sum(probe.delta_mix_ratio) / len(probe.delta_mix_ratio))


def test_each_map_plot_answers_only_its_own_arms_fields(tmp_path: Path) -> None:
    from dormouse.arms.plots import write_probe_plots

    nan = float("nan")
    fields = {"reads": ["mlp1", "attn2"], "sources": ["emb", "attn1", "mlp1"],
              "weights": [[0.5, 0.5, nan], [0.2, 0.3, 0.5]], "entropy": [0.69, 1.03]}
    delta_row = {**{f"probe/delta_{k}": v for k, v in fields.items()}, "probe/delta_mix_ratio": [0.5, 0.3]}
    attnres_row = {f"probe/{k}": v for k, v in fields.items()}
    (tmp_path / "d").mkdir()
    (tmp_path / "a").mkdir()
    assert write_probe_plots(tmp_path / "d", delta_row) == [tmp_path / "d" / DeltaAttnRes.plot_file]
    assert [p.name for p in write_probe_plots(tmp_path / "a", attnres_row)] == ["attnres_map.png"]


def test_flops_are_attnres_reads_over_the_sources_each_read_sees() -> None:
    """d 32, 2 iterations: slots 1, 2, 3 see 2, 3, 4 sources (slot 0 reads x alone): 9 x 4d = 1152; readout=read
    adds the readouts' 3 and 5 sources: 17 x 4d = 2176; the last readout only: 1152 + 5 x 4d = 1792."""
    from dormouse.model.flops import flop_count
    from dormouse.train.run_config import load_run_config

    smoke = ["preset=tiny", "model.d_model=32", "model.n_heads=2", "model.max_iter=2", "data.seq_len=32",
             "train.batch_size=4", "model.use_delta_attnres=true"]
    for extra, own in (([], 1152), (["model.delta_attnres.readout=read"], 2176),
                       (["model.delta_attnres.readout=read", "train.readout=last"], 1792)):
        count = flop_count(load_run_config([*smoke, *extra]))
        assert count.arm == own and count.arm_counted, (extra, count.arm, own)


@pytest.mark.parametrize(("override", "field"), [
    ("form=l2", "model.delta_attnres.form"),
    ("eps=-1", "model.delta_attnres.eps"),
    ("eps=nan", "model.delta_attnres.eps"),
    ("readout=mean", "model.delta_attnres.readout"),
    ("gate=sigmoid", "model.delta_attnres.gate"),
])
def test_each_option_out_of_range_is_refused_naming_its_field(override: str, field: str) -> None:
    problems = validate(compose_config(["preset=tiny", "model.use_delta_attnres=true",
                                        f"model.delta_attnres.{override}"]))
    assert len(problems) == 1 and problems[0].startswith(field + "="), problems
