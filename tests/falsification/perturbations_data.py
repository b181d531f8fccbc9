"""Perturbations of what a run reads and scores: the corpus split, the eval set's size, a folder's or a Hugging
Face dataset's files, and `dormouse eval` reading the run's own split and dtype
(tests/falsification; format in perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_DATA = "dormouse/data.py"
_EVAL = "tests/train/test_eval_set.py::"
_D = "tests/model/test_dtype.py::"
_EVAL_ONLY = "dormouse/cli/eval.py"
_KNOBS = "tests/train/test_trainer_knobs.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "split_puts_val_at_the_head",
        "file": _DATA,
        "function": "_split",
        "old": "    return data[:n_train], data[n_train:]\n",
        "new": "    return data[n_val:], data[:n_val]\n",
        "gates": [_EVAL + "test_eval_reads_the_val_split_and_training_never_does"],
        "why": "val taken from the head and train from the rest: training reads the bytes the eval was meant for",
        "protects": "data/eval",
    },
    {
        "name": "eval_bytes_beyond_val_accepted",
        "file": _DATA,
        "function": "read_corpus",
        "old": "    if eval_bytes is not None and int(eval_bytes) > len(val):\n",
        "new": "    if False:\n",
        "gates": [_EVAL + "test_eval_bytes_larger_than_the_val_split_is_refused_naming_it"],
        "why": "an eval_bytes larger than the val split passes the data check (the residual registration's "
               "1 MiB that silently read 244 KiB)",
        "protects": "data/eval",
    },
    {
        "name": "eval_only_ignores_the_runs_dtype",
        "file": _EVAL_ONLY,
        "function": "eval_checkpoint",
        "old": "    dtype = compute_dtype(str(cfg.train.get(\"dtype\", \"auto\")), dev)\n",
        "new": "    dtype = compute_dtype(\"auto\", dev)\n",
        "gates": [_D + "test_eval_only_scores_a_bf16_run_in_bf16_giving_its_own_final_bpb"],
        "why": "`dormouse eval` scores a bf16 run in fp32: its bpb is not the number the run logged",
        "protects": "data/eval",
    },
    {
        "name": "default_eval_size_not_fitted_to_the_val_split",
        "file": _DATA,
        "function": "resolve_eval_bytes",
        "old": "    return int(eval_bytes) if eval_bytes is not None else min(DEFAULT_EVAL_BYTES, int(val_bytes))\n",
        "new": "    return int(eval_bytes) if eval_bytes is not None else DEFAULT_EVAL_BYTES\n",
        "gates": ["tests/train/test_eval_set.py::test_the_default_eval_size_fits_a_short_val_split_and_says_so_but_an_"
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
        "gates": ["tests/train/test_data.py::test_a_folder_skips_files_that_are_not_text_and_says_which_files_and_"
                  "which_split"],
        "why": "a folder's images, archives and checkpoints are trained on (and may be the val split)",
        "protects": "data/eval",
    },
    {
        "name": "file_reads_binary_bytes",
        "file": _DATA,
        "function": "_load_path",
        "old": "    if not _is_text(data):  # the rule a folder's files are skipped by: one rule, file or folder\n",
        "new": "    if False:  # the rule a folder's files are skipped by: one rule, file or folder\n",
        "gates": ["tests/train/test_data.py::test_a_binary_file_as_data_path_is_refused_by_the_rule_a_folder_skips_it_"
                  "by"],
        "why": "data.path= a checkpoint or an image trains on its bytes without a word, while a folder holding "
               "the same file refuses it as not text",
        "protects": "data/eval",
    },
    {
        "name": "eval_only_reads_the_train_split",
        "file": _EVAL_ONLY,
        "function": "eval_checkpoint",
        "old": "    x, y = eval_windows(corpus.val, seq_len=int(cfg.data.seq_len), eval_bytes=cfg.data.eval_bytes)\n",
        "new": "    x, y = eval_windows(corpus.train, seq_len=int(cfg.data.seq_len), eval_bytes=cfg.data.eval_bytes)\n",
        "gates": [_KNOBS + "test_eval_only_gives_the_runs_own_final_bpb_and_writes_nothing"],
        "why": "dormouse eval scores the checkpoint on bytes it trained on: a number that looks like the run's "
               "eval bpb and is not",
        "protects": "data/eval",
    },
    {
        "name": "hf_own_validation_split_ignored",
        "file": _DATA,
        "function": "_load_hf",
        "old": ("        val_name = \"validation\" if \"validation\" in splits and "
                "split.split(\"[\")[0] != \"validation\" else None\n"),
        "new": "        val_name = None\n",
        "gates": ["tests/train/test_hf_datasets.py::test_a_saved_dataset_folder_uses_its_own_validation_split_and_"
                  "says_so"],
        "why": "a dataset's own validation split is ignored: the eval reads the tail of train, a number not "
               "comparable with anyone else's on that dataset",
        "protects": "data/eval",
    },
]
