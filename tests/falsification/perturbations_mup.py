"""Perturbations of µP (tests/falsification; format in perturbations_attnres.py). ``protects`` names what a defect
here would break."""

from __future__ import annotations

_MUP = "dormouse/ops/mup.py"
_MODEL = "dormouse/model/looped.py"
_T = "tests/model/test_mup.py::"
_FLAT = _T + "test_mup_keeps_every_coordinate_flat_across_width_at_init_and_after_steps"
_ARM = _T + "test_mup_keeps_each_arm_parameters_update_flat_in_its_equations_measure"

PERTURBATIONS: list[dict] = [
    {
        "name": "mup_hidden_rate_not_divided_by_the_width",
        "file": _MUP,
        "function": "_LR",
        "old": "HIDDEN: lambda m: 1.0 / m,",
        "new": "HIDDEN: lambda m: 1.0,",
        "gates": [_FLAT],
        "why": "the width x width matrices train at the base rate at every width: their updates grow with the "
               "width and a rate tuned at the base width diverges or under-trains wider models",
        "protects": "training loop",
    },
    {
        "name": "mup_hidden_init_not_scaled",
        "file": _MODEL,
        "function": "LoopedByteLM.init_weights",
        "old": "                    std *= mup.init_scale(mup.HIDDEN, self.width_mult)\n",
        "new": "                    std *= 1.0\n",
        "gates": [_FLAT],
        "why": "the hidden matrices keep std 0.02 at every width: activations at init grow with the width",
        "protects": "training loop",
    },
    {
        "name": "mup_output_multiplier_dropped",
        "file": _MODEL,
        "function": "LoopedByteLM.readout",
        "old": "            x = x / self.width_mult\n",
        "new": "            x = x\n",
        "gates": [_FLAT],
        "why": "the logits lose µP's 1/m: they grow with the width at init and under training",
        "protects": "training loop",
    },
    {
        "name": "mup_every_rate_divided_by_the_width",
        "file": _MUP,
        "function": "_LR",
        "old": "VECTOR: lambda m: 1.0, HIDDEN: lambda m: 1.0 / m,",
        "new": "VECTOR: lambda m: 1.0 / m, HIDDEN: lambda m: 1.0 / m,",
        "gates": [_FLAT],
        "why": "the embedding and the gains train at rate / m too: their updates vanish as the width grows",
        "protects": "training loop",
    },
    {
        "name": "attnres_queries_trained_as_vectors",
        "file": "dormouse/arms/attnres.py",
        "function": "AttnRes",
        "old": "mup_roles = {\"queries\": READOUT,",
        "new": "mup_roles = {\"queries\": VECTOR,",
        "gates": [_ARM],
        "why": "Full AttnRes's pseudo-queries, which contract the width (w_l . k), train at the base rate: their "
               "effect on the depth mix grows with the width under µP",
        "protects": "arms' set-up",
    },
    {
        "name": "mhc_projections_trained_as_vectors",
        "file": "dormouse/arms/mhc.py",
        "function": "MHC",
        "old": "mup_roles = {\"weight\": READOUT,",
        "new": "mup_roles = {\"weight\": \"vector\",",
        "gates": [_ARM],
        "why": "mHC's projections over the flattened streams train at the base rate: the maps' update grows with "
               "the width",
        "protects": "arms' set-up",
    },
    {
        "name": "mup_width_multiplier_from_the_wrong_base",
        "file": _MUP,
        "function": "width_mult",
        "old": "    return int(model_cfg.d_model) / int(model_cfg.mup_base_width)",
        "new": "    return int(model_cfg.d_model) / int(model_cfg.mup_base_head_dim)",
        "gates": [_T + "test_mup_at_its_base_width_is_the_standard_parametrization"],
        "why": "m is read against the base head dim: at its base width µP is no longer the standard "
               "parametrisation, and every learning rate tuned there is off by the ratio",
        "protects": "training loop",
    },
    {
        "name": "mup_attention_scale_one_over_root_head_dim",
        "file": _MUP,
        "function": "attention_scale",
        "old": "    return None if head_dim == base else math.sqrt(base) / head_dim",
        "new": "    return None",
        "gates": [_T + "test_mup_attention_scales_the_logits_by_one_over_the_head_dimension"],
        "why": "µP keeps 1/sqrt(d_head): a ladder that grows the head dimension grows the attention logits",
        "protects": "mechanism",
    },
    {
        "name": "loop_ignores_the_groups_mup_rate",
        "file": "dormouse/train/loop.py",
        "function": "train_step",
        "old": "        group[\"lr\"] = lr_at(loop.step, cfg) * group.get(\"lr_scale\", 1.0)\n",
        "new": "        group[\"lr\"] = lr_at(loop.step, cfg)\n",
        "gates": [_T + "test_the_training_loop_runs_each_group_at_its_mup_rate"],
        "why": "the loop sets every group to the schedule's rate: µP's rates are computed and never used",
        "protects": "training loop",
    },
    {
        "name": "mup_undeclared_arm_parameter_trained_as_a_vector",
        "file": _MODEL,
        "function": "LoopedByteLM._mup_role",
        "old": "            if role is None:\n",
        "new": "            if role is None:\n                return mup.VECTOR\n",
        "gates": [_T + "test_mup_refuses_an_arm_parameter_without_a_role"],
        "why": "an arm parameter without a declared role silently trains at the base rate under µP",
        "protects": "arms' set-up",
    },
    {
        "name": "shared_params_without_the_final_norm",
        "file": "dormouse/model/shape.py",
        "function": "shared_params",
        "old": "4 * d * d + 3 * d * h + 3 * d",
        "new": "4 * d * d + 3 * d * h + 2 * d",
        "gates": ["tests/model/test_flops.py::test_the_shared_parameter_count_is_torchs_count_less_the_arms"],
        "why": "the analytic count misses the final RMSNorm's gain: a budget in bytes per parameter counts d "
               "parameters too few, silently, at every width",
        "protects": "data/eval",
    },
]
