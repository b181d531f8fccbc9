"""Perturbations of the training loop and the arms' set-up (the dtype, notices, gradient
accumulation, best checkpoint, wandb tags and the optimizer groups across a resume;
tests/falsification; format in perturbations_attnres.py, plus ``protects``). What a run reads and scores is
perturbed in perturbations_data.py.

Each is a plausible one-line mistake in code that decides a verdict as much as the mechanism does: the
schedule, the optimizer's groups, the depth the loop runs, what the loss trains, the dtype it computes in,
how accumulated gradients are scaled, and where each arm starts; or one that leaves a user uninformed: a
first step or a memory need that goes unsaid.
"""

from __future__ import annotations

_TRAIN = "dormouse/train/loop.py"
_SCHEDULE = "dormouse/train/schedule.py"
_RUNDIR = "dormouse/train/start.py"
_MODEL = "dormouse/model/looped.py"
_ARMS = "dormouse/arms/base.py"
_DATA = "dormouse/data.py"
_LOOP = "tests/train/test_loop.py::"
_EVAL = "tests/train/test_eval_set.py::"
_SETUP = "tests/arms/test_arm_setup.py::"
_ASKED = "tests/flows/test_asked.py::"
_D = "tests/model/test_dtype.py::"
_N = "tests/train/test_step_notice.py::"
_NOTICE = "dormouse/train/step_notice.py"
_LOOP_STATE = "dormouse/train/state.py"
_KNOBS = "tests/train/test_trainer_knobs.py::"

PERTURBATIONS: list[dict] = [
    # --- gate 2: the learning-rate schedule ----------------------------------------------------------------
    {
        "name": "warmup_starts_at_zero",
        "file": _SCHEDULE,
        "function": "lr_at",
        "old": "        return t.lr * (step + 1) / t.warmup\n",
        "new": "        return t.lr * step / t.warmup\n",
        "gates": [_LOOP + "test_learning_rate_the_optimizer_applies_at_the_schedule_boundaries"],
        "why": "warmup counted from 0: the first step trains at lr 0 and the peak comes one step late",
        "protects": "training loop",
    },
    {
        "name": "cosine_horizon_ignores_warmup",
        "file": _SCHEDULE,
        "function": "lr_at",
        "old": "(step - t.warmup) / max(1, t.steps - t.warmup)",
        "new": "(step - t.warmup) / max(1, t.steps)",
        "gates": [_LOOP + "test_learning_rate_the_optimizer_applies_at_the_schedule_boundaries"],
        "why": "the cosine spans train.steps instead of the steps after warmup: it never reaches its floor",
        "protects": "training loop",
    },
    {
        "name": "loop_applies_the_previous_steps_lr",
        "file": _TRAIN,
        "function": "train_step",
        "old": "        group[\"lr\"] = lr_at(loop.step, cfg) * group.get(\"lr_scale\", 1.0)\n",
        "new": "        group[\"lr\"] = lr_at(max(0, loop.step - 1), cfg) * group.get(\"lr_scale\", 1.0)\n",
        "gates": [_LOOP + "test_learning_rate_the_optimizer_applies_at_the_schedule_boundaries"],
        "why": "the loop sets the lr of the step before (the eval line's lr convention leaking into training)",
        "protects": "training loop",
    },
    {
        "name": "resume_bends_the_schedule",
        "file": _RUNDIR,
        "function": "prepare_run_dir",
        "old": "        problem = schedule_change_problem(old, cfg, checkpoint_step(state))\n",
        "new": "        problem = None\n",
        "gates": ["tests/train/test_resume_schedule.py::"
                  "test_changing_train_steps_after_warmup_is_refused_naming_the_key_and_the_way_out"],
        "why": "a resume may change train.steps mid-cosine: the run follows neither schedule",
        "protects": "training loop",
    },
    # --- gate 3: the optimizer the loop builds ---------------------------------------------------------------
    {
        "name": "optimizer_decays_everything",
        "file": _TRAIN,
        "function": "_train",
        "old": "torch.optim.AdamW(model.param_groups(float(t.weight_decay)), ",
        "new": "torch.optim.AdamW([{\"params\": list(model.parameters()), "
               "\"weight_decay\": float(t.weight_decay)}], ",
        "gates": [_LOOP + "test_the_optimizer_the_loop_steps_decays_matrices_only"],
        "why": "the loop builds AdamW over every parameter: gains, biases, ReZero's alpha and the queries decay",
        "protects": "training loop",
    },
    {
        "name": "arm_matrices_rule_only_by_ndim",
        "file": _MODEL,
        "function": "LoopedByteLM.param_groups",
        "old": "            decay = not (p.ndim < 2 or name in arm_no_decay)\n",
        "new": "            decay = not (p.ndim < 2)\n",
        "gates": [_LOOP + "test_the_optimizer_the_loop_steps_decays_matrices_only"],
        "why": "decay decided by ndim alone: GR's [slots, d] bias and AttnRes's [reads, d] queries and gains decay",
        "protects": "training loop",
    },
    # --- gate 4: random depth ------------------------------------------------------------------------------------
    {
        "name": "random_depth_never_reaches_max_iter",
        "file": _TRAIN,
        "function": "depth_for_step",
        "old": "torch.randint(1, max_iter + 1, (1,)",
        "new": "torch.randint(1, max(2, max_iter), (1,)",
        "gates": [_LOOP + "test_random_depth_covers_exactly_one_to_max_iter"],
        "why": "an exclusive upper bound read as inclusive: depth max_iter is never drawn",
        "protects": "training loop",
    },
    {
        "name": "depth_drawn_once_for_the_run",
        "file": _TRAIN,
        "function": "train_step",
        "old": "depth = depth_for_step(int(t.seed), loop.step, ",
        "new": "depth = depth_for_step(int(t.seed), 0, ",
        "gates": [_LOOP + "test_the_loop_runs_the_depth_drawn_for_each_step"],
        "why": "the loop keys the depth draw on step 0: every step runs one depth (counters stay consistent)",
        "protects": "training loop",
    },
    # --- gate 1: what the loss trains ---------------------------------------------------------------------------
    {
        "name": "readout_config_ignored",
        "file": _TRAIN,
        "function": "train_step",
        "old": "readouts=str(t.readout),",
        "new": "readouts=\"all\",",
        "gates": [_LOOP + "test_readout_all_trains_every_readout_and_last_only_the_final_one"],
        "why": "train.readout=last is ignored: every readout is trained",
        "protects": "training loop",
    },
    {
        "name": "readout_losses_summed_not_averaged",
        "file": _TRAIN,
        "function": "readout_loss",
        "old": "    return torch.stack(losses).mean()\n",
        "new": "    return torch.stack(losses).sum()\n",
        "gates": [_LOOP + "test_readout_all_trains_every_readout_and_last_only_the_final_one"],
        "why": "readout=all sums the readouts' CE: each readout's gradient is max_iter times the registered one",
        "protects": "training loop",
    },
    # --- gate 6 and the eval-size rule ------------------------------------------------------------------------
    {
        "name": "eval_reads_the_train_split",
        "file": _TRAIN,
        "function": "_train",
        "old": "eval_windows(corpus.val, ",
        "new": "eval_windows(corpus.train, ",
        "gates": [_EVAL + "test_eval_reads_the_val_split_and_training_never_does"],
        "why": "the fixed eval set is cut from the train split: bpb measures memorisation, not generalisation",
        "protects": "data/eval",
    },
    # --- gate 8: asked means asked ---------------------------------------------------------------------------
    {
        "name": "last_iteration_skips_its_mlp",
        "file": _MODEL,
        "function": "LoopedByteLM.forward",
        "old": "            for j, sublayer in enumerate(regions.sublayers):\n",
        "new": "            for j, sublayer in enumerate(regions.sublayers[: 1 if 0 < k == depth - 1 else 2]):\n",
        "gates": [_ASKED + "test_a_real_runs_asked_is_twice_the_depths_its_schedule_drew"],
        "why": "the loop skips a sublayer: ran and asked drop together (ran = asked passes); only asked = "
               "2 x the drawn depths sees it",
        "protects": "counters",
    },
    # --- gate 5: each arm's starting point and per-slot independence --------------------------------------------
    {
        "name": "gr_bias_starts_at_minus_one",
        "file": "dormouse/arms/gr.py",
        "function": "GR_BIAS_INIT",
        "old": "GR_BIAS_INIT = -2.0",
        "new": "GR_BIAS_INIT = -1.0",
        "gates": [_SETUP + "test_each_arm_starts_from_its_papers_values"],
        "why": "GR's gate bias starts at -1 (gate 0.27) instead of -2 (0.12): another arm than the registered one",
        "protects": "arms' set-up",
    },
    {
        "name": "shared_init_overwrites_the_arm",
        "file": _MODEL,
        "function": "LoopedByteLM.init_weights",
        "old": "            if name.startswith(\"arm\"):\n                continue\n",
        "new": "",
        "gates": [_SETUP + "test_each_arm_starts_from_its_papers_values"],
        "why": "the shared-weight init also draws the arm's matrices: GR's W starts random, not 0",
        "protects": "arms' set-up",
    },
    {
        "name": "rezero_alpha_shared_by_iterations",
        "file": "dormouse/arms/rezero.py",
        "function": "ReZero.absorb",
        "old": "self.alpha[slot].to(output.dtype)",
        "new": "self.alpha[slot % 2].to(output.dtype)",
        "gates": [_SETUP + "test_a_slots_parameters_move_only_the_readouts_at_and_after_its_iteration"],
        "why": "ReZero's alpha indexed per sublayer kind, not per slot: later iterations' alphas are dead",
        "protects": "arms' set-up",
    },
    {
        "name": "gr_bias_shared_by_iterations",
        "file": "dormouse/arms/gr.py",
        "function": "GatedResidual.gate",
        "old": "self.bias[slot].to(normed.dtype)",
        "new": "self.bias[slot % 2].to(normed.dtype)",
        "gates": [_SETUP + "test_a_slots_parameters_move_only_the_readouts_at_and_after_its_iteration"],
        "why": "GR's bias indexed per sublayer kind: iteration 0's bias steers every later iteration",
        "protects": "arms' set-up",
    },
    {
        "name": "attnres_readouts_share_one_query",
        "file": "dormouse/arms/attnres.py",
        "function": "AttnRes.readout_input",
        "old": "        return self._read(state, self.n_slots + k)\n",
        "new": "        return self._read(state, self.n_slots)\n",
        "gates": [_SETUP + "test_an_attnres_readout_query_moves_its_own_readout_only"],
        "why": "every readout point reads with readout 0's query: the other readout queries are dead",
        "protects": "arms' set-up",
    },
    {
        "name": "gr_gate_reads_the_raw_state",
        "file": "dormouse/arms/gr.py",
        "function": "GatedResidual.gate",
        "old": "        normed = rms_norm(state)\n",
        "new": "        normed = state\n",
        "gates": [_SETUP + "test_gr_gate_reads_the_rms_normalised_state"],
        "why": "GR's gate reads the raw state: it saturates as the residual stream grows with depth",
        "protects": "arms' set-up",
    },
    {
        "name": "train_dtype_read_but_ignored",
        "file": "dormouse/train/device.py",
        "function": "compute_dtype",
        "old": "    return \"bf16-autocast\" if requested == \"bf16\" else \"fp32\"\n",
        "new": "    return \"fp32\"\n",
        "gates": [_D + "test_train_dtype_bf16_runs_the_matmuls_in_bf16_on_cpu_and_fp32_does_not"],
        "why": "train.dtype=bf16 is accepted and recorded nowhere: the run computes in fp32 while the user "
               "asked for (and compares against) bf16",
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
        "why": "a run whose step takes minutes prints nothing off a terminal until its first eval",
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
    {
        "name": "wandb_tags_not_passed",
        "file": _TRAIN,
        "function": "_wandb_run",
        "old": "job_type=lg.wandb_job_type, tags=[str(tag) for tag in lg.wandb_tags],\n",
        "new": "job_type=lg.wandb_job_type, tags=None,\n",
        "gates": ["tests/flows/test_wandb_team.py::test_entity_project_group_and_tags_reach_wandb_init"],
        "why": "logging.wandb_tags is accepted and dropped: the team's runs are not tagged and nothing says so",
        "protects": "training loop",
    },
    {
        "name": "grad_accum_without_loss_scaling",
        "file": _TRAIN,
        "function": "accumulate_gradients",
        "old": "        loss = readout_loss(logits, yb) / accum\n",
        "new": "        loss = readout_loss(logits, yb)\n",
        "gates": ["tests/train/test_trainer_knobs.py::test_accumulated_micro_batches_give_the_full_batch_gradient"],
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
        "gates": ["tests/train/test_trainer_knobs.py::test_grad_accum_keeps_the_counters_and_depth_sum_of_one_step_per_"
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
        "name": "optimizer_groups_in_hash_order",
        "file": _MODEL,
        "function": "LoopedByteLM.param_groups",
        "old": "        for name, p in self.named_parameters():\n",
        "new": ("        params = dict(self.named_parameters())\n"
                "        for name, p in ((n, params[n]) for n in set(params)):\n"),
        "gates": ["tests/flows/test_resume_signal.py::test_a_run_interrupted_by_a_signal_and_resumed_is_bit_identical"],
        "why": "the AdamW groups list the parameters in a set's (str-hash) order: the same within one process, "
               "so an in-process resume passes, but a resumed run is another process and the checkpoint's "
               "moments (matched by position) land on other parameters",
        "protects": "training loop",
    },
    {
        "name": "process_group_torn_down_under_a_live_ddp_wrapper",
        "file": "dormouse/train/distributed.py",
        "function": "shutdown_distributed",
        "old": "        gc.collect()\n",
        "new": "",
        "gates": ["tests/train/test_distributed.py::"
                  "test_the_process_group_is_torn_down_after_the_ddp_wrapper_that_holds_it_is_freed"],
        "why": "the DDP wrapper, kept alive by its reference cycles, still holds the gloo group when the "
               "interpreter tears down: a finished torchrun rank can abort (SIGABRT) and the run exits 1",
        "protects": "training loop",
    },
]
