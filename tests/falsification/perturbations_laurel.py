"""Perturbations of the LAuReL arm (dormouse/arms/laurel.py; format in perturbations_attnres.py): defects of
Eq. 3 / Eq. 5 and of the init that makes LAuReL the pre-norm residual at step 0."""

from __future__ import annotations

_FILE = "dormouse/arms/laurel.py"
_T = "tests/arms/test_laurel.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "laurel_beta_scales_the_update",
        "file": _FILE,
        "function": "Laurel.absorb",
        "old": "torch.addcmul(beta.to(state.dtype) * carried, alpha.to(output.dtype), output)",
        "new": "torch.addcmul(carried, (alpha * beta).to(output.dtype), output)",
        "gates": [_T + "test_laurel_states_match_a_float64_reference_of_eq5"],
        "why": "beta multiplies f(x) instead of the carried x (+ B A x): Eq. 5's residual weight lands on the update",
        "protects": "mechanism",
    },
    {
        "name": "laurel_b_not_zero_initialised",
        "file": _FILE,
        "function": "Laurel.__init__",
        "old": "nn.Parameter(torch.zeros(self.n_slots, d_model, self.rank))",
        "new": "nn.Parameter(torch.full((self.n_slots, d_model, self.rank), 0.01))",
        "gates": [_T + "test_laurel_at_init_gives_pre_norms_logits"],
        "why": "B_s starts off zero (§3.3 initialises it to 0, as LoRA): LAuReL-LR is no longer pre-norm at init",
        "protects": "mechanism",
    },
    {
        "name": "laurel_low_rank_product_transposed",
        "file": _FILE,
        "function": "Laurel.low_rank",
        "old": "        down = F.linear(state, self.lr_down_weight[slot].to(state.dtype))\n"
               "        return F.linear(down, self.lr_up_weight[slot].to(down.dtype))\n",
        "new": "        down = F.linear(state, self.lr_up_weight[slot].T.to(state.dtype))\n"
               "        return F.linear(down, self.lr_down_weight[slot].T.to(down.dtype))\n",
        "gates": [_T + "test_laurel_states_match_a_float64_reference_of_eq5"],
        "why": "the low-rank term computes (B A)^T x = A^T B^T x: the shapes still fit, the map is the wrong one",
        "protects": "mechanism",
    },
    {
        "name": "laurel_a_init_without_the_rank_in_its_scale",
        "file": _FILE,
        "function": "Laurel._a_init",
        "old": "1.0 / math.sqrt(r * d)",
        "new": "1.0 / math.sqrt(d)",
        "gates": [_T + "test_laurel_a_starts_column_orthogonal_at_one_over_sqrt_rd"],
        "why": "A_s's column-orthogonal init scaled 1/sqrt(D) instead of §3.3's 1/sqrt(r D): sqrt(r) too large",
        "protects": "mechanism",
    },
    {
        "name": "laurel_sigmoid_beta_equals_alpha",
        "file": _FILE,
        "function": "Laurel.residual_weights",
        "old": "return torch.sigmoid(a), torch.sigmoid(-a)",
        "new": "return torch.sigmoid(a), torch.sigmoid(a)",
        "gates": [_T + "test_laurel_states_match_a_float64_reference_of_eq5"],
        "why": "the one-parameter sigmoid form gives beta = sigmoid(a), not 1 - alpha (§2.1): the pair no longer "
               "trades the update against the carry",
        "protects": "mechanism",
    },
]
