"""Perturbations of the AttnRes read path's precision and speed work (issues 10 and 11): scripts/falsify.py.

Format: see scripts/perturbations_attnres.py; each dict also names what its gate ``protects`` (one of
"mechanism", "kernels", "training loop", "data/eval", "arms' set-up", "A/B rule", "counters").
"""

from __future__ import annotations

_ATTNRES = "dormouse/attnres.py"
_TA = "tests/test_attnres.py::"
_TARMS = "tests/test_arms.py::"
_NORM = "dormouse/norm.py"
_TN = "tests/test_norm.py::"

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
        "name": "mix_backward_value_path_without_alpha",
        "file": _ATTNRES,
        "old": "        grad_x = [g * alpha[i].unsqueeze(-1) if ctx.needs_input_grad[1 + i]",
        "new": "        grad_x = [g if ctx.needs_input_grad[1 + i]",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "the value path dx_i = alpha_i g loses its weight: every source gets the whole output gradient",
        "protects": "mechanism",
    },
    {
        "name": "mix_backward_without_the_score_gradient",
        "file": _ATTNRES,
        "old": "        grad_s = ds if ctx.needs_input_grad[0] else None",
        "new": "        grad_s = None",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "the softmax's gradient never reaches the scores: queries, gains and the key path get nothing "
        "(the forward is unchanged: only a gradient gate sees it)",
        "protects": "mechanism",
    },
    # --- the query table's key scores (issue 11): one [..., d] x [d, R] product per source ---------------
    {
        "name": "key_scores_backward_without_the_norm_path",
        "file": _ATTNRES,
        "old": "                grad_x = torch.addcmul(g_dots @ table, x, (-g_r * r.pow(3) / d).unsqueeze(-1))",
        "new": "                grad_x = g_dots @ table",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "no gradient through the key's RMS norm (dr/dx = -r^3 x / d dropped from the hand-written backward)",
        "protects": "mechanism",
    },
    {
        "name": "key_scores_backward_without_the_query_term_in_dx",
        "file": _ATTNRES,
        "old": "                grad_x = torch.addcmul(g_dots @ table, x, (-g_r * r.pow(3) / d).unsqueeze(-1))",
        "new": "                grad_x = x * (-g_r * r.pow(3) / d).unsqueeze(-1)",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "dx keeps the key's norm path but loses its direct path (gs r) @ Q",
        "protects": "mechanism",
    },
    {
        "name": "key_scores_query_gradient_without_the_norm",
        "file": _ATTNRES,
        "old": "                grad_table = g_dots.reshape(-1, rows).T @ x.reshape(-1, d)",
        "new": "                grad_table = gs.reshape(-1, rows).T @ x.reshape(-1, d)",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "dQ uses gs instead of gs r (the key's 1/rms forgotten in the query's gradient)",
        "protects": "mechanism",
    },
    {
        "name": "query_table_gain_detached",
        "file": _ATTNRES,
        "old": "            return _effective_query(queries, gains, form, _compute_dtype(self.embedding.dtype))",
        "new": "            return _effective_query(queries, None if gains is None else gains.detach(), form, "
        "_compute_dtype(self.embedding.dtype))",
        "gates": [_TA + "test_streaming_read_gradients_match_autograd_of_the_float64_reference"],
        "why": "a backward missing the gain term: the key gain scores the sources but never learns",
        "protects": "mechanism",
    },
    {
        "name": "stale_scores_of_the_partial",
        "file": _ATTNRES,
        "old": "        self._table_scores.pop(1 + len(self._completed), None)  # and its scores\n",
        "new": "",
        "gates": [_TA + "test_paths_agree_with_naive_reference"],
        "why": "the Block partial b_n^i changes at every push but keeps the scores of b_n^{i-1}",
        "protects": "mechanism",
    },
    {
        "name": "key_scores_backward_under_autocast",
        "file": _ATTNRES,
        "old": "        with _outside_autocast(gs.device):\n",
        "new": "        if True:\n",
        "gates": [_TA + "test_query_table_read_under_autocast_is_its_fp32_result_and_backward"],
        "why": "the key scores' backward left to an enclosing autocast: its matmuls run in bf16",
        "protects": "mechanism",
    },
    # --- RoPE and the SwiGLU gate with hand-written backwards (issue 11) ----------------------------------
    {
        "name": "rope_backward_rotates_forward",
        "file": "dormouse/model.py",
        "old": "grad[:, :, :2], sign=-1.0)",
        "new": "grad[:, :, :2], sign=1.0)",
        "gates": ["tests/test_model.py::test_attention_gradients_match_autograd_of_the_float64_reference",
                  "tests/test_model.py::test_rope_backward_is_autograd_of_the_float64_rotation_with_either_output_unused"],
        "why": "the RoPE backward rotates by +theta instead of the transpose's -theta (the forward is unchanged)",
        "protects": "mechanism",
    },
    {
        "name": "rope_halves_not_swapped",
        "file": "dormouse/model.py",
        "old": "torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=-sign)",
        "new": "torch.mul(x1, cos, out=out1).addcmul_(x1, sin, value=-sign)",
        "gates": ["tests/test_model.py::test_attention_matches_the_float64_reference"],
        "why": "the first half is multiplied by its own sin instead of its partner's: not a rotation",
        "protects": "mechanism",
    },
    {
        "name": "rope_value_gradient_dropped",
        "file": "dormouse/model.py",
        "old": "        grad[:, :, 2].copy_(g_v)\n",
        "new": "        grad[:, :, 2].zero_()\n",
        "gates": ["tests/test_model.py::test_attention_gradients_match_autograd_of_the_float64_reference",
                  "tests/test_model.py::test_rope_backward_is_autograd_of_the_float64_rotation_with_either_output_unused"],
        "why": "the v part of the projection's gradient left at zero: W_v never learns",
        "protects": "mechanism",
    },
    {
        "name": "swiglu_up_gradient_without_the_activation",
        "file": "dormouse/model.py",
        "old": "torch.mul(g, silu_a, out=grad_b)",
        "new": "torch.mul(g, a, out=grad_b)",
        "gates": ["tests/test_model.py::test_swiglu_and_its_gradients_match_the_float64_reference"],
        "why": "the up projection's gradient takes the gate's pre-activation a instead of silu(a)",
        "protects": "mechanism",
    },
    {
        "name": "swiglu_gate_gradient_without_up",
        "file": "dormouse/model.py",
        "old": "aten.silu_backward.grad_input(g * b, a,",
        "new": "aten.silu_backward.grad_input(g, a,",
        "gates": ["tests/test_model.py::test_swiglu_and_its_gradients_match_the_float64_reference"],
        "why": "the gate's gradient misses the factor b (the up projection): silu'(a) g instead of silu'(a) g b",
        "protects": "mechanism",
    },
    {
        "name": "rope_bf16_and_compiled_form_rotates_the_wrong_way",
        "file": "dormouse/model.py",
        "old": "out1.copy_(torch.addcmul(x1 * cos, x2, sin, value=-sign))",
        "new": "out1.copy_(torch.addcmul(x1 * cos, x2, sin, value=sign))",
        "gates": ["tests/test_model.py::test_sublayers_under_bf16_autocast_stay_within_bf16_rounding_of_float32",
                  "tests/test_model.py::test_rope_keeps_the_input_dtype_and_rotates_in_float32",
                  "tests/test_arms.py::test_whole_model_compiles_as_one_graph_with_eager_losses_and_counts"],
        "why": "the form bf16 (CUDA autocast) and train.compile take rotates the first half the wrong way; "
        "eager float32 and float64 are right",
        "protects": "mechanism",
    },
    {
        "name": "swiglu_compiled_backward_without_the_activation",
        "file": "dormouse/model.py",
        "old": "torch.ops.aten.silu_backward(g * b, a), g * silu_a)",
        "new": "torch.ops.aten.silu_backward(g * b, a), g * a)",
        "gates": ["tests/test_arms.py::test_whole_model_compiles_as_one_graph_with_eager_losses_and_counts"],
        "why": "the compiled SwiGLU backward's up gradient takes a instead of silu(a): compiled and eager training "
        "differ",
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
        "old": "        if not self._paused:\n"
               "            slot = self._slot(arm)  # first: a sync replaces the tensor\n",
        "new": "        if not self._paused and not torch.compiler.is_compiling():\n"
               "            slot = self._slot(arm)  # first: a sync replaces the tensor\n",
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
        "file": "kernels/merge_torch.py",  # the one merge (dormouse.attnres.online_softmax_merge)
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
    # --- RMSNorm's hand-written CPU backward (issue 11, fourth pass) -----------------------------------
    {
        "name": "rms_norm_backward_without_the_projection_term",
        "file": _NORM,
        "old": "torch.addcmul(u, x_hat, mean_u_x_hat, value=-1.0)",
        "new": "torch.addcmul(u, x_hat, mean_u_x_hat, value=0.0)",
        "gates": [_TN + "test_rms_norm_and_its_gradients_match_autograd_of_the_float64_reference",
                  _TN + "test_rms_norm_gradients_match_finite_differences"],
        "why": "dx = r u, the gradient through the normaliser r(x) (the term -r x_hat mean(u x_hat)) dropped",
        "protects": "mechanism",
    },
    {
        "name": "rms_norm_sum_of_squares_for_the_mean",
        "file": _NORM,
        "old": ".square_().div_(x.shape[-1]).add_(eps)",
        "new": ".square_().add_(eps)",
        "gates": [_TN + "test_rms_norm_and_its_gradients_match_autograd_of_the_float64_reference"],
        "why": "the L2 norm for the RMS: every normalised activation sqrt(d) times too small",
        "protects": "mechanism",
    },
    {
        "name": "rms_norm_gain_gradient_without_x_hat",
        "file": _NORM,
        "old": "(g * x_hat).flatten(0, -2).sum(0)",
        "new": "g.flatten(0, -2).sum(0)",
        "gates": [_TN + "test_rms_norm_and_its_gradients_match_autograd_of_the_float64_reference"],
        "why": "the gain's gradient sums dy alone, not dy * x_hat",
        "protects": "mechanism",
    },
    {
        "name": "rms_norm_default_eps_not_the_machine_epsilon",
        "file": _NORM,
        "old": "        eps = torch.finfo(x.dtype).eps\n",
        "new": "        eps = 1e-6\n",
        "gates": [_TN + "test_default_eps_is_the_machine_epsilon_of_the_input_dtype"],
        "why": "GR's gate input (eps=None) normalised with another eps than F.rms_norm's default",
        "protects": "mechanism",
    },
    {
        "name": "rms_norm_bf16_maths_in_bf16",
        "file": _NORM,
        "old": "xc = x if x.dtype in (torch.float32, torch.float64) else x.float()",
        "new": "xc = x",
        "gates": [_TN + "test_bf16_input_is_normalised_in_float32_and_rounded_once"],
        "why": "a bf16 input normalised in bf16 (several roundings) instead of in float32 and rounded once",
        "protects": "mechanism",
    },
    {
        "name": "rms_norm_cpu_back_to_the_composite",
        "file": _NORM,
        "old": "    if x.device.type != \"cpu\" or torch.compiler.is_compiling():\n",
        "new": "    if True:\n",
        "gates": [_TN + "test_cpu_eager_rms_norm_takes_the_hand_written_backward"],
        "why": "CPU eager silently back on torch's composite rms_norm: every numeric gate passes, the speed is lost",
        "protects": "training loop",
    },
]
