"""Perturbations of the AttnRes read path's precision and speed work (issues 10 and 11): scripts/falsify.py.

Format: see scripts/perturbations_attnres.py; each dict also names what its gate ``protects`` (one of
"mechanism", "kernels", "training loop", "data/eval", "arms' set-up", "A/B rule", "counters").
"""

from __future__ import annotations

_ATTNRES = "dormouse/attnres.py"
_TA = "tests/test_attnres.py::"
_TARMS = "tests/test_arms.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "phase1_scores_under_autocast",
        "file": _ATTNRES,
        "old": "    with _outside_autocast(x.device):\n        x = x.to(_compute_dtype(x.dtype))\n",
        "new": "    if True:\n        x = x.to(_compute_dtype(x.dtype))\n",
        "gates": [_TARMS + "test_block_two_phase_eval_under_autocast_reads_in_float32"],
        "why": "issue 10's defect: Phase 1 scores (x @ q) left inside CUDA bf16 autocast, so Block AttnRes is "
        "evaluated on bf16 scores while it trains through the fp32 path",
        "protects": "data/eval",
    },
    {
        "name": "direct_read_under_autocast",
        "file": _ATTNRES,
        "old": "    with _outside_autocast(sources[0].device):\n",
        "new": "    if True:\n",
        "gates": [_TA + "test_depth_attend_under_autocast_is_its_fp32_result"],
        "why": "issue 10's defect: the torch read's score matmul left inside bf16 autocast (every CUDA run with "
        "model.kernel=torch reads with ~1 % score error at |s| ~ 20)",
        "protects": "mechanism",
    },
    # --- the torch read's one-pass backward and its cached inverse RMS (issue 11) -----------------------
    {
        "name": "read_backward_without_the_g_dot_out_shift",
        "file": _ATTNRES,
        "old": "        ds = alpha * (g_dots - (alpha * g_dots).sum(dim=0))",
        "new": "        ds = alpha * g_dots",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "the softmax Jacobian without its - g . out term (sum_i alpha_i v_i = out dropped from the backward)",
        "protects": "mechanism",
    },
    {
        "name": "read_backward_without_the_key_norm_path",
        "file": _ATTNRES,
        "old": "        grad_r = list((ds * dots).unbind(0)) if need_r else [None] * n",
        "new": "        grad_r = [None] * n",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "no gradient through the key's RMS norm (the forward is unchanged: only a gradient gate sees it)",
        "protects": "mechanism",
    },
    {
        "name": "read_backward_without_the_query_term_in_dx",
        "file": _ATTNRES,
        "old": "                grad_x[i] = gx.addcmul_(c[i].unsqueeze(-1), q)",
        "new": "                grad_x[i] = gx",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "dx_i keeps the value path alpha_i g but loses the key's direct path ds_i r_i q",
        "protects": "mechanism",
    },
    {
        "name": "read_backward_query_gradient_without_the_norm",
        "file": _ATTNRES,
        "old": "        c = ds * torch.stack(rs)",
        "new": "        c = ds",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "dq and the key path use ds_i instead of ds_i r_i (the key's 1/rms forgotten in the backward)",
        "protects": "mechanism",
    },
    {
        "name": "stale_inverse_rms_of_the_partial",
        "file": _ATTNRES,
        "old": "        self._inv_rms.pop(1 + len(self._completed), None)  # the partial's entry: it just changed\n",
        "new": "",
        "gates": [_TA + "test_paths_agree_with_naive_reference"],
        "why": "the Block partial b_n^i changes at every push but keeps the inverse RMS of b_n^{i-1}",
        "protects": "mechanism",
    },
    # --- the probe counters inside the graph (issue 11) ------------------------------------------------
    {
        "name": "counter_skipped_while_compiling",
        "file": "dormouse/probes.py",
        "old": "        if not self._paused:\n            self._ran[_INDEX[arm]] += n\n",
        "new": (
            "        if not self._paused and not torch.compiler.is_compiling():\n"
            "            self._ran[_INDEX[arm]] += n\n"
        ),
        "gates": [_TARMS + "test_counters_keep_counting_under_torch_compile"],
        "why": "a side effect kept out of the compiled graph: a compiled model's arms then count nothing",
        "protects": "counters",
    },
    {
        "name": "counter_outside_the_graph",
        "file": "dormouse/probes.py",
        "old": "    def count_asked(self, arm: str, n: int = 1) -> None:\n",
        "new": "    @torch.compiler.disable\n    def count_asked(self, arm: str, n: int = 1) -> None:\n",
        "gates": [_TARMS + "test_whole_model_compiles_as_one_graph_with_eager_losses_and_counts"],
        "why": "the counter incremented outside the graph (the old design): a graph break at every sublayer",
        "protects": "counters",
    },
    # --- one online-softmax merge, guarding m = -inf (issue 9, item 7) ---------------------------------
    {
        "name": "merge_without_the_empty_state_guard",
        "file": _ATTNRES,
        "old": "    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)\n",
        "new": "    m_safe = m\n",
        "gates": [_TA + "test_online_softmax_merge_of_empty_states_weighs_them_zero"],
        "why": "the merge shifted by m itself: two empty partials give exp(-inf - (-inf)) = NaN",
        "protects": "mechanism",
    },
    {
        "name": "read_backward_under_autocast",
        "file": _ATTNRES,
        "old": "        with _outside_autocast(g.device):  # a backward inside autocast keeps the read's precision\n",
        "new": "        if True:\n",
        "gates": [_TA + "test_depth_attend_backward_under_autocast_is_its_fp32_backward"],
        "why": "the read's one-pass backward left to an enclosing autocast: its dq matmul runs in bf16",
        "protects": "mechanism",
    },
]
