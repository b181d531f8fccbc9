"""Perturbations of the training path's speed work: a comparison compiles once (tests/falsification;
format in perturbations_attnres.py). ``protects`` names what a defect here would break."""

from __future__ import annotations

_PAIRJOB = "dormouse/ab/runs/job.py"
_AB = "tests/flows/test_ab.py::"
_TRAIN = "dormouse/train/loop.py"
_N = "tests/train/test_step_notice.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "compile_cache_left_to_the_process",
        "file": _PAIRJOB,
        "function": "compile_cache",
        "old": "    os.environ[INDUCTOR_CACHE_ENV] = path\n",
        "new": "    pass\n",
        "gates": [_AB + "test_compiling_runs_share_one_compile_cache_in_the_comparison"],
        "why": "a compiling run leaves torch's compile cache wherever the process has it (/tmp by default): a "
               "resume on a fresh machine or another node compiles every arm again, and nothing says where "
               "the artifacts came from",
        "protects": "training loop",
    },
    {
        "name": "compiled_first_step_projected",
        "file": _TRAIN,
        "function": "_loop",
        "old": "                first = time.perf_counter() if len(losses) < (2 if t.compile else 1) else None\n",
        "new": "                first = time.perf_counter() if not losses else None\n",
        "gates": [_N + "test_a_compiled_run_projects_from_its_second_step_not_from_the_compilation"],
        "why": "a compiled run projects its end from the step that compiled the model: 33 h for a 5-minute run",
        "protects": "training loop",
    },
]
