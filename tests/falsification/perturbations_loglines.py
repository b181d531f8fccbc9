"""Perturbations of the formats and state the other modules lean on: the log-line formats, the replay rule,
the arm registry's order, the config defaults and the loop state (tests/falsification; format in
perturbations_attnres.py).

Each is a defect that would change what a run writes, or how it resumes, without any model test noticing.
"""

from __future__ import annotations

_LINES = "dormouse/run/loglines.py"
_T = "tests/run/test_loglines.py::"
_SINKS = "tests/train/test_metrics_sinks.py::"
_RESUME = "tests/train/test_resume.py::"
_READER = "tests/run/test_reader.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "eval_line_drops_a_column",
        "file": _LINES,
        "function": "_TAIL",
        "old": '_TAIL = (LEARNED, "kernel", "skipped")',
        "new": '_TAIL = (LEARNED, "skipped")',
        "gates": [_T + "test_eval_line_round_trips_the_trainers_line_to_the_byte"],
        "why": "the eval line loses its kernel column: every reader of old logs and every A/B report that "
        "states which read path ran would silently disagree with what runs write",
        "protects": "counters",
    },
    {
        "name": "done_line_changes_precision",
        "file": _LINES,
        "function": "format_done_line",
        "old": 'return f"{DONE} step={step} wall_s={wall_s:.1f}"',
        "new": 'return f"{DONE} step={step} wall_s={wall_s:.2f}"',
        "gates": [_T + "test_done_line_round_trips_the_trainers_line"],
        "why": "a format drift in a line kind written by a raw f-string",
        "protects": "counters",
    },
    {
        "name": "replay_keeps_the_superseded_row",
        "file": _LINES,
        "function": "replay",
        "old": "    return [*(r for r in rows if step_of(r) < step), row]\n",
        "new": "    return [*(r for r in rows if step_of(r) <= step), row]\n",
        "gates": [_T + "test_a_replayed_step_replaces_the_rows_from_that_step_on"],
        "why": "after a resume the interrupted run's row of the replayed step would survive next to the "
        "replay: duplicate steps in the A/B curves and a final row that may not be the final run's",
        "protects": "A/B rule",
    },
    {
        "name": "arm_order_swapped",
        "file": "dormouse/arms/registry.py",
        "function": "arm_names",
        "old": "    return (*BUILTIN_ARMS, *(name for name in _REGISTRY if name not in BUILTIN_ARMS))\n",
        "new": "    return tuple(sorted((*BUILTIN_ARMS, *(name for name in _REGISTRY if name not in BUILTIN_ARMS))))\n",
        "gates": ["tests/arms/test_arm_names.py::test_the_registry_order_is_the_declared_built_ins_simplest_first_then"
                  "_the_others"],
        "why": "the registry's order is the tie-break simplicity order and the counters' order in metrics.jsonl: "
        "sorted, AttnRes would rank simpler than pre-norm",
        "protects": "counters",
    },
    {
        "name": "schema_default_drifts_from_the_cpu_default",
        "file": "dormouse/config/schema.py",
        "function": "ModelBase.max_iter",
        "old": "    max_iter: int = 3  #",
        "new": "    max_iter: int = 4  #",
        "gates": ["tests/config/test_config.py::test_each_preset_composes_to_the_config_recorded_before_defaults_moved"],
        "why": "the CPU preset no longer repeats the defaults, so a schema edit changes `dormouse train` "
        "with no arguments (the dataclass default of 4, which the preset overrides)",
        "protects": "training loop",
    },
    {
        "name": "loop_state_window_not_restored",
        "file": "dormouse/train/state.py",
        "function": "LoopState.load_state_dict",
        "old": '        self.window.load_state_dict(state["window"])\n',
        "new": "",
        "gates": ["tests/train/test_resume.py::test_loop_state_round_trips_through_a_checkpoint",
                  "tests/train/test_resume.py::test_resumed_run_is_bit_identical_to_an_uninterrupted_one"],
        "why": "a resumed run would open an empty eval window: the first eval line after a resume reports "
        "the loss and depth of only the steps since the resume",
        "protects": "training loop",
    },
    # --- one row, every sink, by name (tests/train/test_metrics_sinks.py) ---------------------------------------------
    {
        "name": "eval_line_drops_a_field_it_does_not_know",
        "file": _LINES,
        "function": "eval_fields",
        "old": "    extra = [k for k, v in row.items() if k not in placed and _on_line(k, v)]\n",
        "new": "    extra: list[str] = []\n",
        "gates": [_SINKS + "test_an_added_field_shows_under_its_own_name_on_the_eval_line_and_in_train_log"],
        "why": "a field added to the row (grad_norm, a new arm's counter) would reach metrics.jsonl but never the "
        "eval line, the terminal or train.log: the line would show a fixed list, not the row",
        "protects": "counters",
    },
    {
        "name": "logs_table_cells_by_fixed_position",
        "file": "dormouse/cli/logs.py",
        "function": "run_table",
        "old": "    cells = {c: [_cell_text(c, r) for r in run.evals] for c in cols}\n",
        # cells from a fixed field list, zipped against the headers (grad_norm's column gets window_steps'
        # value)
        "new": "    fixed = ['line', 'step', 'tokens', 'loss', 'bpb', 'bpb@1', 'bpb@2', 'lr', 'tok/s', 'depth', 'arm',"
        " 'rezero', 'gr', 'attnres', 'learned', 'kernel', 'skipped', 'window_steps', 'depth_sum']\n"
        "    cells = {c: [_cell_text(k, r) for r in run.evals] for c, k in zip(cols, fixed + ['?'] * len(cols))}\n",
        "gates": [_SINKS + "test_an_added_field_shows_under_its_own_name_in_every_logs_view"],
        "why": "headers from the row, cells from a fixed column list, so adding "
        "grad_norm put window_steps' value under grad_norm and shifted the next column",
        "protects": "counters",
    },
    {
        "name": "wandb_sink_takes_the_first_numbers_by_position",
        "file": "dormouse/train/metrics.py",
        "function": "wandb_scalars",
        "old": "    return {**numbers, **probe_scalars(row)}\n",
        "new": "    return {**{k: numbers[k] for k in list(numbers)[:20]}, **probe_scalars(row)}\n",
        "gates": [_SINKS + "test_an_added_field_goes_to_metrics_jsonl_and_wandb_under_its_own_name"],
        "why": "wandb takes a fixed number of the row's fields by position: a field added in the middle pushes "
        "the last one off the team's dashboard while metrics.jsonl has it",
        "protects": "counters",
    },
    {
        "name": "logs_tsv_reads_the_rounded_line",
        "file": "dormouse/cli/logs.py",
        "function": "tsv_lines",
        "old": "*(_plain(c, r.values) for c in cols)",
        "new": "*(_plain(c, r.logged or r.values) for c in cols)",
        "gates": [_SINKS + "test_tsv_and_json_give_every_digit_from_metrics_jsonl"],
        "why": "`logs --format tsv` re-parses the rounded train.log (tokens 2.46M where metrics.jsonl "
        "has 2457617) although the README promises every value",
        "protects": "counters",
    },
    {
        "name": "logs_table_ignores_the_terminal_width",
        "file": "dormouse/cli/logs.py",
        "function": "_fit",
        "old": "        if used + need(c) <= width:\n",
        "new": "        if True:\n",
        "gates": [_SINKS + "test_the_table_fits_a_terminal_and_bpb_stays_readable"],
        "why": "on an 80- or 120-column terminal rich cuts every column to `b…`, so bpb cannot be read",
        "protects": "counters",
    },
    {
        "name": "eval_line_parser_forgets_the_old_loss_label",
        "file": _LINES,
        "function": "_LINE_KEYS",
        "old": "_LINE_KEYS = {label: key for key, label in LINE_LABELS.items()}",
        "new": "_LINE_KEYS = {label: label for key, label in LINE_LABELS.items()}",
        "gates": [_T + "test_eval_line_round_trips_the_trainers_line_to_the_byte",
                  _T + "test_the_eval_line_labels_the_training_loss_in_nats_beside_the_bpb_in_bits"],
        "why": "the eval line's `train_loss_nats=` would parse to a field no reader knows, and every log written "
        "since (and the published ones' `loss=` lines, by the same table) would lose the training loss",
        "protects": "counters",
    },
    # --- checkpoints: the loop state under one key, no metrics history -------------------------------------
    {
        "name": "checkpoint_carries_the_metrics_history",
        "file": "dormouse/train/loop.py",
        "function": "_checkpoint_state",
        "old": "            LOOP_KEY: loop.state_dict(totals), \"config\"",
        "new": "            LOOP_KEY: loop.state_dict(totals), \"metrics\": list(run.metrics.rows), \"config\"",
        "gates": [_RESUME + "test_a_checkpoint_keeps_the_loop_state_under_one_key_and_no_metrics_history"],
        "why": "every checkpoint would grow with the run by a copy of metrics.jsonl, which already holds it",
        "protects": "training loop",
    },
    {
        "name": "old_checkpoint_layout_no_longer_loads",
        "file": "dormouse/train/state.py",
        "function": "loop_part",
        "old": "    return checkpoint[LOOP_KEY] if LOOP_KEY in checkpoint else checkpoint\n",
        "new": "    return checkpoint[LOOP_KEY]\n",
        "gates": [_RESUME + "test_a_checkpoint_written_before_the_loop_key_still_resumes_bit_identically"],
        "why": "a run interrupted before the layout changed could not be resumed (a KeyError, not a message)",
        "protects": "training loop",
    },
    {
        "name": "resume_drops_the_metrics_history",
        "file": "dormouse/train/loop.py",
        "function": "_history",
        "old": "    return [row for row in read_metrics(path) if int(row[\"step\"]) <= step]\n",
        "new": "    return []\n",
        "gates": [_RESUME + "test_resumed_run_is_bit_identical_to_an_uninterrupted_one"],
        "why": "with the history out of the checkpoint, a resumed run's result (and a run resumed into a new "
        "directory) would hold only the evals after the resume",
        "protects": "training loop",
    },
    # --- dormouse logs' messages ------------------------------------------------------------------------------
    {
        "name": "a_text_file_reads_as_missing_eval",
        "file": "dormouse/run/reader.py",
        "function": "_is_not_a_log",
        "old": "    return (path.is_file() and path.name != LOG and not logged and run.done is None\n",
        "new": "    return (False\n",
        "gates": ["tests/flows/test_logs.py::test_a_text_file_that_is_not_a_log_says_so"],
        "why": "`logs notes.txt` says missing-eval, not that the file is not a train.log",
        "protects": "counters",
    },
    # --- the run reader and its checks (metrics.jsonl is the record) ----------------------------------------
    {
        "name": "reader_takes_train_log_over_metrics_jsonl",
        "file": "dormouse/run/reader.py",
        "function": "read_run",
        "old": "    if log_path.name == LOG and metrics.is_file():\n",
        "new": "    if False:\n",
        "gates": [_READER + "test_the_checks_decide_on_metrics_jsonl_where_the_two_copies_disagree",
                  _READER + "test_a_row_that_no_train_log_line_shows_is_checked_and_cited_in_metrics_jsonl"],
        "why": "the checks would decide validity on train.log's rounded copy, not on the metrics.jsonl rows the "
        "A/B report reads its numbers from: a row whose arm did not run passes when its line says it did",
        "protects": "counters",
    },
    {
        "name": "selected_arm_ran_below_asked_passes_the_check",
        "file": "dormouse/run/checks.py",
        "function": "counter_fault",
        "old": "(ran == 0 or asked == 0 or ran != asked)",
        "new": "(ran == 0 or asked == 0)",
        "gates": ["tests/flows/test_logs.py::test_dead_arm_reading_zero_and_partial_run"],
        "why": "an arm that ran 30 of its 40 asked aggregations would pass the counter check that `dormouse ab` "
        "marks arms invalid by: a partly dead mechanism compared as if it ran",
        "protects": "counters",
    },
    {
        "name": "human_stops_at_giga",
        "file": _LINES,
        "function": "human",
        "old": '    for div, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):\n',
        "new": '    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):\n',
        "gates": [_T + "test_human_is_the_one_count_format_and_parse_count_reads_it_back"],
        "why": "the one count format would lose T and P: the A/B status's FLOPs (ab/comparison/status.py's `_si` did them) "
        "would read 2.5e+06G",
        "protects": "counters",
    },
]
