"""Perturbations of the arms and the loop driver: dead arms, leaking counters, readouts taken from the
wrong place (tests/falsification; format in perturbations_attnres.py).

These are the model-level defects the predecessor shipped or nearly shipped (seeds/): a counter that fires
while the output does not move, a counter outside the arm's branch, a readout that misses the iteration's
own work.
"""

from __future__ import annotations

_ARMS = "dormouse/arms/base.py"
_MODEL = "dormouse/model/looped.py"
_T = "tests/arms/test_arms.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "prenorm_update_discarded",
        "file": "dormouse/arms/prenorm.py",
        "function": "PreNormResidual.absorb",
        "old": "        new_state = state + output\n",
        "new": "        new_state = state + 0 * output\n",
        "gates": ["tests/arms/test_prenorm_arm.py::test_prenorm_counts_ran_equal_asked_and_its_update_moves_every_later"
                  "_readout"],
        "why": "the pre-norm residual counts but drops every update: the state stays the embedding, a dead arm "
               "with a live counter",
        "protects": "mechanism",
    },
    {
        "name": "prenorm_ratio_over_the_updated_state",
        "file": "dormouse/arms/prenorm.py",
        "function": "PreNormResidual.learned",
        "old": "/ torch.linalg.vector_norm(x.double(), dim=-1)\n",
        "new": "/ torch.linalg.vector_norm((x + fx).double(), dim=-1)\n",
        "gates": ["tests/arms/test_prenorm_arm.py::test_prenorm_update_ratio_equals_a_float64_recomputation"],
        "why": "the pre-norm probe divides the update by the state after it (x + f(x)), not by the state it was "
               "added to: the reported ratio understates every update",
        "protects": "probes",
    },
    {
        "name": "rezero_result_discarded",
        "file": "dormouse/arms/rezero.py",
        "function": "ReZero.absorb",
        "old": "        new_state = torch.addcmul(state, self.alpha[slot].to(output.dtype), output)",
        "new": "        new_state = torch.addcmul(state, 0 * self.alpha[slot].to(output.dtype), output)",
        "gates": [_T + "test_arm_parameters_move_the_logits_at_every_depth"],
        "why": "ReZero runs and counts but its update never reaches the state: a dead arm with a live counter",
        "protects": "mechanism",
    },
    {
        "name": "gr_gate_ignores_its_bias",
        "file": "dormouse/arms/gr.py",
        "function": "GatedResidual.gate",
        "old": "gate_proj.weight.to(normed.dtype), self.bias[slot].to(normed.dtype)))",
        "new": "gate_proj.weight.to(normed.dtype), torch.full_like(self.bias[slot], -2.0).detach()))",
        "gates": [_T + "test_arm_parameters_move_the_logits_at_every_depth"],
        "why": "GR's per-slot bias never reaches the gate (the 9b343d3-shaped GR defect): its parameters are dead",
        "protects": "mechanism",
    },
    {
        "name": "attnres_query_not_used",
        "file": "dormouse/arms/attnres.py",
        "function": "AttnRes.begin",
        "old": "BlockAttnResState(embedding, self.block_size or 1, queries=self.queries,",
        "new": "BlockAttnResState(embedding, self.block_size or 1, queries=self.queries.detach() * 0,",
        "gates": [_T + "test_arm_parameters_move_the_logits_at_every_depth"],
        "why": "AttnRes reads with a constant query (the model's query table): the arm counts while its "
        "pseudo-queries move nothing",
        "protects": "mechanism",
    },
    {
        "name": "counter_outside_the_arm",
        "file": _MODEL,
        "function": "LoopedByteLM.forward",
        "old": "                self.counters.count_asked(self.arm.name)\n",
        "new": "                self.counters.count_asked(self.arm.name)\n                self.counters.count_ran(\"rezero\")\n",
        "gates": [_T + "test_selected_arm_counts_ran_equal_asked_and_others_zero"],
        "why": "a counter noted by the loop for every arm (seed 002 gate 4): the unselected ReZero leaks counts",
        "protects": "counters",
    },
    {
        "name": "counters_shared_by_two_models",
        "file": _ARMS,
        "function": "ResidualArm.__init__",
        "old": "        self.counters = ProbeCounters()\n",
        "new": "        self.counters = ResidualArm.__dict__.get(\"shared_counters\") or ProbeCounters()\n"
               "        ResidualArm.shared_counters = self.counters\n",
        "gates": [_T + "test_two_models_in_one_process_each_count_their_own_iterations"],
        "why": "the counters one object for every model in the process (a module-level PROBES): an A/B "
               "run's runs, or a reference model beside the trained one, count into each other's window, and "
               "pausing one pauses all",
        "protects": "counters",
    },
    {
        "name": "readout_before_the_iterations_last_sublayer",
        "file": _MODEL,
        "function": "LoopedByteLM.forward",
        "old": "                state = regions.absorb(state, slot, out)\n",
        "new": "                state = regions.absorb(state, slot, out) if j == 0 or k == 0 else state\n",
        "gates": [_T + "test_attnres_readout_after_iteration_k_depends_on_iteration_k"],
        "why": "iteration k's MLP output never becomes a source: readout k misses iteration k's work",
        "protects": "mechanism",
    },
    {
        "name": "two_phase_eval_merges_without_rescale",
        "file": "dormouse/arms/attnres.py",
        "function": "AttnRes._two_phase_input",
        "old": "        merge = online_softmax_merge\n",
        "new": "        merge = lambda m1, l1, o1, m2, l2, o2: (m1, l1 + l2, o1 + o2)  # noqa: E731\n",
        "gates": [_T + "test_block_two_phase_eval_gives_the_direct_forms_logits"],
        "why": "the eval-time two-phase merge adds the intra-block partial without the online-softmax rescale",
        "protects": "mechanism",
    },
    {
        "name": "eval_never_takes_the_two_phase_path",
        "file": "dormouse/arms/attnres.py",
        "function": "AttnRes.uses_two_phase",
        "old": "        return not self.training and self.block_size is not None and self.query_proj is None\n",
        "new": "        return False\n",
        "gates": [_T + "test_block_two_phase_eval_gives_the_direct_forms_logits"],
        "why": "the two-phase schedule is never run, so its equivalence test would be vacuous",
        "protects": "mechanism",
    },
]

PERTURBATIONS.append(
    {
        "name": "optimizer_step_dropped",
        "file": "dormouse/train/loop.py",
        "function": "train_step",
        "old": "        run.optimizer.step()\n",
        "new": "",
        "gates": ["tests/train/test_train.py::test_each_arm_trains_end_to_end_through_the_cli"],
        "why": "the loop computes and clips gradients but never steps: every counter fires, nothing learns "
        "(happened once while this loop was edited; the end-to-end test then asserted only file contents)",
        "protects": "training loop",
    }
)
