"""Perturbations of what issue 23 added to the training path: a comparison compiles once (tests/falsification;
format in perturbations_attnres.py). ``protects`` names what a defect here would break."""

from __future__ import annotations

_PAIRJOB = "dormouse/ab/pairjob.py"
_AB = "tests/test_ab.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "compile_cache_left_to_the_process",
        "file": _PAIRJOB,
        "function": "compile_cache",
        "old": "    os.environ[INDUCTOR_CACHE_ENV] = path\n",
        "new": "    pass\n",
        "gates": [_AB + "test_compiling_pairs_share_one_compile_cache_in_the_comparison"],
        "why": "a compiling pair leaves torch's compile cache wherever the process has it (/tmp by default): a "
               "resume on a fresh machine or another node compiles every arm again, and nothing says where "
               "the artifacts came from",
        "protects": "training loop",
    },
]
