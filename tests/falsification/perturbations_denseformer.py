"""Perturbations of the DenseFormer arm (dormouse/arms/denseformer.py, its source sets in dormouse/arms/specs.py;
format in perturbations_attnres.py): defects of the Depth-Weighted Average and of its identity init."""

from __future__ import annotations

_FILE = "dormouse/arms/denseformer.py"
_T = "tests/arms/test_denseformer.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "denseformer_dwa_reads_y_not_x",
        "file": _FILE,
        "function": "DenseFormer.absorb",
        "old": "            new_state = _DenseState(blocks, y)",
        "new": "            new_state = _DenseState([*blocks[:-1], y], y)",
        "gates": [_T + "test_denseformer_matches_a_float64_reference_of_dwa"],
        "why": "the sources keep each block's average Y_j instead of its output X_j: later DWAs average averages",
        "protects": "mechanism",
    },
    {
        "name": "denseformer_own_block_init_zero",
        "file": _FILE,
        "function": "DenseFormer.__init__",
        "old": "w[-1] = 1.0",
        "new": "w[-1] = 0.0",
        "gates": [_T + "test_denseformer_at_init_gives_pre_norms_logits"],
        "why": "alpha_ii starts at 0, not 1 (§3): the DWA erases the state at init instead of being the identity",
        "protects": "mechanism",
    },
    {
        "name": "denseformer_embedding_left_out",
        "file": "dormouse/arms/specs.py",
        "function": "dwa_sources",
        "old": "range(block + 1)",
        "new": "range(1, block + 1)",
        "gates": [_T + "test_denseformer_adds_the_papers_d_d_plus_3_over_2_weights",
                  _T + "test_denseformer_matches_a_float64_reference_of_dwa"],
        "why": "the DWA averages the block outputs only, not X_0 (the embedding): d(d+1)/2 weights, not d(d+3)/2",
        "protects": "mechanism",
    },
    {
        "name": "denseformer_dilation_on_the_wrong_residue",
        "file": "dormouse/arms/specs.py",
        "function": "dwa_sources",
        "old": "(block - j) % dilation == 0",
        "new": "j % dilation == 0",
        "gates": [_T + "test_denseformer_matches_a_float64_reference_of_dwa"],
        "why": "dilation keeps j = 0 (mod k), not j = i (mod k) (§3.2): blocks i not divisible by k lose their own X_i",
        "protects": "mechanism",
    },
]
