"""Perturbations of the fused AttnRes kernels (kernels/ = dormouse_kernels): defects tests/arms/test_kernels.py
must catch. Run by tests/falsification (format in perturbations_attnres.py).

Each one is a defect a fused attention kernel is known to ship with: the first three are classic (the
RMSNorm derivative without its 1/d among them), the rest are the ways the online softmax, the persistent grid, the
masking and the source table go wrong silently.
"""

from __future__ import annotations

_DA = "kernels/depth_attend.py"
_MG = "kernels/merge.py"
_T = "tests/arms/test_kernels.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "kernels_import_dormouse_again",
        "file": "kernels/merge_torch.py",
        "function": "<module>",
        "old": "import torch\nfrom torch import Tensor\n",
        "new": "import torch\nfrom torch import Tensor\n\nimport dormouse.ops.attnres  # noqa: F401\n",
        "gates": ["tests/flows/test_layering.py::test_the_kernels_import_nothing_from_dormouse"],
        "why": "the kernels import dormouse again while dormouse.ops.attnres imports the kernels: an import cycle "
               "(which module loads first decides what the other sees)",
        "protects": "kernels",
    },
    {
        "name": "norm_derivative_drops_1_over_d",
        "file": _DA,
        "function": "_depth_attend_bwd_kernel",
        "old": "                coef = s * ks * ks / D\n",
        "new": "                coef = s * ks * ks\n",
        "gates": [
            _T + "test_backward_matches_finite_differences[paper]",
            _T + "test_backward_matches_oracle_autograd[N50-d33-L3-paper-float32]",
        ],
        "why": "d(RMSNorm)/dv without the 1/d of the mean: the predecessor's defect (seed 000 §3), green "
        "through every test there because the L2 form it tested has m = 1",
        "protects": "kernels",
    },
    {
        "name": "forward_skips_online_softmax_rescale",
        "file": _DA,
        "function": "_depth_attend_fwd_kernel",
        "old": "        acc = acc * rescale[:, None] + p[:, None] * v\n",
        "new": "        acc = acc + p[:, None] * v\n",
        "gates": [_T + "test_forward_matches_oracle[N50-d33-L3-paper-float32]"],
        "why": "the accumulator is not rescaled when the running max grows: earlier sources keep weights "
        "relative to a stale max",
        "protects": "kernels",
    },
    {
        "name": "backward_forgets_gain",
        "file": _DA,
        "function": "_DepthAttendFn.backward",
        "old": "            grad_query = (dqg * gain.to(dqg.dtype)).to(query.dtype)\n",
        "new": "            grad_query = dqg.to(query.dtype)\n",
        "gates": [
            _T + "test_backward_matches_finite_differences[paper]",
            _T + "test_backward_matches_oracle_autograd[N29-d130-L9-paper-float32]",
        ],
        "why": "the query gradient of s = (w * g) . k without the chain-rule factor g: exact at gain = 1, "
        "so only a test with a non-unit gain sees it",
        "protects": "kernels",
    },
    {
        "name": "backward_drops_softmax_centring",
        "file": _DA,
        "function": "_depth_attend_bwd_kernel",
        "old": "            ds = alpha * (tl.sum(go * v, axis=1) - g_dot_out)\n",
        "new": "            ds = alpha * tl.sum(go * v, axis=1)\n",
        "gates": [_T + "test_backward_matches_oracle_autograd[N50-d33-L3-paper-float32]"],
        "why": "the softmax Jacobian without its -alpha (G . out) term (the one that needs no second pass)",
        "protects": "kernels",
    },
    {
        "name": "lse_without_normaliser",
        "file": _DA,
        "function": "_depth_attend_fwd_kernel",
        "old": "    tl.store(lse_ptr + rows, m + tl.log(l), mask=row_ok)\n",
        "new": "    tl.store(lse_ptr + rows, m, mask=row_ok)\n",
        "gates": [
            _T + "test_forward_low_level_writes_every_element_of_caller_buffers",
            _T + "test_backward_matches_oracle_autograd[N50-d33-L3-paper-float32]",
        ],
        "why": "the saved statistic is the running max only: the backward's alpha = exp(s - lse) is then "
        "unnormalised (the forward output is still right)",
        "protects": "kernels",
    },
    {
        "name": "forward_grid_drops_tail_block",
        "file": _DA,
        "function": "depth_attend_forward",
        "old": "    grid = (triton.cdiv(n, bn),)\n",
        "new": "    grid = (max(1, n // bn),)\n",
        "gates": [_T + "test_forward_low_level_writes_every_element_of_caller_buffers"],
        "why": "floor instead of ceil division: the last N % BLOCK_N tokens are never written -- invisible "
        "unless the output buffer is poisoned and N is not a multiple of the block",
        "protects": "kernels",
    },
    {
        "name": "backward_persistent_loop_skips_blocks",
        "file": _DA,
        "function": "_depth_attend_bwd_kernel",
        "old": "    for blk in range(pid, NUM_BLOCKS, NPROG):\n",
        "new": "    for blk in range(pid, NUM_BLOCKS, NPROG + 1):\n",
        "gates": [_T + "test_backward_low_level_fills_poisoned_buffers_across_programs"],
        "why": "a persistent grid whose stride does not match the program count: some token blocks get no "
        "gradient; needs more blocks than programs to show (the interpreter runs 2-3 programs)",
        "protects": "kernels",
    },
    {
        "name": "sqrt_d_form_uses_mean",
        "file": _DA,
        "function": "_load_source",
        "old": "        denom = (ss + eps * D) * D  # eps on the mean square; times d for 1/sqrt(d)\n",
        "new": "        denom = ss / D + eps\n",
        "gates": [_T + "test_forward_matches_oracle[N50-d33-L3-sqrt_d-float32]"],
        "why": "the runtime form flag ignored when scoring a source: the sqrt_d ablation silently runs the paper "
        "form (a d-fold temperature difference, attnres.md)",
        "protects": "kernels",
    },
    {
        "name": "forward_ignores_gain",
        "file": _DA,
        "function": "_DepthAttendFn.forward",
        "old": "        qg = query.to(acc) if gain is None else query.to(acc) * gain.to(acc)\n",
        "new": "        qg = query.to(acc)\n",
        "gates": [_T + "test_forward_matches_oracle[N29-d130-L9-paper-float32]"],
        "why": "the RMSNorm gain not folded into the query: exact at the gain's init (ones)",
        "protects": "kernels",
    },
    {
        "name": "alignment_hint_for_misaligned_sources",
        "file": _DA,
        "function": "_source_table",
        "old": "    align = 16 // itemsize if all(p % 16 == 0 for p in ptrs) else 1\n",
        "new": "    align = 16 // itemsize\n",
        "gates": [_T + "test_misaligned_sources_are_correct_and_not_hinted"],
        "why": "tl.multiple_of claimed for sources that are views at an odd offset: on a GPU, misaligned "
        "128-bit loads (the interpreter would not notice, hence a host-side assertion)",
        "protects": "kernels",
    },
    {
        "name": "merge_forgets_second_rescale",
        "file": _MG,
        "function": "_merge_kernel",
        "old": "    o = w1[:, None] * o1 + w2[:, None] * o2\n",
        "new": "    o = w1[:, None] * o1 + o2\n",
        "gates": [_T + "test_merge_matches_oracle_and_direct_mixture[float32]"],
        "why": "Alg. 1 Phase 2 with the second accumulator left at its own max instead of the merged one",
        "protects": "kernels",
    },
    {
        "name": "merge_empty_partials_turn_nan",
        "file": _MG,
        "function": "_merge_kernel",
        "old": '    m_safe = tl.where(m == float("-inf"), 0.0, m)\n',
        "new": "    m_safe = m\n",
        "gates": [_T + "test_merge_matches_oracle_and_direct_mixture[float32]"],
        "why": "exp(m_i - m) with both partials empty is exp(-inf + inf) = NaN: an empty merge must stay "
        "empty (m = -inf, l = 0, o = 0)",
        "protects": "kernels",
    },
]
PERTURBATIONS.append(
    {
        "name": "sqrt_d_eps_on_the_sum",
        "file": _DA,
        "function": "_load_source",
        "old": "        denom = (ss + eps * D) * D  # eps on the mean square; times d for 1/sqrt(d)\n",
        "new": "        denom = (ss + eps) * D\n",
        "gates": ["tests/arms/test_attnres.py::test_triton_kernel_matches_reference[sqrt_d-eps0.125]"],
        "why": "sqrt_d with eps on the sum of squares (the predecessor's form): then sqrt_d(w) != paper(w/d) at "
        "eps > 0, against attnres.md's identity",
        "protects": "kernels",
    }
)
