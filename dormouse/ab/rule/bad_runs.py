"""The registered bad-run policy (docs/ab-protocol.md, "The bad-run policy"): at a look with n replicates per arm, a
replicate whose arm or baseline run ended above ``bad_run_ceiling`` is replaced by the next spare replicate (``n_max
+ 1``, …, the same seed streams), at most ``bad_run_replacements`` times per arm. :func:`assign` is the one rule,
called by the looks and the Monte-Carlo test alike; it walks the replicates in order, so a later look extends the
earlier assignment and nothing depends on Δ. A diverged run is not bad but incomplete: its arm is invalid."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# A replicate's state for the rule: True bad, False good, None not known yet (its spare run has not run).
BadOf = Callable[[int], "bool | None"]


def is_bad(final_bpb: float, ceiling: float | None) -> bool:
    """A run whose final bpb (non-finite too) ended above the registered ceiling; never without one."""
    return ceiling is not None and (not math.isfinite(final_bpb) or final_bpb > ceiling)


@dataclass(frozen=True)
class Assignment:
    """One arm's replicates at one look. ``used``: the replicate each slot 1..n uses; ``replacements``: (replaced,
    spare) in order; ``spares``: every spare run; ``needs``: the next spare whose runs are unknown (None when
    complete)."""

    used: tuple[int, ...]
    replacements: tuple[tuple[int, int], ...]
    spares: tuple[int, ...]
    needs: int | None = None


def assign(n: int, n_max: int, replacements: int, bad: BadOf) -> Assignment:
    """The rule at ``n`` replicates per arm, maximum ``n_max``, at most ``replacements`` per arm. ``bad(r)``:
    replicate r's arm or baseline run is bad (None: a spare not run yet)."""
    used: list[int] = []
    made: list[tuple[int, int]] = []
    spares: list[int] = []
    for slot in range(1, n + 1):
        replicate = slot
        while len(made) < replacements and bad(replicate):
            spare = n_max + 1 + len(made)
            if bad(spare) is None:
                return Assignment(tuple(used), tuple(made), tuple(spares), needs=spare)
            made.append((replicate, spare))
            spares.append(spare)
            replicate = spare
        used.append(replicate)
    return Assignment(tuple(used), tuple(made), tuple(spares))
