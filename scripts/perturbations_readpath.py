"""Perturbations of the AttnRes read path's precision and speed work (issues 10 and 11): scripts/falsify.py.

Format: see scripts/perturbations_attnres.py; each dict also names what its gate ``protects`` (one of
"mechanism", "kernels", "training loop", "data/eval", "arms' set-up", "A/B rule", "counters").
"""

from __future__ import annotations

_ATTNRES = "dormouse/attnres.py"
_TA = "tests/test_attnres.py::"
_TARMS = "tests/test_arms.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "phase1_scores_under_autocast",
        "file": _ATTNRES,
        "old": "    with _outside_autocast(x.device):\n        x = x.to(_compute_dtype(x.dtype))\n",
        "new": "    if True:\n        x = x.to(_compute_dtype(x.dtype))\n",
        "gates": [_TARMS + "test_block_two_phase_eval_under_autocast_reads_in_float32"],
        "why": "issue 10's defect: Phase 1 scores (x @ q) left inside CUDA bf16 autocast, so Block AttnRes is "
        "evaluated on bf16 scores while it trains through the fp32 path",
        "protects": "data/eval",
    },
    {
        "name": "direct_read_under_autocast",
        "file": _ATTNRES,
        "old": "    with _outside_autocast(device):\n",
        "new": "    if True:\n",
        "gates": [_TA + "test_depth_attend_under_autocast_is_its_fp32_result"],
        "why": "issue 10's defect: the torch read's score matmul left inside bf16 autocast (every CUDA run with "
        "model.kernel=torch reads with ~1 % score error at |s| ~ 20)",
        "protects": "mechanism",
    },
]
