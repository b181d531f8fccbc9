"""The arms: each one's parameters move the logits at every depth, and the counters prove what ran.

A counter that fires while the output does not move is a dead arm, so every arm is
checked both ways: its ``ran`` equals the driver's ``asked``, and perturbing its parameters changes the
logits of every readout.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dormouse.arms.registry import ARMS
from dormouse.config.schema import compose_config
from dormouse.model.looped import LoopedByteLM
from tests.helpers.compile_parity import compiled_against_eager
from tests.helpers.model_hooks import readouts_with_mlp_bumped

ARM_OVERRIDES = {
    "rezero": [],
    "gr": ["model.use_gr=true"],
    "attnres": ["model.use_attnres=true"],
    "attnres_block": ["model.use_attnres=true", "model.attnres.block_size=3"],
    "injection": ["model.use_injection=true"],
    "delta_attnres": ["model.use_delta_attnres=true"],
    "laurel": ["model.use_laurel=true"],
    "denseformer": ["model.use_denseformer=true"],
    "value_residual": ["model.use_value_residual=true"],
    "mhc": ["model.use_mhc=true"],
}


def tiny_model(arm: str, *extra: str) -> LoopedByteLM:
    cfg = compose_config(["preset=tiny", "model.max_iter=3", *ARM_OVERRIDES[arm], *extra])
    return LoopedByteLM(cfg.model, seed=0)


def batch(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(seed))


def perturb_arm(model: LoopedByteLM, arm: str) -> None:
    """Move the arm's own parameters off their initial values: ReZero's alpha, GR's bias, AttnRes's queries (one
    kind each, so that a kind the arm ignores shows); every parameter of the other arms."""
    """Move the arm's own parameters off their initial values (ReZero's alpha, GR's and mHC's biases, AttnRes's
    queries)."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        if arm == "rezero":
            model.arm.alpha.add_(0.5 + torch.rand(model.arm.alpha.shape, generator=gen))
        elif arm in ("gr", "mhc"):
            model.arm.bias.add_(torch.randn(model.arm.bias.shape, generator=gen))
        elif arm.startswith("attnres"):
            model.arm.queries.add_(torch.randn(model.arm.queries.shape, generator=gen))
        else:
            for p in model.arm.parameters():
                p.add_(0.5 * torch.randn(p.shape, generator=gen))


def trained_a_little(model: LoopedByteLM) -> None:
    """ReZero at alpha=0 is the identity; give every arm non-trivial sublayer outputs first."""
    with torch.no_grad():
        for p in model.attn.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.05)


@pytest.mark.parametrize("arm", list(ARM_OVERRIDES))
def test_arm_parameters_move_the_logits_at_every_depth(arm: str):
    model = tiny_model(arm)
    trained_a_little(model)
    if arm == "rezero":  # at alpha=0 the sublayers are invisible; start from a live ReZero
        with torch.no_grad():
            model.arm.alpha.fill_(0.3)
    idx = batch()
    with torch.no_grad():
        before = model(idx)
        perturb_arm(model, arm)
        after = model(idx)
    assert len(before) == len(after) == 3
    for k, (b, a) in enumerate(zip(before, after), start=1):
        moved = (a - b).abs().max().item()
        # float32 logits of size O(1): a perturbation of O(1) arm parameters moves them by >> 1e-4;
        # a dead arm moves them by exactly 0.
        assert moved > 1e-4, f"{arm}: readout after iteration {k} did not move (deviation={moved:.3e}, bound=>1e-4)"


@pytest.mark.parametrize("arm", list(ARM_OVERRIDES))
def test_selected_arm_counts_ran_equal_asked_and_others_zero(arm: str):
    model = tiny_model(arm)
    model(batch())
    model(batch(1), depth=2)
    name = "attnres" if arm.startswith("attnres") else arm
    snap = model.counters.snapshot()
    assert snap[f"{name}_asked"] == 2 * 3 + 2 * 2  # two sublayers per iteration, depths 3 then 2
    assert snap[f"{name}_ran"] == snap[f"{name}_asked"]
    for other in set(ARMS) - {name}:  # every registered arm, a plugin's too
        assert snap[f"{other}_ran"] == snap[f"{other}_asked"] == 0


def test_attnres_inputs_at_init_are_the_plain_mean_of_their_sources():
    """Zero pseudo-queries: every sublayer input is the uniform average of the sources so far."""
    model = tiny_model("attnres")
    trained_a_little(model)
    idx = batch()
    sources = [model.embed(idx).detach()]
    inputs: list[torch.Tensor] = []

    def record(module, args, output):
        inputs.append(args[0].detach())
        sources.append(output.detach())

    handles = [model.attn.register_forward_hook(record), model.mlp.register_forward_hook(record)]
    with torch.no_grad():
        model(idx)
    for h in handles:
        h.remove()
    for layer, h in enumerate(inputs):
        expected = torch.stack(sources[: layer + 1]).double().mean(0)
        dev = (h.double() - expected).abs().max().item()
        # float32 softmax of equal scores is exactly uniform up to rounding: ~1e-7 relative on O(1) values.
        assert dev < 1e-5, (
            f"layer {layer + 1} input is not the mean of its {layer + 1} sources (deviation={dev:.3e}, bound=1e-5)"
        )


@pytest.mark.parametrize("arm", ["attnres", "attnres_block"])
def test_attnres_readout_after_iteration_k_depends_on_iteration_k(arm: str):
    """Perturbing iteration k's MLP output must move readout k (the readout contains iteration k's work)."""
    model = tiny_model(arm)
    trained_a_little(model)
    idx = batch()
    with torch.no_grad():
        base = model(idx)
    for k in range(3):
        moved = readouts_with_mlp_bumped(model, idx, k)
        dev = (moved[k] - base[k]).abs().max().item()
        assert dev > 1e-4, f"readout {k + 1} ignores iteration {k + 1}'s MLP output (deviation={dev:.3e}, bound=>1e-4)"
        if k > 0:
            same = (moved[k - 1] - base[k - 1]).abs().max().item()
            assert same == 0.0, f"readout {k} moved when only iteration {k + 1} changed (deviation={same:.3e}, bound=0)"


def test_random_depth_counts_the_depth_that_ran():
    model = tiny_model("gr")
    depths = [1, 3, 2]
    for d in depths:
        model(batch(), depth=d)
    assert model.counters.ran["gr"] == model.counters.asked["gr"] == 2 * sum(depths)


def test_counters_keep_counting_under_torch_compile():
    """A Python side effect in a compiled region runs once at trace time; the counters are in-graph adds and
    must count every call. ``eager`` backend: Dynamo's tracing is what is at stake, not codegen (inductor's
    takes minutes on 2 cores); the whole-model test below adds AOT autograd's functionalisation (and counts its
    own arms, which this loop leaves out)."""
    for arm in ("attnres", "gr", "injection", "laurel"):
        model = tiny_model(arm)
        compiled = torch.compile(model, backend="eager")
        for i in range(3):
            compiled(batch(i))
        name = "attnres" if arm.startswith("attnres") else arm
        ran, asked = model.counters.ran[name], model.counters.asked[name]
        assert ran == asked == 3 * 2 * 3, (
            f"{arm}: ran={ran} asked={asked} after 3 compiled calls (deviation={3 * 2 * 3 - min(ran, asked)}, bound=0)"
        )


@pytest.mark.parametrize("arm", ["rezero", "attnres_block", "delta_attnres", "denseformer"])
def test_whole_model_compiles_as_one_graph_with_eager_losses_and_counts(arm: str):
    """``train.compile``: the whole forward is one graph (``fullgraph``: a graph break is an error), its loss and
    gradients are eager's, and N training calls give N counts, as eager does."""
    torch._dynamo.reset()  # the other tests' graphs of the same forward count against the recompile limit
    model = tiny_model(arm)
    trained_a_little(model)
    with torch.no_grad():
        if arm == "rezero":
            model.arm.alpha.fill_(0.3)
        elif arm == "denseformer":  # its state is a Python list of the block outputs: traced, not a break
            perturb_arm(model, arm)
        else:
            model.arm.queries.copy_(torch.randn(model.arm.queries.shape, generator=torch.Generator().manual_seed(6)))
    compiled = model.compile_whole(backend="aot_eager")
    name = "attnres" if arm.startswith("attnres") else arm
    for depth in (3, 2):
        counts = compiled_against_eager(model, compiled, name, batch, (depth, depth))
        want = 2 * 2 * depth
        worst = max(abs(c - want) for run in counts for c in run)
        assert worst == 0, f"depth {depth}: (ran, asked) eager, compiled = {counts} (deviation={worst}, bound=0)"


def test_counting_is_paused_during_evaluation():
    model = tiny_model("rezero")
    with model.counters.paused():
        model(batch())
    assert model.counters.asked["rezero"] == model.counters.ran["rezero"] == 0


def test_two_models_in_one_process_each_count_their_own_iterations():
    """The counters are each model's own (an A/B run's runs, a test's reference model share a process):
    forwards of one model never show in another's counts, and pausing one model pauses only its own."""
    rezero, gr = tiny_model("rezero"), tiny_model("gr", "model.max_iter=2")
    for i in range(3):
        rezero(batch(i))  # depth 3: 6 aggregations a call
    gr(batch(0), depth=1)
    with rezero.counters.paused():  # pausing rezero's counters leaves gr's counting
        rezero(batch(0))
        gr(batch(1))  # depth 2: 4 aggregations
    want = {"rezero": {"rezero_ran": 18, "rezero_asked": 18, "gr_ran": 0, "gr_asked": 0},
            "gr": {"rezero_ran": 0, "rezero_asked": 0, "gr_ran": 2 + 4, "gr_asked": 2 + 4}}
    for name, model in (("rezero", rezero), ("gr", gr)):
        snap = model.counters.snapshot()
        got = {k: snap[k] for k in want[name]}
        off = sum(abs(got[k] - want[name][k]) for k in got)
        assert off == 0, f"{name}: counted {got}, its own forwards give {want[name]} (deviation={off}, bound=0)"


def test_weight_decay_spares_gains_biases_scalars_and_queries():
    for arm in ARM_OVERRIDES:
        model = tiny_model(arm)
        decay_group, no_decay_group = model.param_groups(0.1)
        decayed = {id(p) for p in decay_group["params"]}
        for name, p in model.named_parameters():
            # the injection's B is a matrix its source keeps out of decay (decay would pull it to 0, not its init I)
            spared = p.ndim < 2 or "quer" in name or name.endswith(("bias", "gains", "alpha")) or name == "arm.B"
            assert (id(p) not in decayed) == spared, f"{arm}: {name} decay={id(p) in decayed}"


def test_same_seed_gives_the_same_initial_weights_across_arms():
    rezero, gr = tiny_model("rezero"), tiny_model("gr")
    assert torch.equal(rezero.attn.qkv.weight, gr.attn.qkv.weight)
    assert torch.equal(rezero.embed.weight, gr.embed.weight)


@pytest.mark.parametrize("block_size", [1, 2, 3, 4])
def test_block_two_phase_eval_gives_the_direct_forms_logits(block_size: int):
    """Eval runs Algorithm 1 (two-phase), training the direct Eq. 6 form: same logits, in float64."""
    model = tiny_model("attnres_block", f"model.attnres.block_size={block_size}").double()
    trained_a_little(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        model.arm.queries.copy_(torch.randn(model.arm.queries.shape, generator=gen))
        # gains off 1: a two-phase path that dropped or mis-sliced a gain would otherwise agree exactly
        model.arm.gains.copy_(1 + 0.5 * torch.randn(model.arm.gains.shape, generator=gen))
        idx = batch()
        model.train()
        direct = model(idx)
        model.eval()
        assert model.arm.uses_two_phase() == (block_size is not None)
        two_phase = model(idx)
    for k, (a, b) in enumerate(zip(direct, two_phase), start=1):
        dev = (a - b).abs().max().item()
        # float64: the merge reorders a handful of exp/sum terms; ~1e-16 relative on O(1) logits.
        assert dev < 1e-12, f"readout {k}: two-phase differs from direct (deviation={dev:.3e}, bound=1e-12)"


def test_block_two_phase_is_what_eval_runs():
    """The equivalence above would be vacuous if eval never took the two-phase path."""
    model = tiny_model("attnres_block").eval()
    calls = {"n": 0}
    original = model.arm._two_phase_input

    def counting(state, slot):
        calls["n"] += 1
        return original(state, slot)

    model.arm._two_phase_input = counting
    with torch.no_grad():
        model(batch())
    assert calls["n"] == 2 * 3


def test_input_dependent_query_starts_as_the_static_query_and_its_projection_moves_the_logits():
    """q_l = w_l + U_l RMSNorm(v_last), U_l zero-initialised (our reading of the paper's §5.3)."""
    static = tiny_model("attnres")
    dynamic = tiny_model("attnres", "model.attnres.query=input")
    trained_a_little(static)
    trained_a_little(dynamic)
    idx = batch()
    with torch.no_grad():
        a, b = static(idx), dynamic(idx)
        for k, (x, y) in enumerate(zip(a, b), start=1):
            dev = (x - y).abs().max().item()
            # identical arithmetic up to adding U v = 0 to the query: exact zeros, so bit-identical logits
            assert dev == 0.0, f"readout {k}: input query at init differs from static (deviation={dev:.3e}, bound=0)"
        dynamic.arm.query_proj.add_(0.5 * torch.randn(dynamic.arm.query_proj.shape,
                                                      generator=torch.Generator().manual_seed(2)))
        moved = dynamic(idx)
    for k, (x, y) in enumerate(zip(b, moved), start=1):
        dev = (x - y).abs().max().item()
        assert dev > 1e-4, f"readout {k}: U_l does not move the logits (deviation={dev:.3e}, bound=>1e-4)"


@pytest.mark.parametrize(("arm", "param"), [("gr", "gate_attn.weight"), ("gr", "gate_mlp.weight"),
                                            ("attnres", "gains"), ("attnres_block", "gains")])
def test_every_arm_parameter_tensor_reaches_the_logits(arm: str, param: str):
    """GR's input-dependent W is the whole GR - ReZero difference; the AttnRes key gains shape every score."""
    model = tiny_model(arm)
    trained_a_little(model)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        if arm.startswith("attnres"):  # at zero queries every score is 0 whatever the gain
            model.arm.queries.copy_(torch.randn(model.arm.queries.shape, generator=gen))
        idx = batch()
        before = model(idx)
        tensor = model.arm.get_parameter(param)
        tensor.add_(0.5 * torch.randn(tensor.shape, generator=gen))
        after = model(idx)
    moved = max((a - b).abs().max().item() for a, b in zip(before, after))
    assert moved > 1e-4, f"{arm}: {param} does not reach the logits (deviation={moved:.3e}, bound=>1e-4)"


def test_block_two_phase_eval_with_the_fused_merge_gives_the_direct_logits():
    """kernel=triton routes the eval-time Phase-2 merge through the fused merge kernel (interpreter on CPU)."""
    from dormouse.ops.attnres import resolve_kernel

    try:
        resolve_kernel("triton", torch.device("cpu"))
    except RuntimeError as exc:
        pytest.skip(f"fused kernels not runnable here: {exc}")
    cfg = compose_config(["preset=tiny", "model.max_iter=3", *ARM_OVERRIDES["attnres_block"]])
    model = LoopedByteLM(cfg.model, seed=0, kernel="triton")
    trained_a_little(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        model.arm.queries.copy_(torch.randn(model.arm.queries.shape, generator=gen))
        idx = batch()
        direct = model.train()(idx)
        two_phase = model.eval()(idx)
    for k, (a, b) in enumerate(zip(direct, two_phase), start=1):
        dev = (a - b).abs().max().item()
        # float32 throughout: online vs two-pass softmax differ by a few ulps of O(1) logits; 1e-4 is ~100x that
        assert dev < 1e-4, f"readout {k}: fused two-phase differs from direct (deviation={dev:.3e}, bound=1e-4)"


def test_the_arm_registry_names_one_class_and_one_switch_per_arm():
    """An arm is one class: defining it registers it, and the schema grows its switch from the registry. Every
    registered arm but the default has exactly one switch, and each switch alone selects its own class."""
    from dataclasses import fields

    from dormouse.arms.registry import ARMS, arm_classes, arm_switch, default_arm
    from dormouse.config.schema import ModelConfig

    assert list(arm_classes()) == list(ARMS) and [n for n, c in arm_classes().items() if c.default] == ["rezero"]
    switches = {f.name for f in fields(ModelConfig) if f.name.startswith("use_")}
    assert switches == {arm_switch(a) for a in ARMS if a != default_arm()}
    for arm in ARMS:
        overrides = [] if arm == default_arm() else [f"model.{arm_switch(arm)}=true"]
        model = LoopedByteLM(compose_config(["preset=tiny", *overrides]).model, seed=0)
        assert type(model.arm) is arm_classes()[arm] and model.arm.name == arm


class _ElementwiseSublayer(torch.nn.Module):
    """A planted sublayer ``2 tanh(c h)``: elementwise, so autocast leaves it in float32."""

    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return 2 * torch.tanh(self.c * h)


@pytest.mark.parametrize("block_size", [2, 3])
def test_block_two_phase_eval_under_autocast_reads_in_float32(block_size: int):
    """CPU bf16 autocast stands in for CUDA's: `evaluate` (Block -> Algorithm 1) under autocast reads what the
    direct Eq. 6 path reads in float32, and its bpb differs only by the head's bf16 rounding.

    The sublayers are planted elementwise functions, so under autocast the only autocast-eligible ops left
    are the reads (which must leave autocast) and the head's matmul: every deviation is then either the
    read's own arithmetic or bf16 storage of the logits.
    """
    from dormouse.data import bits_per_byte
    from dormouse.train.loop import evaluate

    model = tiny_model("attnres_block", f"model.attnres.block_size={block_size}")
    model.sublayers = [_ElementwiseSublayer(3.0), _ElementwiseSublayer(-2.0)]
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        model.arm.queries.copy_(3 * torch.randn(model.arm.queries.shape, generator=gen))  # |s| up to ~20
        model.arm.gains.copy_(1 + 0.5 * torch.randn(model.arm.gains.shape, generator=gen))
    x = torch.randint(0, 256, (4, 32), generator=gen)
    y = torch.randint(0, 256, (4, 32), generator=gen)
    head_in: list[torch.Tensor] = []
    hook = model.final_norm.register_forward_pre_hook(lambda _m, a: head_in.append(a[0].float()))
    try:
        with torch.no_grad():
            direct = model.train()(x)  # the direct Eq. 6 form, float32, no autocast
        want_in, head_in[:] = list(head_in), []
        bf16 = evaluate(model, x, y, 2, torch.device("cpu"), lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    finally:
        hook.remove()
    n_read = model.max_iter  # evaluate ran two batches of 2: regroup its captured head inputs per readout
    got_in = [torch.cat([head_in[b * n_read + k] for b in range(2)]) for k in range(n_read)]
    # The read's own arithmetic, float32 both ways (Alg. 1's merge vs one softmax: a reordering): a score
    # carries ~d * 2^-24 |s| ~ 1e-4 at |s| ~ 20, d = 64 (worst case; ~1e-5 typical), i.e. that much relative
    # on the weights and on h (|h| <= 2); the tanh sublayers amplify a deviation by at most 2c = 6 per
    # layer. 1e-3 covers a worst-case score error carried through one layer (measured <= 1.2e-5). A bf16
    # score carries 2^-8 |s| ~ 0.08: the inputs then move by O(0.01 .. 1) (measured 4.1e-2).
    for k, (g, w) in enumerate(zip(got_in, want_in), start=1):
        dev = (g - w).abs().max().item()
        assert dev <= 1e-3, (
            f"readout {k}: autocast eval read differs from the float32 direct read (deviation={dev:.3e}, bound=1e-3)"
        )
    # bpb: the head's F.linear under autocast rounds its input, its weight and its output to bf16 (2^-9
    # relative each): |dlogit_j| <= 3 * 2^-9 * sum_k |n_k| |W_jk| per token, plus the read term above through
    # the final norm (gain 1). A per-token CE moves by <= 2 max_j |dlogit_j| (log-softmax is 2-Lipschitz in
    # the max norm), so bpb moves by <= mean_t 2 max_j |dlogit_tj| / ln 2 (~0.016 here; measured <= 6e-5).
    weight = model.embed.weight.detach().abs()
    for k in range(n_read):
        with torch.no_grad():
            n = model.final_norm(want_in[k]).abs()
        per_token = 3 * 2.0**-9 * (n @ weight.T).amax(dim=-1) + 1e-3 * weight.sum(dim=-1).max()
        bound = (2 * per_token).mean().item() / math.log(2)
        ce = F.cross_entropy(direct[k].reshape(-1, 256), y.reshape(-1)).item()
        dev = abs(bf16[f"bpb@{k + 1}"] - bits_per_byte(ce))
        assert dev <= bound, f"bpb@{k + 1} under autocast vs float32 direct: deviation={dev:.3e} bound={bound:.1e}"
