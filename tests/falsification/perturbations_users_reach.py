"""Perturbations of what users reach for (issue 24, "What users reach for that is missing"): wandb's
entity and tags, gradient accumulation's loss scaling, keeping the best checkpoint (tests/falsification;
format in perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_TRAIN = "dormouse/train.py"
_LOOP_STATE = "dormouse/loop_state.py"
_EVAL_ONLY = "dormouse/eval_only.py"
_KNOBS = "tests/test_trainer_knobs.py::"
_DATA = "dormouse/data.py"
_CONFIG = "dormouse/config.py"
_SWEEP = "dormouse/sweep.py"

PERTURBATIONS: list[dict] = [
    {
        "name": "wandb_tags_not_passed",
        "file": _TRAIN,
        "function": "_wandb_run",
        "old": "job_type=lg.wandb_job_type, tags=[str(tag) for tag in lg.wandb_tags],\n",
        "new": "job_type=lg.wandb_job_type, tags=None,\n",
        "gates": ["tests/test_wandb_team.py::test_entity_project_group_and_tags_reach_wandb_init"],
        "why": "logging.wandb_tags is accepted and dropped: the team's runs are not tagged and nothing says so",
        "protects": "training loop",
    },
    {
        "name": "grad_accum_without_loss_scaling",
        "file": _TRAIN,
        "function": "accumulate_gradients",
        "old": "        loss = readout_loss(logits, yb) / accum\n",
        "new": "        loss = readout_loss(logits, yb)\n",
        "gates": ["tests/test_trainer_knobs.py::test_accumulated_micro_batches_give_the_full_batch_gradient"],
        "why": "the micro-batch losses are summed unscaled: the step is accum times a full-batch step (an "
               "effective learning rate x accum), silently",
        "protects": "training loop",
    },
    {
        "name": "grad_accum_counts_one_pass_per_step",
        "file": _LOOP_STATE,
        "function": "Window.add_forward",
        "old": "        self.forward_depth_sum += depth * passes\n",
        "new": "        self.forward_depth_sum += depth\n",
        "gates": ["tests/test_trainer_knobs.py::test_grad_accum_keeps_the_counters_and_depth_sum_of_one_step_per_"
                  "step"],
        "why": "depth_sum counts one forward per step while the arm is asked once per micro-batch: logs --check "
               "calls every accumulated run's arm leaking",
        "protects": "counters",
    },
    {
        "name": "keep_best_keeps_the_last",
        "file": _TRAIN,
        "function": "write_best_checkpoint",
        "old": "    if math.isfinite(row[\"bpb\"]) and all(row[\"bpb\"] < float(r[\"bpb\"]) for r in earlier):\n",
        "new": "    if math.isfinite(row[\"bpb\"]):\n",
        "gates": [_KNOBS + "test_keep_best_writes_the_lowest_eval_bpb_checkpoint_not_the_last"],
        "why": "best.pt is overwritten at every eval: it is the last checkpoint, not the best",
        "protects": "training loop",
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
        "gates": ["tests/test_hf_datasets.py::test_a_saved_dataset_folder_uses_its_own_validation_split_and_"
                  "says_so"],
        "why": "a dataset's own validation split is ignored: the eval reads the tail of train, a number not "
               "comparable with anyone else's on that dataset",
        "protects": "data/eval",
    },
    {
        "name": "preset_file_under_its_own_key",
        "file": _CONFIG,
        "function": "_user_preset_files",
        "old": "        ConfigStore.instance().store(group=\"preset\", name=name, node=node, package=\"_global_\")\n",
        "new": "        ConfigStore.instance().store(group=\"preset\", name=name, node=node)\n",
        "gates": ["tests/test_user_preset.py::test_a_preset_file_composes_like_a_shipped_preset_and_the_command_"
                  "line_wins"],
        "why": "a preset file lands under `preset:` instead of the root: its values never reach the config",
        "protects": "training loop",
    },
    {
        "name": "sweep_settings_share_one_run_folder",
        "file": _SWEEP,
        "function": "plan",
        "old": "[f\"run.name={sweep}/{i:0{width}d}\"]",
        "new": "[f\"run.name={sweep}/0\"]",
        "gates": ["tests/test_sweep.py::test_multirun_trains_each_setting_in_its_own_run_and_logs_shows_one_table"],
        "why": "every setting of a sweep is sent to one run folder: the second is refused (or, with "
               "train.overwrite, replaces the first)",
        "protects": "training loop",
    },
]
