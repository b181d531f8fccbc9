"""Under a registered bad-mode marker, a tune lr one seed of which falls in a bad mode (its early bpb far above the
lr's other seeds) is marked and dropped from the choice: its mean would carry the bad mode into the lr choice."""

from __future__ import annotations

from pathlib import Path

from dormouse.ab.rule.bad_mode import Marker, bad_mode_lrs
from dormouse.ab.runs.records import RunRecord
from dormouse.ab.tune.rule import Bracketing, next_step

MARKER = Marker(at_fraction=0.5, margin=0.1)


def run(lr: float, seed: int, early: float, final: float) -> RunRecord:
    """A 100-step tune run with evals at 50 and 100."""
    rows = [{"step": 50, "bpb": early}, {"step": 100, "bpb": final}]
    return RunRecord("gr", seed, Path(f"tune-gr-lr{lr}-s{seed}"), "gr", 100, rows=rows, final=rows[-1])


def test_an_lr_with_a_seed_in_a_bad_mode_is_marked_from_its_own_seeds_median() -> None:
    """At 2e-3 the seeds read 2.50, 2.52 and 2.80 at step 50: the median 2.52, the third 0.28 above it. At 4e-3 the
    lr is simply worse (2.90 ± 0.01) and its seeds agree with each other: not a bad mode."""
    by_lr = {2e-3: [run(2e-3, 1, 2.50, 2.00), run(2e-3, 2, 2.52, 2.01), run(2e-3, 3, 2.80, 2.05)],
             4e-3: [run(4e-3, s, 2.90 + 0.01 * s, 2.3) for s in (1, 2, 3)]}
    assert bad_mode_lrs(by_lr, MARKER) == frozenset({2e-3})
    assert bad_mode_lrs(by_lr, None) == frozenset()
    assert bad_mode_lrs({2e-3: by_lr[2e-3][2:]}, MARKER) == frozenset()  # one seed: no median to stand out from


def test_a_dropped_lr_is_never_chosen_and_the_choice_says_so() -> None:
    rule = Bracketing(grid=(1e-3, 2e-3, 4e-3), replicates=3)
    values = {(lr, j): v for lr, v in ((1e-3, 2.10), (2e-3, 2.02), (4e-3, 2.30)) for j in range(3)}
    assert next_step(rule, values).choice.lr == 2e-3
    choice = next_step(rule, values, frozenset({2e-3})).choice
    assert choice.lr == 1e-3 and choice.bad_mode_lrs == (2e-3,)
    assert choice.to_dict()["bad_mode_lrs"] == [2e-3]
    every = next_step(rule, values, frozenset({1e-3, 2e-3, 4e-3})).choice  # all dropped: the plain rule, all marked
    assert every.lr == 2e-3 and every.bad_mode_lrs == (1e-3, 2e-3, 4e-3)
