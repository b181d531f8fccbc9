"""One ``dormouse ab`` per comparison directory, one process per pair: :mod:`dormouse.run.lock`'s holder lock.

Two processes running the same comparison would train the same pair twice, and the runner deletes a
pair's folder before it restarts it, so one would delete the other's run. The comparison's lock is
``<comparison>/ab.lock`` (dormouse.run.files names the files); the mechanism (flock, the holder's record,
stale locks taken over with a message) is :mod:`dormouse.run.lock`'s, shared with a run's lock.

Each pair has a lock of its own too (:func:`pair_lock`), held by whichever process trains the pair, so
``--status`` can tell a running pair from an abandoned one on any host, and an orphaned cluster job can
never train a pair beside a new driver's job.
"""

from __future__ import annotations

from pathlib import Path

from dormouse.run.files import ComparisonFiles
from dormouse.run.lock import Holder, HolderLock, LockHeld, is_locked, read_holder

__all__ = ["Holder", "HolderLock", "LockHeld", "is_locked", "read_holder", "comparison_lock", "pair_lock"]

COMPARISON_ADVICE = ("wait for it to finish, or stop it (Ctrl-C checkpoints its runs in progress) and rerun; "
                     "`dormouse ab status NAME` is safe meanwhile")
_WHERE = "the comparison (--root)"


def comparison_lock(comp_dir: Path) -> HolderLock:
    """The driver's lock: one `dormouse ab` per comparison directory."""
    return HolderLock(ComparisonFiles(Path(comp_dir)).lock, f"comparison {Path(comp_dir)}", COMPARISON_ADVICE,
                      _WHERE)


def pair_lock(comp_dir: Path, pair: str) -> HolderLock:
    """A pair's lock, held by the process that trains it (in-process, a worker or a cluster job): a
    job left running by a dead driver and a new driver's job can never train the same pair at once."""
    return HolderLock(ComparisonFiles(Path(comp_dir)).pair_lock(pair), f"run {pair}", COMPARISON_ADVICE, _WHERE)
