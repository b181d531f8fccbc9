"""Perturbations of dormouse/arms/mhc.py: each is a defect of manifold-constrained hyper-connections that the mHC
gates must catch (tests/falsification; format in perturbations_attnres.py)."""

from __future__ import annotations

_FILE = "dormouse/arms/mhc.py"
_T = "tests/arms/test_mhc.py::"
_GOLD = _T + "test_toy_maps_inputs_streams_and_readout_are_the_hand_computed_values"
_REF = _T + "test_the_arm_equals_the_float64_reference_on_random_inputs"

PERTURBATIONS: list[dict] = [
    {
        "name": "mhc_comb_applied_untransposed",
        "file": _FILE,
        "function": "MHC.mix",
        "old": "torch.matmul(comb.transpose(-1, -2), streams)",
        "new": "torch.matmul(comb, streams)",
        "gates": [_GOLD, _REF],
        "why": "comb X in place of comb^T X: new stream k must be sum_j comb[j, k] X_j (DeepSeek-V4 consumes comb "
               "transposed); Sinkhorn's comb is not symmetric, so the streams mix the wrong way",
        "protects": "mechanism",
    },
    {
        "name": "mhc_sinkhorn_rows_only",
        "file": _FILE,
        "function": "sinkhorn",
        "old": "axis = 0 if step % 2 == 0 else 1",
        "new": "axis = 1",
        "gates": [_GOLD, _T + "test_comb_is_doubly_stochastic_to_the_birkhoff_bound_of_its_iterations"],
        "why": "the column normalisation dropped: comb is the row softmax alone, row-stochastic but not doubly "
               "stochastic, so comb^T X no longer preserves the streams' mean",
        "protects": "mechanism",
    },
    {
        "name": "mhc_post_without_factor_2",
        "file": _FILE,
        "function": "MHC.maps",
        "old": "post = 2 * torch.sigmoid(",
        "new": "post = torch.sigmoid(",
        "gates": [_GOLD, _REF],
        "why": "post = sigmoid(.) in place of 2 sigmoid(.): every sublayer output enters the streams at half weight "
               "(post starts at 1/2, not 1)",
        "protects": "mechanism",
    },
    {
        "name": "mhc_pre_without_sigmoid",
        "file": _FILE,
        "function": "MHC.maps",
        "old": "pre = torch.sigmoid(pre_w * a_pre + pre_b) + self.eps",
        "new": "pre = pre_w * a_pre + pre_b + self.eps",
        "gates": [_GOLD, _REF],
        "why": "the raw logits as pre: the sublayer reads an unbounded, signed combination of the streams (near 0 "
               "at init) in place of sigmoid(.) + eps",
        "protects": "mechanism",
    },
    {
        "name": "mhc_head_reads_stream_0",
        "file": _FILE,
        "function": "MHC.readout_input",
        "old": "return collapse(self.head_weights(x, k), x).to(streams.dtype)",
        "new": "return x[..., 0, :].to(streams.dtype)",
        "gates": [_GOLD, _REF],
        "why": "the head does not collapse the streams (HyperHead) but reads stream 0 only: the other n - 1 streams "
               "never reach the logits directly",
        "protects": "mechanism",
    },
]
