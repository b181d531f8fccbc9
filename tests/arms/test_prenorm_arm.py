"""The plain pre-norm residual arm, ``x <- x + f(x)`` (dormouse.arms.prenorm),
against independent oracles.

* The state is the plain sum: every sublayer's input (hooked on the model's own forward) equals the embedding
  plus the earlier sublayer outputs, summed in float64 from the hooked values.
* Its counters move with the output: ran = asked = 2 x depth, every other arm 0/0, and the update it
  absorbs reaches the logits: bumping iteration k's MLP output moves readout k and every later one.
* Its probe, the per-slot mean of ||f(x)|| / ||x||, equals a float64 recomputation on a float64 copy of the
  model (hooks, not the probe's trace).
* It is selected by its own switch and refused next to another.
"""

from __future__ import annotations

import copy

import torch

from dormouse.arms.probes import learned_values
from dormouse.config.schema import compose_config, validate
from dormouse.model.looped import LoopedByteLM
from dormouse.run.loglines import format_eval_line, parse_eval_line
from tests.helpers.model_hooks import hooked_trace, readouts_with_mlp_bumped


def prenorm(*extra: str) -> LoopedByteLM:
    cfg = compose_config(["preset=tiny", "model.max_iter=3", "model.use_prenorm=true", *extra])
    return LoopedByteLM(cfg.model, seed=0).eval()


def batch(seed: int = 0, n: int = 3) -> torch.Tensor:
    return torch.randint(0, 256, (n, 16), generator=torch.Generator().manual_seed(seed))


def test_prenorm_state_is_the_embedding_plus_every_earlier_update():
    model = prenorm()
    emb, ins, outs = hooked_trace(model, batch())
    assert type(model.arm).__name__ == "PreNormResidual" and not list(model.arm.parameters())
    total = emb.double()
    for s, (x, fx) in enumerate(zip(ins, outs)):
        # float32 running sum of <= 6 O(1) terms vs float64: a few ulps (~1e-7) of the state's scale; 1e-5 bound
        dev = (x.double() - total).abs().max().item() / total.abs().max().item()
        assert dev <= 1e-5, f"slot {s}: input is not emb + sum of earlier outputs (relative deviation={dev:.3e})"
        total = total + fx.double()


def test_prenorm_counts_ran_equal_asked_and_its_update_moves_every_later_readout():
    model = prenorm()
    with torch.no_grad():
        model(batch())
        model(batch(1), depth=2)
    snap = model.counters.snapshot()
    assert snap["prenorm_ran"] == snap["prenorm_asked"] == 2 * 3 + 2 * 2
    assert all(snap[k] == 0 for k in snap if not k.startswith("prenorm_"))
    idx = batch()
    with torch.no_grad():
        base = model(idx)
    for k in range(3):
        moved = readouts_with_mlp_bumped(model, idx, k)
        for j in range(3):
            dev = (moved[j] - base[j]).abs().max().item()
            if j >= k:  # the update of iteration k+1 is in the state every later readout reads
                assert dev > 1e-4, f"readout {j + 1} ignores iteration {k + 1}'s update (deviation={dev:.3e})"
            else:
                assert dev == 0.0, f"readout {j + 1} moved when only iteration {k + 1} changed ({dev:.3e})"


def test_prenorm_update_ratio_equals_a_float64_recomputation():
    model = prenorm()
    with torch.no_grad():  # larger, distinct updates per slot: ratios of O(0.1 .. 10)
        model.attn.proj.weight.mul_(30)
        model.mlp.down.weight.mul_(10)
    idx = batch(n=5)
    got = learned_values(model, idx, batch_size=2)  # three batches, one short: the mean is per token
    _, ins, outs = hooked_trace(copy.deepcopy(model).double(), idx)
    want = [float((fx.norm(dim=-1) / x.norm(dim=-1)).mean()) for x, fx in zip(ins, outs)]
    # float32 model vs float64 copy: O(1e-6) relative drift through <= 6 sublayers; 1e-4 relative is a wide margin
    # and a wrong definition (another norm, the state after the update, one slot's ratio for all) is off by O(0.1).
    dev = max(abs(g - w) / w for g, w in zip(got.update_ratio, want))
    assert dev <= 1e-4, f"update ratio: relative deviation={dev:.3e} bound=1e-4"
    assert max(want) - min(want) > 0.1  # the slots differ: the gate cannot pass on a constant
    assert got.summary() == ("ratio", sum(got.update_ratio) / 6)
    assert got.to_row() == {"probe/update_ratio": got.update_ratio}


def test_prenorm_is_refused_next_to_another_arm_naming_both_switches():
    lines = validate(compose_config(["model.use_prenorm=true", "model.use_gr=true"]))
    assert any("model.use_prenorm" in line and "model.use_gr" in line for line in lines), lines


def test_a_line_written_before_prenorm_existed_still_parses_and_a_prenorm_line_carries_its_counter():
    old = "eval step=400 tokens=1k loss=1 bpb=2 arm=gr rezero=0/0 gr=4/4 attnres=0/0"
    v = parse_eval_line(old)
    assert v["gr_ran"] == 4 and "prenorm_ran" not in v
    row = {**v, "arm": "prenorm", "gr_ran": 0, "gr_asked": 0, "tokens": 1000, "tok/s": 1.0, "lr": 1e-3,
           "depth": 2.0, "kernel": "none", "skipped": 0, "bpb@1": 2.0, "prenorm_ran": 4, "prenorm_asked": 4}
    assert "prenorm=4/4" in format_eval_line(row, 1)
