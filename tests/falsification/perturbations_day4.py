"""Perturbations of the compute dtype (train.dtype), the completion of config keys, presets and comparison
names, and the first-step/memory notices (issue 24; tests/falsification; format in perturbations_attnres.py).
``protects`` names what a defect here would break."""

from __future__ import annotations

_TRAIN = "dormouse/train.py"
_EVAL_ONLY = "dormouse/eval_only.py"
_COMPLETION = "dormouse/completion.py"
_D = "tests/test_dtype.py::"
_C = "tests/test_completion.py::"
_NOTICE = "dormouse/step_notice.py"
_N = "tests/test_step_notice.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "train_dtype_read_but_ignored",
        "file": _TRAIN,
        "function": "compute_dtype",
        "old": "    return \"bf16-autocast\" if requested == \"bf16\" else \"fp32\"\n",
        "new": "    return \"fp32\"\n",
        "gates": [_D + "test_train_dtype_bf16_runs_the_matmuls_in_bf16_on_cpu_and_fp32_does_not"],
        "why": "train.dtype=bf16 is accepted and recorded nowhere: the run computes in fp32 while the user "
               "asked for (and compares against) bf16",
        "protects": "training loop",
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
        "name": "override_completion_misses_the_preset_group",
        "file": _COMPLETION,
        "function": "complete_override",
        "old": "        return [f\"{k}=\" for k in [*GROUPS, *leaves] if k.startswith(incomplete)]\n",
        "new": "        return [f\"{k}=\" for k in leaves if k.startswith(incomplete)]\n",
        "gates": [_C + "test_override_completion_offers_every_schema_key_as_key_equals"],
        "why": "`dormouse train pre<TAB>` offers nothing: the presets, the first thing a user sets, are not "
               "completed",
        "protects": "training loop",
    },
    {
        "name": "first_step_line_never_printed",
        "file": _TRAIN,
        "function": "_loop",
        "old": "                if first is not None and info.is_main:  # a step that cannot fit in time is not "
               "silent\n",
        "new": "                if first is not None and not info.is_main:\n",
        "gates": [_N + "test_first_step_prints_its_time_off_a_terminal_before_the_first_eval"],
        "why": "a run whose step takes minutes prints nothing off a terminal until its first eval (issue 24)",
        "protects": "training loop",
    },
    {
        "name": "first_step_projection_counts_from_step_0",
        "file": _NOTICE,
        "function": "first_step_line",
        "old": "    to_eval, to_end = duration((next_eval - step) * step_s), duration((steps - step) * step_s)\n",
        "new": "    to_eval, to_end = duration(next_eval * step_s), duration(steps * step_s)\n",
        "gates": [_N + "test_first_step_line_projects_the_first_eval_and_the_end_from_the_first_step"],
        "why": "the projection counts the step already done (and, on a resume, every step before it)",
        "protects": "training loop",
    },
    {
        "name": "attention_memory_warning_never_fires",
        "file": _NOTICE,
        "function": "memory_warning",
        "old": "    if free is None or need <= MEMORY_WARN_FRACTION * free:\n",
        "new": "    if free is None or need <= free:\n",
        "gates": [_N + "test_attention_that_exceeds_half_the_free_memory_warns_before_step_0_and_still_trains"],
        "why": "the warning waits until the estimate exceeds all the free memory, ignoring the stated fraction: "
               "a step that holds more than half the memory starts silently",
        "protects": "training loop",
    },
]
