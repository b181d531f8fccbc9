"""Bad modes as a finding (docs/ab-protocol.md, "Bad modes"): a registered early marker, ``bad_mode: {at_fraction,
margin}``. A run is in a bad mode when its eval bpb at the first eval at or after ``at_fraction`` of its own steps lies
above its arm's median there (over every run the arm made that reached that eval) by more than ``margin``. Each arm's
count and rate come with a Clopper–Pearson interval, and the flagged runs with their init seeds, so a seed flagged in
several arms (shared initial weights) shows. Reported beside the verdict, never decided on, and apart from the bad-run
policy (:mod:`dormouse.ab.rule.bad_runs`), which replaces runs by their final bpb."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dormouse.ab.rule import stats
from dormouse.ab.runs.records import RunRecord, is_finite_number


@dataclass(frozen=True)
class Marker:
    """The registered marker: the share of a run's steps it is read at, and the margin above the arm's median."""

    at_fraction: float
    margin: float


def marker_step(steps: int, at_fraction: float) -> float:
    """The step the marker is read at: ``at_fraction`` of the run's own registered steps (under a FLOPs budget
    each arm has its own)."""
    return at_fraction * steps


def marker_row(rows: Sequence[Mapping[str, Any]], at_step: float) -> Mapping[str, Any] | None:
    """The first eval row at or after ``at_step`` (evals are sparse; the nearest one after is the earliest the
    run says anything at that point of its training), if its bpb is finite; else None."""
    for row in rows:
        if int(row["step"]) >= at_step:
            return row if is_finite_number(row.get("bpb")) else None
    return None


@dataclass(frozen=True)
class Flagged:
    """One run in a bad mode: its replicate, init seed, the eval step read, its bpb there and its excess."""

    replicate: int
    init_seed: int
    step: int
    bpb: float
    excess: float


@dataclass(frozen=True)
class ArmBadModes:
    """One arm's bad modes: ``k`` of ``n`` runs read at the marker, the rate's interval, the arm's median there."""

    k: int
    n: int
    rate: float
    interval: tuple[float, float]
    median: float
    steps: tuple[int, ...]  # the eval step(s) read (one unless the arm's runs differ in steps)
    flagged: tuple[Flagged, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bad_mode_lrs(by_lr: Mapping[float, Sequence[RunRecord]], marker: Marker | None) -> frozenset[float]:
    """The tune lrs one seed of which is in a bad mode against the median of that lr's own seeds (the lr's other
    seeds, not the arm's other lrs, are what a healthy run there looks like); none without a marker."""
    if marker is None:
        return frozenset()
    out = set()
    for lr, records in by_lr.items():
        modes = arm_bad_modes(records, marker) if len(records) > 1 else None
        if modes is not None and modes.k > 0:
            out.add(lr)
    return frozenset(out)


def arm_bad_modes(records: Sequence[RunRecord], marker: Marker) -> ArmBadModes | None:
    """The marker applied to every run of one arm; None when no run reached its marker eval."""
    read = [(r, row) for r in records
            if (row := marker_row(r.rows, marker_step(r.steps, marker.at_fraction))) is not None]
    if not read:
        return None
    bpb = np.array([float(row["bpb"]) for _, row in read])
    median = float(np.median(bpb))
    excess = bpb - median
    # stats.bad_run_rate counts values above a ceiling with their exact interval: here the excesses above the margin
    rate = stats.bad_run_rate(excess.tolist(), marker.margin)
    assert rate is not None
    flagged = tuple(Flagged(r.replicate, r.seed, int(row["step"]), float(row["bpb"]), float(e))
                    for (r, row), e in zip(read, excess) if e > marker.margin)
    return ArmBadModes(rate.k, rate.n, rate.estimate, rate.interval, median,
                       tuple(sorted({int(row["step"]) for _, row in read})), flagged)


def shared_seeds(arms: Mapping[str, Mapping[str, Any] | None]) -> dict[str, list[str]]:
    """Init seeds flagged in more than one arm (the arms of a replicate share their initial weights), seed -> arms;
    ``arms`` maps an arm to its :meth:`ArmBadModes.to_dict` (None: not read)."""
    by_seed: dict[int, list[str]] = {}
    for arm, modes in arms.items():
        for f in (modes or {}).get("flagged", []):
            by_seed.setdefault(int(f["init_seed"]), []).append(arm)
    return {str(seed): names for seed, names in sorted(by_seed.items()) if len(names) > 1}

