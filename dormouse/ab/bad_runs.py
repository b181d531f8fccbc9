"""The registered bad-run policy: which replicates an arm's analysis uses when some runs ended above the
registered ceiling (docs/ab-protocol.md, "The bad-run policy").

A registration may set ``bad_run_replacements: R`` (with a ``bad_run_ceiling``). At a look with n replicates
per arm, an arm's analysis uses its replicates 1..n, except that a replicate whose arm run or baseline run is
bad (final bpb above the ceiling) is replaced by the next *spare* replicate of the same seed streams
(``n_max + 1``, ``n_max + 2``, ...), in order, at most R times per arm over the whole comparison; past that a
bad run is used as it is. A spare that is itself bad is replaced by the next spare the same way (each
replacement counts). The A/A arm follows the same rule as an arm; a bad baseline run makes the replicate bad
for every arm paired with it, and the baseline runs a spare once for every arm that uses it.

:func:`assign` is the one rule: the looks (dormouse/ab/looks.py) and the Monte-Carlo test of the policy
(tests/ab/test_bad_run_policy.py) call it alike, so the simulation is the procedure. It walks the replicates
in their order, so the assignment at a later look extends the earlier one: a replicate replaced once stays
replaced at every later look, and the choice depends only on which runs crossed the ceiling, never on Δ.

A run that diverged (no finite final eval) is not a bad run here: it is an incomplete run, and its arm is
invalid (dormouse/ab/looks.py), as without the policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# A replicate's state for the rule: True bad, False good, None not known yet (its spare pair has not run).
BadOf = Callable[[int], "bool | None"]


def is_bad(final_bpb: float, ceiling: float | None) -> bool:
    """A run whose final bpb ended above the registered ceiling (a non-finite bpb too); never without one."""
    return ceiling is not None and (not math.isfinite(final_bpb) or final_bpb > ceiling)


@dataclass(frozen=True)
class Assignment:
    """One arm's replicates at one look under the policy.

    ``used``: the replicate each slot 1..n uses, in slot order (slot k's own replicate, or the spare that
    replaced it). ``replacements``: each replacement made, (replaced replicate, spare), in order; a spare that
    was itself replaced appears as both. ``spares``: every spare the arm ran (used or replaced). ``needs``: the
    next spare whose runs are not known yet (run the arm's and the baseline's, then ask again); None when the
    assignment is complete.
    """

    used: tuple[int, ...]
    replacements: tuple[tuple[int, int], ...]
    spares: tuple[int, ...]
    needs: int | None = None


def assign(n: int, n_max: int, replacements: int, bad: BadOf) -> Assignment:
    """The rule (module docstring) at a look with ``n`` replicates per arm, the registered maximum ``n_max``
    and at most ``replacements`` per arm. ``bad(r)``: replicate r's arm run or baseline run is bad (None: a
    spare not run yet); replicates 1..n must be known."""
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
