"""Perturbations of issue 24's rough edges (day3): a resume's default is its saved config, the refusal of a
resume that changes what the run computes, the `ab NAME` refusals, the --status ETA under --jobs
(tests/falsification; format in perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_RUNDIR = "dormouse/rundir.py"
_CONFIG = "dormouse/config.py"
_REGISTRY = "dormouse/ab/registry.py"
_RESUME = "tests/test_resume_default.py::"
_NAMES = "tests/test_ab_names.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "resume_ignores_the_saved_config",
        "file": _CONFIG,
        "function": "load_config",
        "old": "    if str(cfg.train.resume) != \"never\":",
        "new": "    if False:",
        "gates": [_RESUME + "test_a_resume_without_other_overrides_continues_the_run_with_its_saved_config"],
        "why": "a resume composes from the defaults again: every override of the run must be retyped, or the "
               "resume is refused",
        "protects": "training loop",
    },
    {
        "name": "resume_saved_config_overrides_the_command_line",
        "file": _RUNDIR,
        "function": "resume_config",
        "old": "        if key in COMMAND_KEYS or any(key == g or key.startswith(g + \".\") for g in given):\n",
        "new": "        if key in COMMAND_KEYS:\n",
        "gates": [_RESUME + "test_an_explicit_override_on_a_resume_wins_over_the_saved_config"],
        "why": "an override given on a resume is silently replaced by the saved value (train.eval_every=5 "
               "ignored; a changed model silently resumed as the old one)",
        "protects": "training loop",
    },
    {
        "name": "resume_refusal_names_keys_without_values",
        "file": _RUNDIR,
        "function": "_differences_with_values",
        "old": "    return \", \".join(f\"{k}={a.get(k)} -> {b.get(k)}\" for k in keys)\n",
        "new": "    return \", \".join(keys)\n",
        "gates": [_RESUME + "test_a_refused_resume_names_every_differing_key_with_both_values"],
        "why": "a refused resume names the keys but not the saved and the given value: the user cannot tell "
               "which side to change",
        "protects": "training loop",
    },
    {
        "name": "ab_missing_path_called_a_bad_name",
        "file": _REGISTRY,
        "function": "_read_text",
        "old": "    if _looks_like_path(name):",
        "new": "    if name.endswith((\".yaml\", \".yml\")) and Path(name).is_file():",
        "gates": [_NAMES + "test_a_missing_registration_file_is_said_to_be_a_missing_file_not_a_bad_name"],
        "why": "`dormouse ab /nonexist/x.yaml` is told 'not a plain name' instead of 'the file does not exist'",
        "protects": "A/B rule",
    },
    {
        "name": "ab_unknown_name_without_did_you_mean",
        "file": _REGISTRY,
        "function": "_read_text",
        "old": "        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)\n",
        "new": "        close: list[str] = []\n",
        "gates": [_NAMES + "test_a_mistyped_comparison_name_gets_the_closest_registered_names"],
        "why": "`dormouse ab smok` lists every comparison but not the one meant",
        "protects": "A/B rule",
    },
]
PERTURBATIONS += [
    {
        "name": "slot_workers_spawned_reimporting_torch",
        "file": "dormouse/ab/launch.py",
        "function": "ProcessLauncher.__init__",
        "old": "        self.context = worker_context()\n",
        "new": "        self.context = multiprocessing.get_context(\"spawn\")\n",
        "gates": ["tests/test_ab_launch.py::test_slot_workers_start_with_torch_and_the_trainer_already_imported"],
        "why": "every --jobs worker is spawned and imports torch (and torch._dynamo at its first optimizer) "
               "again: seconds per worker before its first pair, more than a small pair's training",
        "protects": "A/B rule",
    },
]
_ETA = "tests/test_ab_eta.py::"
PERTURBATIONS += [
    {
        "name": "eta_ignores_the_parallel_slots",
        "file": "dormouse/ab/status.py",
        "function": "comparison_eta",
        "old": "        heapq.heappush(free, heapq.heappop(free) + per_pair)\n",
        "new": "        heapq.heappush(free, max(free) + per_pair)\n",
        "gates": [_ETA + "test_two_slots_before_any_pair_finished_give_an_eta_from_the_running_pairs_pace",
                  _ETA + "test_finished_pairs_set_the_pair_time_and_the_slots_share_the_pending_pairs"],
        "why": "the pending pairs are counted one after another as if one slot ran them: under --jobs N the "
               "ETA is about N times too long",
        "protects": "A/B rule",
    },
    {
        "name": "eta_unknown_until_a_pair_finished",
        "file": "dormouse/ab/status.py",
        "function": "comparison_eta",
        "old": "                else sum(projected) / len(projected) if projected else None)\n",
        "new": "                else None)\n",
        "gates": [_ETA + "test_two_slots_before_any_pair_finished_give_an_eta_from_the_running_pairs_pace"],
        "why": "under --jobs N the first N pairs run together, so no ETA until the first wave ends (issue 24)",
        "protects": "A/B rule",
    },
    {
        "name": "board_eta_forgets_the_pending_pairs",
        "file": "dormouse/ab/live.py",
        "function": "PairBoard.eta_s",
        "old": "comparison_eta(running, done, sum(p.status == \"pending\" for p in self.pairs.values()))",
        "new": "comparison_eta(running, done, 0)",
        "gates": [_ETA + "test_the_live_board_shows_the_eta_for_the_slots_running_at_once"],
        "why": "the live board's ETA covers the running pairs only: it says minutes when hours of pending "
               "pairs remain",
        "protects": "A/B rule",
    },
]
PERTURBATIONS += [
    {
        "name": "comparison_gate_bars_are_channel_spread",
        "file": "dormouse/arms.py",
        "function": "GatedResidual.mean_over_seeds",
        "old": "        out = {k: v for k, v in super().mean_over_seeds(rows).items() if k != \"probe/gate_spread\"}\n",
        "new": "        out = super().mean_over_seeds(rows)\n",
        "gates": ["tests/test_probe_plots.py::test_error_bars_say_what_they_are_the_same_way_for_every_arm"],
        "why": "a comparison's gate plot carries the seeds' mean sd over channels beside an |alpha| plot whose "
               "bars are the sd over seeds (issue 24)",
        "protects": "probes",
    },
    {
        "name": "slot_plot_names_bars_it_does_not_draw",
        "file": "dormouse/probe_plots.py",
        "function": "spread_label",
        "old": "    return f\"{quantity} (bars: sd over {over})\" if spread is not None else quantity\n",
        "new": "    return f\"{quantity} (bars: sd over {over})\"\n",
        "gates": ["tests/test_probe_plots.py::test_error_bars_say_what_they_are_the_same_way_for_every_arm"],
        "why": "a one-seed comparison's plot says 'bars: sd over seeds' and draws none",
        "protects": "probes",
    },
]
PERTURBATIONS += [
    {
        "name": "sample_streams_nothing_until_the_end",
        "file": "dormouse/sample.py",
        "function": "generate",
        "old": "                on_byte(bytes((nxt,)))\n",
        "new": "                pass\n",
        "gates": ["tests/test_sample.py::test_one_sample_streams_each_byte_as_it_is_generated_flushed"],
        "why": "the bytes are drawn but not handed on: `sample --bytes 100000` shows nothing for minutes",
        "protects": "training loop",
    },
]
