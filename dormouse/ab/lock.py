"""One ``dormouse ab`` per comparison directory (``<comparison>/ab.lock``), one process per pair
(:func:`pair_lock`), through :mod:`dormouse.run.lock`. Two drivers would train a pair twice, and a restart deletes a
pair's folder under the other's run; the pair lock lets ``ab status`` tell a running pair from an abandoned one on
any host."""

from __future__ import annotations

from pathlib import Path

from dormouse.run.files import ComparisonFiles
from dormouse.run.lock import Holder, HolderLock, LockHeld, is_locked, read_holder

__all__ = ["Holder", "HolderLock", "LockHeld", "is_locked", "read_holder", "comparison_lock", "pair_lock"]

COMPARISON_ADVICE = ("wait for it to finish, or stop it (Ctrl-C checkpoints its runs in progress) and rerun; "
                     "`dormouse ab status NAME` is safe meanwhile")
_WHERE = "the comparison (--root)"


def comparison_lock(comp_dir: Path) -> HolderLock:
    return HolderLock(ComparisonFiles(Path(comp_dir)).lock, f"comparison {Path(comp_dir)}", COMPARISON_ADVICE,
                      _WHERE)


def pair_lock(comp_dir: Path, pair: str) -> HolderLock:
    """A pair's lock, held by the process that trains it, so an orphaned job and a new driver's job never train the
    same pair at once."""
    return HolderLock(ComparisonFiles(Path(comp_dir)).pair_lock(pair), f"run {pair}", COMPARISON_ADVICE, _WHERE)
