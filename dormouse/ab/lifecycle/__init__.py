"""A comparison's life after (and between) its runs: ``dormouse ab publish`` copies a finished one into the
repository with its provenance, ``carry`` saves what resuming needs and restores it on a fresh machine,
``rerun`` re-trains one published run and checks its final bpb bit for bit, ``size`` prints the design card
a published comparison's spreads give the next registration."""

from __future__ import annotations

from pathlib import Path

PUBLISHED_ROOT = Path("docs/results")  # where `dormouse ab publish` writes NAME/ and carry/rerun read it
RERUN_ROOT = Path("runs/rerun")  # where `dormouse ab rerun` trains its run


def published_dir(name: str) -> Path:
    """``docs/results/NAME``: where comparison (or study) ``name`` is published and its runs carried."""
    return PUBLISHED_ROOT / name
