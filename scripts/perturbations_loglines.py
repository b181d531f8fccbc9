"""Perturbations of the formats and state the other modules lean on: the log-line formats, the replay rule,
the arm registry's order, the config defaults and the loop state (scripts/falsify.py; format in
perturbations_attnres.py).

Each is a defect that would change what a run writes, or how it resumes, without any model test noticing.
"""

from __future__ import annotations

_LINES = "dormouse/loglines.py"
_T = "tests/test_loglines.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "eval_line_drops_a_column",
        "file": _LINES,
        "old": '"depth", "arm", *ARMS, LEARNED, "kernel", "skipped"]',
        "new": '"depth", "arm", *ARMS, LEARNED, "skipped"]',
        "gates": [_T + "test_eval_line_round_trips_the_trainers_line_to_the_byte"],
        "why": "the eval line loses its kernel column: every reader of old logs and every A/B report that "
        "states which read path ran would silently disagree with what runs write",
        "protects": "counters",
    },
    {
        "name": "done_line_changes_precision",
        "file": _LINES,
        "old": 'return f"{DONE} step={step} wall_s={wall_s:.1f}"',
        "new": 'return f"{DONE} step={step} wall_s={wall_s:.2f}"',
        "gates": [_T + "test_done_line_round_trips_the_trainers_line"],
        "why": "a format drift in a line kind that used to be a raw f-string in train.py",
        "protects": "counters",
    },
    {
        "name": "replay_keeps_the_superseded_row",
        "file": _LINES,
        "old": "    return [*(r for r in rows if step_of(r) < step), row]\n",
        "new": "    return [*(r for r in rows if step_of(r) <= step), row]\n",
        "gates": [_T + "test_a_replayed_step_replaces_the_rows_from_that_step_on"],
        "why": "after a resume the interrupted run's row of the replayed step would survive next to the "
        "replay: duplicate steps in the A/B curves and a final row that may not be the final run's",
        "protects": "A/B rule",
    },
    {
        "name": "arm_order_swapped",
        "file": "dormouse/arm_registry.py",
        "old": "    return dict(_REGISTRY)\n",
        "new": "    return dict(sorted(_REGISTRY.items()))\n",
        "gates": [_T + "test_eval_line_round_trips_the_trainers_line_to_the_byte"],
        "why": "the registry's order is the eval line's counter order (and the tie-break simplicity order): "
        "reordering it changes every line a run writes",
        "protects": "counters",
    },
    {
        "name": "schema_default_drifts_from_the_cpu_default",
        "file": "dormouse/config.py",
        "old": "    max_iter: int = 3  #",
        "new": "    max_iter: int = 4  #",
        "gates": ["tests/test_config.py::test_each_preset_composes_to_the_config_recorded_before_defaults_moved"],
        "why": "the CPU preset no longer repeats the defaults, so a schema edit changes `dormouse train` "
        "with no arguments (the dataclass default of 4 that the preset used to hide)",
        "protects": "training loop",
    },
    {
        "name": "loop_state_window_not_restored",
        "file": "dormouse/loop_state.py",
        "old": '        self.window.load_state_dict(state["window"])\n',
        "new": "",
        "gates": ["tests/test_resume.py::test_loop_state_round_trips_through_a_checkpoint",
                  "tests/test_resume.py::test_resumed_run_is_bit_identical_to_an_uninterrupted_one"],
        "why": "a resumed run would open an empty eval window: the first eval line after a resume reports "
        "the loss and depth of only the steps since the resume",
        "protects": "training loop",
    },
]
