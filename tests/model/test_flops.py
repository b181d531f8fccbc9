"""The FLOP count a budget matches: the block's matmuls are what torch's own counter counts, and each built-in arm's
own work is the hand-counted value (a multiply-add is 2 FLOPs)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dormouse.arms import builtin  # noqa: F401  (the arm classes the model builds)
from dormouse.model.flops import flop_count, training_cost
from dormouse.model.looped import LoopedByteLM
from dormouse.train.run_config import load_run_config

# d_model 32, 2 iterations, 32-byte sequences, every readout trained: the smoke registration's model
SMOKE = ["preset=tiny", "model.d_model=32", "model.n_heads=2", "model.max_iter=2", "data.seq_len=32",
         "train.batch_size=4"]
D, DEPTH, T = 32, 2, 32


@pytest.mark.parametrize("arm", [["model.use_prenorm=true"], ["model.use_gr=true"], []])
def test_the_forward_count_is_the_matmuls_torchs_counter_counts_plus_causal_attention(arm: list[str]) -> None:
    """torch's FlopCounterMode counts every matmul of the forward (the projections, SwiGLU, readouts, GR's gates)
    but not CPU attention; causal attention's scores and mix over T/2 keys on average add 2Td per iteration."""
    cfg = load_run_config([*SMOKE, *arm])
    model = LoopedByteLM(cfg.model)
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 256, (4, T)))
    counted = counter.get_total_flops() / (4 * T) + DEPTH * 2 * T * D
    ours = flop_count(cfg)
    assert ours.block + ours.arm == counted


@pytest.mark.parametrize("arm, own", [
    (["model.use_prenorm=true"], 0),
    ([], 0),  # ReZero: a scalar multiply-add per channel
    # 2 slots x 2 iterations, each a 32 x 32 gate product: 4 x 2 x 32^2
    (["model.use_gr=true"], 8192),
    # Full: the 4 slot reads see 1, 2, 3, 4 sources, the 2 readouts 3 and 5: 18 sources x 4d
    (["model.use_attnres=true"], 2304),
    # Block of 2: the slot reads see 1, 2, 2, 3 sources, the readouts 2 and 3: 13 x 4d
    (["model.use_attnres=true", "model.attnres.block_size=2"], 1664),
    # Full with input-dependent queries: 2304 plus 6 reads x 2 x 32^2
    (["model.use_attnres=true", "model.attnres.query=input"], 14592),
    # the last readout only: slot reads 1 + 2 + 3 + 4 and one readout of 5, 15 x 4d
    (["model.use_attnres=true", "train.readout=last"], 1920),
])
def test_each_builtin_arms_own_flops_are_the_hand_counted_values(arm: list[str], own: int) -> None:
    count = flop_count(load_run_config([*SMOKE, *arm]))
    assert count.arm == own and count.arm_counted


def test_the_block_per_token_is_the_hand_counted_value_and_training_triples_it() -> None:
    """SwiGLU hidden 96 at d 32: per iteration 2(4·32² + 3·32·96) + 2·32·32 = 28672; two readouts 2·256·32 each."""
    cfg = load_run_config([*SMOKE, "model.use_prenorm=true", "train.steps=150"])
    assert flop_count(cfg).block == 2 * 28672 + 2 * 16384
    cost = training_cost(cfg)
    assert cost["flops_per_step"] == 3 * 90112 * 128 and cost["flops"] == 150 * 3 * 90112 * 128


def test_a_random_depth_count_is_the_mean_over_the_depths_the_loop_draws() -> None:
    """Depth 1: 14336 + one readout 16384; depth 2: 90112. GR's gates: 4096 and 8192."""
    cfg = load_run_config([*SMOKE, "model.use_gr=true", "model.random_depth=true"])
    count = flop_count(cfg)
    assert count.block == (28672 + 16384 + 90112) / 2 and count.arm == (4096 + 8192) / 2


@pytest.mark.parametrize("arm, width, tie", [("prenorm", 64, True), ("gr", 96, True), ("attnres", 32, False),
                                             ("mhc", 48, True)])
def test_the_shared_parameter_count_is_torchs_count_less_the_arms(arm: str, width: int, tie: bool) -> None:
    """The analytic count of the weights every arm shares (a width ladder's budget rule reads it without torch)
    against torch's count of the built model's tensors."""
    from dormouse.config.schema import compose_config
    from dormouse.model.shape import shared_params

    cfg = compose_config(["preset=tiny", f"model.d_model={width}", f"model.n_heads={width // 16}",
                          f"model.tie_head={str(tie).lower()}", f"model.use_{arm}=true"])
    counts = LoopedByteLM(cfg.model).param_counts()
    assert shared_params(width, cfg.model.mlp_hidden, tie) == counts["params"] - counts["arm_params"]
