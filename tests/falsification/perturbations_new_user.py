"""Perturbations of what a new user's own corpus and config get (issue 24: the default eval size on a short
val split, a folder's binary files, a warmup that takes every step; tests/falsification; format in
perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_DATA = "dormouse/data.py"
_PREFLIGHT = "dormouse/preflight.py"

PERTURBATIONS: list[dict] = [
    {
        "name": "default_eval_size_not_fitted_to_the_val_split",
        "file": _DATA,
        "function": "resolve_eval_bytes",
        "old": "    return int(eval_bytes) if eval_bytes is not None else min(DEFAULT_EVAL_BYTES, int(val_bytes))\n",
        "new": "    return int(eval_bytes) if eval_bytes is not None else DEFAULT_EVAL_BYTES\n",
        "gates": ["tests/test_eval_set.py::test_the_default_eval_size_fits_a_short_val_split_and_says_so_but_an_"
                  "explicit_one_is_never_cut"],
        "why": "the default eval size is a fixed 65536: a corpus with a shorter val split (nanoGPT's tiny "
               "Shakespeare) is refused unless the user finds data.eval_bytes",
        "protects": "data/eval",
    },
    {
        "name": "folder_reads_binary_files",
        "file": _DATA,
        "function": "_load_folder",
        "old": "        if _is_text(content):\n",
        "new": "        if True:\n",
        "gates": ["tests/test_data.py::test_a_folder_skips_files_that_are_not_text_and_says_which_files_and_"
                  "which_split"],
        "why": "a folder's images, archives and checkpoints are trained on (and may be the val split)",
        "protects": "data/eval",
    },
    {
        "name": "warmup_over_the_whole_run_not_warned",
        "file": _PREFLIGHT,
        "function": "config_warnings",
        "old": "    if int(t.warmup) >= int(t.steps):\n",
        "new": "    if int(t.warmup) > int(t.steps):\n",
        "gates": ["tests/test_preflight.py::test_warmup_that_takes_every_step_is_a_warning_in_validate_and_train_"
                  "not_a_refusal"],
        "why": "warmup == steps is not warned: the whole run is warmup, the cosine never decays, and nothing says so",
        "protects": "training loop",
    },
]
