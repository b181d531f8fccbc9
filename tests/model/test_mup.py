"""µP (model.parametrization=mup): the coordinate check (activations and updates flat across width, at init and
after a few Adam steps, where the standard parametrisation's grow), each arm's own parameters' updates flat in the
measure their equations call for, µP equal to the standard parametrisation at its base width, and the training
loop applying each group's rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dormouse.arms.probes import LoopTrace
from dormouse.config.schema import compose_config
from dormouse.model.looped import LoopedByteLM

WIDTHS = (16, 32, 64)  # head dim 8 at every width (heads = width / 8: the head dim fixed, as the ladder fixes it)
BASE = ["model.mup_base_width=32", "model.mup_base_head_dim=8"]
STEPS, LR = 5, 1e-2  # a large rate and a few steps: what a wrong rule does shows within them
ARMS = ("prenorm", "rezero", "gr", "attnres", "delta_attnres", "mhc", "laurel", "denseformer", "injection",
        "value_residual")
# Which arm parameters contract the width into their output (written from each arm's equation, not from its
# declaration): their update, summed along the width, must stay flat; every other width-sized parameter is read
# elementwise and its entries' update must.
CONTRACTS_WIDTH = {"gr": ("gate_attn.weight", "gate_mlp.weight"),  # W n(x), d x d
                   "attnres": ("queries",), "delta_attnres": ("queries",),  # w_l . k over d
                   "mhc": ("weight", "head_weight"),  # phi x over the n d flattened streams
                   "laurel": ("lr_down_weight",),  # A_s x, r x d
                   "injection": ("B",)}  # B e, d x d


def model(arm: str, width: int, parametrization: str) -> LoopedByteLM:
    switch = [] if arm == "rezero" else [f"model.use_{arm}=true"]
    cfg = compose_config(["preset=tiny", f"model.d_model={width}", f"model.n_heads={width // 8}", "model.max_iter=2",
                          f"model.parametrization={parametrization}", *BASE, *switch])
    return LoopedByteLM(cfg.model, seed=1)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (2, 16), generator=g), torch.randint(0, 256, (2, 16), generator=g)


def _coordinates(m: LoopedByteLM, x: torch.Tensor) -> list[torch.Tensor]:
    """Every sublayer's input and output and the last readout's logits."""
    trace = LoopTrace()
    with torch.no_grad():
        logits = m(x, readouts="last", trace=trace)[-1]
    return [h.clone() for h in trace.inputs] + [o.clone() for o in trace.outputs] + [logits]


def _train(m: LoopedByteLM, x: torch.Tensor, y: torch.Tensor) -> None:
    """STEPS AdamW steps, each group's rate scaled as the training loop scales it."""
    opt = torch.optim.AdamW(m.param_groups(0.0), lr=LR)
    for group in opt.param_groups:
        group["lr"] = LR * group.get("lr_scale", 1.0)
    for _ in range(STEPS):
        opt.zero_grad()
        F.cross_entropy(m(x, readouts="last")[-1].reshape(-1, 256), y.reshape(-1)).backward()
        opt.step()


def _slope(values: list[float]) -> float:
    """The log-log slope of a measure against the width: 0 flat, +1 growing in proportion."""
    return float(np.polyfit(np.log(WIDTHS), np.log(values), 1)[0])


def coordinate_slopes(arm: str, parametrization: str) -> dict[str, list[float]]:
    """Per coordinate, the slope across WIDTHS of its RMS at init ("init") and of its change after STEPS ("update");
    per arm parameter with a width dimension, the slope of its update in its equation's measure ("arm")."""
    x, y = _batch()
    init, update, arm_updates = [], [], []
    for width in WIDTHS:
        m = model(arm, width, parametrization)
        before = _coordinates(m, x)
        arm_before = {n: p.detach().clone() for n, p in m.arm.named_parameters()}
        _train(m, x, y)
        after = _coordinates(m, x)
        init.append([c.pow(2).mean().sqrt().item() for c in before])
        update.append([(b - a).pow(2).mean().sqrt().item() for a, b in zip(before, after)])
        arm_updates.append({n: _update_measure(arm, n, p.detach() - arm_before[n], width)
                            for n, p in m.arm.named_parameters() if width in p.shape or width * 4 in p.shape})
    names = list(arm_updates[0])
    return {"init": [_slope([row[j] for row in init]) for j in range(len(init[0]))],
            "update": [_slope([row[j] for row in update]) for j in range(len(update[0]))],
            "arm": [_slope([row[n] for row in arm_updates]) for n in names], "arm_names": names}  # type: ignore[dict-item]


def _update_measure(arm: str, name: str, delta: torch.Tensor, width: int) -> float:
    """A width-contracting parameter's update summed along its width dimensions (the change of its output on an
    aligned input of unit entries); any other's mean entry."""
    if name in CONTRACTS_WIDTH.get(arm, ()):
        dims = [i for i, s in enumerate(delta.shape) if s in (width, 4 * width)]
        return max(delta.abs().sum(dim=i).mean().item() for i in dims)
    return delta.abs().mean().item()


@pytest.fixture(scope="module")
def mup_slopes() -> dict[str, dict[str, list[float]]]:
    torch.manual_seed(0)
    with torch.inference_mode(False):
        return {arm: coordinate_slopes(arm, "mup") for arm in ARMS}


@pytest.mark.parametrize("arm", ARMS)
def test_mup_keeps_every_coordinate_flat_across_width_at_init_and_after_steps(
        arm: str, mup_slopes: dict[str, dict[str, list[float]]]) -> None:
    """Slope bounds, from the standard parametrisation's slopes on the same check (init up to +1.5 from its
    width-blind 0.02 init, updates up to +1.8) and µP's finite-width drift (updates -0.7 to +0.36 at widths 16-64):
    a hidden coordinate's RMS at init within ±0.25, every update within (-0.8, +0.5): not growing with the width
    (µP's failure), not vanishing like 1/width (every rate divided by m: embedding -0.88, logits -1.03). The logits
    at init fall as 1/√width (output multiplier 1/m over a sum of width terms: slope -0.5, measured -0.45), which
    µP intends."""
    s = mup_slopes[arm]
    hidden_init = s["init"][:-1]
    assert max(abs(v) for v in hidden_init) < 0.25, hidden_init
    assert all(-0.8 < v < 0.5 for v in s["update"]), s["update"]
    assert -0.6 < s["init"][-1] < -0.3, s["init"][-1]


@pytest.mark.parametrize("arm", ARMS)
def test_mup_keeps_each_arm_parameters_update_flat_in_its_equations_measure(
        arm: str, mup_slopes: dict[str, dict[str, list[float]]]) -> None:
    s = mup_slopes[arm]
    bad = {n: round(v, 2) for n, v in zip(s["arm_names"], s["arm"]) if not -0.8 < v < 0.5}
    assert not bad, f"{arm}: the update of these parameters grows or vanishes with width (slope): {bad}"


def test_the_standard_parametrization_fails_the_coordinate_check() -> None:
    """The check can go red: the standard parametrisation's activations and updates grow with width."""
    s = coordinate_slopes("prenorm", "standard")
    assert max(s["init"][:-1]) > 0.5 and max(s["update"]) > 1.0, s


def test_mup_at_its_base_width_is_the_standard_parametrization() -> None:
    """At d_model = base width and head dim = base head dim every µP factor is 1: the same logits, bit for bit, before
    and after training steps, for an arm with every role (AttnRes: hidden, readout and vector weights)."""
    x, y = _batch()
    models = {p: model("attnres", 32, p) for p in ("standard", "mup")}
    for m in models.values():
        _train(m, x, y)
    with torch.no_grad():
        a, b = (m(x, readouts="last")[-1] for m in models.values())
    assert torch.equal(a, b)


def test_mup_refuses_an_arm_parameter_without_a_role(monkeypatch: pytest.MonkeyPatch) -> None:
    from dormouse.arms.gr import GatedResidual
    from dormouse.errors import StartRefused

    monkeypatch.setattr(GatedResidual, "mup_roles", {"bias": "vector"})
    with pytest.raises(StartRefused, match="declares no µP role for its parameter 'gate_attn.weight'"):
        model("gr", 64, "mup").param_groups(0.1)


def test_the_training_loop_runs_each_group_at_its_mup_rate(tmp_path: Path) -> None:
    """A run at twice the base width trains its hidden weights at half the rate: the checkpoint's optimizer groups
    hold rate x lr_scale (the loop, not the test, applied it)."""
    from dormouse.train.loop import train

    cfg = compose_config(["preset=tiny", "model.d_model=64", "model.n_heads=8", "model.parametrization=mup", *BASE,
                          "train.steps=2", "train.warmup=0", "train.lr=0.004", "train.min_lr_ratio=1.0",
                          "train.eval_every=2", "train.ckpt_every=2", "train.device=cpu", "logging.progress=off",
                          f"run.dir={tmp_path}", "run.name=r"])
    train(cfg)
    ckpt = torch.load(next((tmp_path / "r" / "checkpoints").glob("*.pt")), weights_only=False)
    groups = ckpt["optimizer"]["param_groups"]
    assert sorted((g["lr_scale"], round(g["lr"], 12)) for g in groups) == sorted(
        (g["lr_scale"], round(0.004 * g["lr_scale"], 12)) for g in groups)
    assert {g["lr_scale"] for g in groups} == {0.5, 1.0}


def test_mup_attention_scales_the_logits_by_one_over_the_head_dimension() -> None:
    """Head dim 32 against a base head dim of 8: attention's logits scaled by √8/32 (µP's 1/d_head, equal to 1/√d_head
    at the base), against a float64 softmax attention written from the equation. fp32 SDPA against fp64 at these
    sizes differs by ~1e-7 relative; 1e-5 is far inside the 1/√32 vs √8/32 gap (a factor 2 in the logits)."""
    cfg = compose_config(["preset=tiny", "model.d_model=64", "model.n_heads=2", "model.parametrization=mup", *BASE])
    m = LoopedByteLM(cfg.model, seed=1)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 6, 32, generator=g) for _ in range(3))
    out = m.attn.attend(q, k, v)
    logits = (q.double() @ k.double().transpose(-1, -2)) * (8 ** 0.5 / 32)
    logits = logits.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    y = (logits.softmax(-1) @ v.double()).transpose(1, 2).reshape(1, 6, 64)
    ref = y @ m.attn.proj.weight.double().T
    assert torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-6)
