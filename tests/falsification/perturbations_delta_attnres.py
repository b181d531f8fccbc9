"""Perturbations of Delta AttnRes (dormouse/arms/delta_attnres.py; format in perturbations_attnres.py): the read
replacing the stream (Full AttnRes's form), the read computed but never added, cumulative states as sources, a
detached query, the softmax over channels instead of depth."""

from __future__ import annotations

_FILE = "dormouse/arms/delta_attnres.py"
_T = "tests/arms/test_delta_attnres.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "delta_read_replaces_the_stream",
        "file": _FILE,
        "function": "DeltaAttnRes._added_read",
        "old": "        return state.stream + mix\n",
        "new": "        return mix\n",
        "gates": [_T + "test_gold_toy_two_channels_by_hand"],
        "why": "the sublayer reads the depth mixture alone, Full AttnRes's replacement, not x + the mixture",
        "protects": "mechanism",
    },
    {
        "name": "delta_read_never_added",
        "file": _FILE,
        "function": "DeltaAttnRes.sublayer_input",
        "old": "u = state.stream if slot == 0 else self._added_read(state, slot - 1)",
        "new": "u = state.stream",
        "gates": [_T + "test_gold_toy_two_channels_by_hand",
                  "tests/arms/test_arms.py::test_arm_parameters_move_the_logits_at_every_depth[delta_attnres]"],
        "why": "every sublayer reads x, f(x) instead of f(u): pre-norm with a live counter and dead queries",
        "protects": "mechanism",
    },
    {
        "name": "delta_sources_are_the_stream",
        "file": _FILE,
        "function": "DeltaAttnRes.absorb",
        "old": "        state.blocks.push(out)\n",
        "new": "        state.blocks.push(state.stream + out)\n",
        "gates": [_T + "test_gold_toy_two_channels_by_hand"],
        "why": "the sources are the cumulative states x_l (upstream's full_additive mode), not the deltas f_l: "
               "the contrast the method is named for",
        "protects": "mechanism",
    },
    {
        "name": "delta_query_detached",
        "file": _FILE,
        "function": "DeltaAttnRes.begin",
        "old": "queries=self.queries,",
        "new": "queries=self.queries.detach(),",
        "gates": [_T + "test_gradients_match_finite_differences[none]"],
        "why": "the pseudo-queries get no gradient: the depth weights stay uniform for the whole run",
        "protects": "mechanism",
    },
    {
        "name": "delta_softmax_not_over_depth",
        "file": "dormouse/ops/attnres.py",
        "function": "_SoftmaxMix.forward",
        "old": "alpha = torch.softmax(scores, dim=0)",
        "new": "alpha = torch.softmax(scores, dim=-1)",
        "gates": [_T + "test_gold_toy_two_channels_by_hand"],
        "why": "the read's softmax runs over the positions axis of the scores, not over the sources (depth)",
        "protects": "mechanism",
    },
]
