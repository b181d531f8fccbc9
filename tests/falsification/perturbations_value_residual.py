"""Perturbations of the value residual (dormouse/arms/value_residual.py) and the attention seam that carries it
(tests/falsification; format in perturbations_attnres.py): the wrong values mixed, the wrong weights, the wrong
tensor, the seam dropped by the driver."""

from __future__ import annotations

_ARM = "dormouse/arms/value_residual.py"
_T = "tests/arms/test_value_residual.py::"
_REF = _T + "test_forward_in_float64_equals_the_reference_written_from_the_equations"
_GOLD = _T + "test_toy_two_attention_slots_give_the_hand_computed_outputs"

_MIX = ("        if state.v_first is None:\n"
        "            state.v_first = v\n"
        "        i = slot // 2\n"
        "        mixed = self.lambda1[i].to(v.dtype) * state.v_first + self.lambda2[i].to(v.dtype) * v\n")

PERTURBATIONS: list[dict] = [
    {
        "name": "value_residual_v_first_from_the_current_slot",
        "file": _ARM,
        "function": "ValueResidual.mix_attention",
        "old": "        mixed = self.lambda1[i].to(v.dtype) * state.v_first + self.lambda2[i].to(v.dtype) * v\n",
        "new": "        mixed = self.lambda1[i].to(v.dtype) * v + self.lambda2[i].to(v.dtype) * v\n",
        "gates": [_GOLD, _REF],
        "why": "every slot mixes its own values with themselves: (l1 + l2) V_s, a per-slot value scale; no slot ever "
               "reads the first slot's values, the mechanism's whole point",
        "protects": "mechanism",
    },
    {
        "name": "value_residual_lambdas_swapped",
        "file": _ARM,
        "function": "ValueResidual.mix_attention",
        "old": "self.lambda1[i].to(v.dtype) * state.v_first + self.lambda2[i].to(v.dtype) * v",
        "new": "self.lambda2[i].to(v.dtype) * state.v_first + self.lambda1[i].to(v.dtype) * v",
        "gates": [_GOLD, _REF],
        "why": "lambda_1 weighs the slot's own values and lambda_2 V_first: at ResFormer's 0.5/0.5 invisible, but the "
               "probe then reports each weight as the other and lambda_init weighs the wrong tensor",
        "protects": "mechanism",
    },
    {
        "name": "value_residual_mix_on_the_keys",
        "file": _ARM,
        "function": "ValueResidual.mix_attention",
        "old": _MIX + "        self.counters.count_ran(self.name)  # the attention slot's aggregation: the values' mix\n"
                      "        return q, k, mixed\n",
        "new": ("        if state.v_first is None:\n"
                "            state.v_first = k\n"
                "        i = slot // 2\n"
                "        mixed = self.lambda1[i].to(k.dtype) * state.v_first + self.lambda2[i].to(k.dtype) * k\n"
                "        self.counters.count_ran(self.name)\n"
                "        return q, mixed, v\n"),
        "gates": [_GOLD, _REF],
        "why": "the first slot's keys mixed into every slot's keys (the seam's other tensor): what the attention "
               "reads is then unchanged and only where it looks moves",
        "protects": "mechanism",
    },
    {
        "name": "value_residual_seam_only_in_the_first_iteration",
        "file": "dormouse/model/looped.py",
        "function": "LoopedByteLM.forward",
        "old": "                if mixes and j == 0:",
        "new": "                if mixes and j == 0 and k == 0:",
        "gates": ["tests/arms/test_arms.py::test_selected_arm_counts_ran_equal_asked_and_others_zero[value_residual]",
                  _T + "test_ran_counts_the_mix_at_attention_slots_and_the_residual_at_mlp_slots", _REF],
        "why": "the driver hands the seam to iteration 1's attention only: the later slots attend with their own "
               "values, the very slots the value residual exists for, while slot 0 still mixes",
        "protects": "mechanism",
    },
    {
        "name": "value_residual_v_first_after_its_mix",
        "file": _ARM,
        "function": "ValueResidual.mix_attention",
        "old": _MIX,
        "new": ("        i = slot // 2\n"
                "        own = v if state.v_first is None else state.v_first\n"
                "        mixed = self.lambda1[i].to(v.dtype) * own + self.lambda2[i].to(v.dtype) * v\n"
                "        if state.v_first is None:\n"
                "            state.v_first = mixed\n"),
        "gates": [_GOLD, _REF],
        "why": "V_first kept after slot 0's own mix, (l1_0 + l2_0) V_0, not the projection's V_0 (modded-nanogpt "
               "returns the unmixed v1): identical while l1_0 + l2_0 = 1, wrong once they are learned apart",
        "protects": "mechanism",
    },
    {
        "name": "seamed_attention_regions_drop_the_mix",
        "file": "dormouse/model/looped.py",
        "function": "_SeamedAttention.__call__",
        "old": "(qkv if mix is None else mix(*qkv))",
        "new": "qkv",
        "gates": ["tests/model/test_compile_regions.py::test_regions_give_eager_losses_gradients_and_counts"
                  "[value_residual]"],
        "why": "under the regional compile scope the attention regions skip the arm's seam: the compiled training "
               "forward is plain pre-norm attention while eval (eager) mixes the values, and the lambdas get no "
               "gradient",
        "protects": "training loop",
    },
]
