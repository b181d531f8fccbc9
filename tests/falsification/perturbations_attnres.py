"""Perturbations of dormouse/ops/attnres.py: each is a defect the AttnRes gates must catch (tests/falsification).

Format (shared by every perturbations_*.py): ``name``, ``file`` (repo-relative), ``function`` (the def, class
or constant of ``file`` it perturbs, see locate.py), ``old`` (a pattern occurring exactly once inside it),
``new`` (its replacement), ``gates`` (pytest node ids run with ``-x``, most specific first), ``why`` (the
defect, and where it came from). Most of these are the defects recorded in
shared/seeds/ (the earlier implementation's) or the paper slips listed in attnres.md.
"""

from __future__ import annotations

_FILE = "dormouse/ops/attnres.py"
_T = "tests/arms/test_attnres.py::"

PERTURBATIONS: list[dict] = [
    # --- the score (Eq. 2-3) -------------------------------------------------------------------------
    {
        "name": "temperature_1_over_sqrt_d",
        "file": _FILE,
        "function": "_SoftmaxMix.forward",
        "old": "alpha = torch.softmax(scores, dim=0)",
        "new": "alpha = torch.softmax(scores / math.sqrt(xs[0].shape[-1]), dim=0)",
        "gates": [_T + "test_gold_fixture_a"],
        "why": "a 1/sqrt(d) temperature on the score; Eq. 2 has none (seed 000 §3)",
        "protects": "mechanism",
    },
    {
        "name": "l2_norm_instead_of_rmsnorm",
        "file": _FILE,
        "function": "_inv_rms",
        "old": "torch.rsqrt(x.pow(2).mean(dim=-1) + eps)",
        "new": "torch.rsqrt(x.pow(2).sum(dim=-1) + eps)",
        "gates": [_T + "test_gold_fixture_a"],
        "why": "the L2 norm (sum) in place of the mean-form RMSNorm of ref. [66]: keys sqrt(d) too small",
        "protects": "mechanism",
    },
    {
        "name": "eps_outside_the_root",
        "file": _FILE,
        "function": "_inv_rms",
        "old": "torch.rsqrt(x.pow(2).mean(dim=-1) + eps)",
        "new": "(torch.rsqrt(x.pow(2).mean(dim=-1)) + eps)",
        "gates": [_T + "test_gold_fixture_a"],
        "why": "eps added to 1/rms instead of inside the root: the eps rows of Fixture A move by ~1e-7",
        "protects": "mechanism",
    },
    {
        "name": "sqrt_d_form_with_sqrt_d_not_d",
        "file": _FILE,
        "function": "_effective_query",
        "old": "        q = q / q.shape[-1]\n",
        "new": "        q = q / math.sqrt(q.shape[-1])\n",
        "gates": [_T + "test_gold_fixture_a", _T + "test_sqrt_d_form_is_paper_form_with_w_over_d"],
        "why": "the sqrt_d ablation folded as w/sqrt(d): L2(x)/sqrt(d) is RMSNorm(x)/d, not /sqrt(d)",
        "protects": "mechanism",
    },
    {
        "name": "normalised_values",
        "file": _FILE,
        "function": "_SoftmaxMix.forward",
        "old": "            out.addcmul_(xs[i], alpha[i].unsqueeze(-1))",
        "new": "            out.addcmul_(xs[i] * rs[i].unsqueeze(-1), alpha[i].unsqueeze(-1))",
        "gates": [_T + "test_gold_fixture_a"],
        "why": "the weights applied to RMSNorm(v) instead of the raw v (Eq. 4 / Fig. 2: values are raw)",
        "protects": "mechanism",
    },
    {
        "name": "independent_sigmoid_gates_not_one_softmax",
        "file": _FILE,
        "function": "_SoftmaxMix.forward",
        "old": "alpha = torch.softmax(scores, dim=0)",
        "new": "alpha = torch.sigmoid(scores)",
        "gates": [_T + "test_gold_fixture_a"],
        "why": "per-source gates instead of one softmax jointly normalised over all sources (Table 5 fn 2)",
        "protects": "mechanism",
    },
    {
        "name": "softmax_in_the_input_dtype",
        "file": _FILE,
        "function": "_compute_dtype",
        "old": "    return torch.promote_types(dtype, torch.float32)\n",
        "new": "    return dtype\n",
        "gates": [_T + "test_bf16_sources_are_mixed_in_float32"],
        "why": "bf16 scores/softmax: ~2**-8 |s| error on every score (softmax must run in float32 at least)",
        "protects": "mechanism",
    },
    {
        "name": "gain_gradient_dropped",
        "file": _FILE,
        "function": "_effective_query",
        "old": "        q = q * gain.to(dtype)\n",
        "new": "        q = q * gain.detach().to(dtype)\n",
        "gates": [
            _T + "test_depth_attend_gradients_match_finite_differences",
            _T + "test_two_phase_gradients_match_finite_differences",
        ],
        "why": "the key-norm gain gets no gradient (forward unchanged: only the FD gradient gate can see it)",
        "protects": "mechanism",
    },
    # --- Block AttnRes source sets (Eq. 5-6) ----------------------------------------------------------
    {
        "name": "embedding_summed_into_block_1",
        "file": _FILE,
        "function": "BlockAttnResState.__init__",
        "old": "self._partial: Tensor | None = None",
        "new": "self._partial: Tensor | None = embedding",
        "gates": [_T + "test_gold_fixture_b_streaming"],
        "why": "b_0 folded into block 1 instead of a permanent separate source (seed D5)",
        "protects": "mechanism",
    },
    {
        "name": "completed_block_merged_twice",
        "file": _FILE,
        "function": "BlockAttnResState.push",
        "old": "            self._completed.append(self._partial)\n            self._partial = None\n",
        "new": "            self._completed.append(self._partial)\n",
        "gates": [_T + "test_gold_fixture_b_streaming"],
        "why": "a closed block stays in the running partial: it enters as b_n AND inside later partials (D8)",
        "protects": "mechanism",
    },
    {
        "name": "empty_partial_entered_as_zero_source",
        "file": _FILE,
        "function": "block_sources",
        "old": (
            "    if partial_terms:  # b_n^0 = 0 is not a source (Eq. 6, i = 1)\n"
            "        sources.append(_sum(partial_terms))\n"
        ),
        "new": "    sources.append(_sum(partial_terms) if partial_terms else torch.zeros_like(embedding))\n",
        "gates": [_T + "test_gold_fixture_b_block_sources"],
        "why": "the first layer of a block reads b_n^0 = 0 as an extra source (Eq. 6, i = 1 has none)",
        "protects": "mechanism",
    },
    # --- the two-phase schedule (Algorithm 1) --------------------------------------------------------
    {
        "name": "block_layer_reads_own_output",
        "file": _FILE,
        "function": "two_phase_block",
        "old": "        h = layer_input(i, partial)\n        y = layer_fn(i, h)\n",
        "new": (
            "        y = layer_fn(i, layer_input(i, partial))\n"
            "        h = layer_input(i, y if partial is None else partial + y)  # b_n^i: includes f_i\n"
            "        y = layer_fn(i, h)\n"
        ),
        "gates": [_T + "test_gold_fixture_b_two_phase"],
        "why": "layer i merges b_n^i (its own output) instead of b_n^{i-1}: Alg. 1 line 10 read 1-based",
        "protects": "mechanism",
    },
    {
        "name": "two_phase_merge_without_lse",
        "file": _FILE,
        "function": "phase2_input",
        "old": "merge(m1, l1, o1, m2, torch.ones_like(m2), p)",
        "new": "merge(m1, torch.ones_like(m2), o1 / l1.unsqueeze(-1), m2, torch.ones_like(m2), p)",
        "gates": [_T + "test_gold_fixture_b_two_phase"],
        "why": "Phase 1's normalised o merged with weight exp(m1) instead of exp(LSE) = l1 exp(m1)",
        "protects": "mechanism",
    },
    {
        "name": "partial_accumulates_layer_input",
        "file": _FILE,
        "function": "two_phase_block",
        "old": "        partial = y if partial is None else partial + y  # Eq. 5",
        "new": "        partial = h if partial is None else partial + h  # Eq. 5",
        "gates": [_T + "test_gold_fixture_b_two_phase"],
        "why": "the block partial sums the layer INPUTS h instead of the outputs f(h) (seed D10)",
        "protects": "mechanism",
    },
    {
        "name": "phase2_uses_the_blocks_first_query",
        "file": _FILE,
        "function": "two_phase_block.layer_input",
        "old": "partial, queries[i], gain=gain",
        "new": "partial, queries[0], gain=gain",
        "gates": [_T + "test_paths_agree_with_naive_reference"],
        "why": "the intra-block source scored with layer 1's query (Fixture B cannot see it: equal queries)",
        "protects": "mechanism",
    },
    {
        "name": "phase1_ignores_the_gain",
        "file": _FILE,
        "function": "phase1_stats",
        "old": "        q = _effective_query(queries, gains, form, x.dtype)\n",
        "new": "        q = _effective_query(queries, None, form, x.dtype)\n",
        "gates": [_T + "test_paths_agree_with_naive_reference"],
        "why": "Phase 1 scores without the key-norm gain while Phase 2 uses it (Fixture B has gain 1)",
        "protects": "mechanism",
    },
    {
        "name": "merge_without_rescaling_o1",
        "file": "kernels/merge_torch.py",  # the one merge (dormouse.ops.attnres.online_softmax_merge)
        "function": "merge_partials_torch",
        "old": "w1.unsqueeze(-1) * o1 + w2.unsqueeze(-1) * o2",
        "new": "o1 + w2.unsqueeze(-1) * o2",
        "gates": [_T + "test_online_softmax_merge_matches_one_joint_softmax"],
        "why": "the online-softmax merge forgets e^{m1-m} on o1 when the new max comes from the other side",
        "protects": "mechanism",
    },
]
