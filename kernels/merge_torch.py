"""The plain-torch Block AttnRes merge (arXiv:2603.15031, Algorithm 1 Phase 2), no triton needed: the fused
merge's reference and the recompute its backward differentiates. One definition in the project:
:func:`dormouse.attnres.online_softmax_merge` (it guards empty partials, m = -inf)."""

from __future__ import annotations

from dormouse.attnres import online_softmax_merge as merge_partials_torch

__all__ = ["merge_partials_torch"]
