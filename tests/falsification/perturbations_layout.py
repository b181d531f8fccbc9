"""Perturbations of the layering (the README's "Layout"): a module that imports from a layer above its own, and
the ab command loading the study's stack for a plain comparison (tests/falsification; format in
perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

PERTURBATIONS: list[dict] = [
    {
        "name": "ab_reads_runs_through_the_logs_view",
        "file": "dormouse/ab/runs/records.py",
        "function": "<module>",
        "old": "from dormouse.run.checks import checked_run\n",
        "new": "import dormouse.cli.logs  # noqa: F401\nfrom dormouse.run.checks import checked_run\n",
        "gates": ["tests/flows/test_layering.py::test_each_layer_imports_only_from_the_layers_below"],
        "why": "the A/B engine imports the `dormouse logs` view again: a change to what the view prints can change "
               "whether a run counts toward a verdict, and the layers no longer read top-down",
        "protects": "A/B rule",
    },
    {
        "name": "the_ab_command_imports_the_study_at_start",
        "file": "dormouse/ab/comparison/command.py",
        "function": "<module>",
        "old": "from dormouse.ab.comparison.registry import is_study\n",
        "new": "import dormouse.ab.study.registry  # noqa: F401\nfrom dormouse.ab.comparison.registry import is_study\n",
        "gates": ["tests/flows/test_layering.py::test_the_ab_command_imports_the_study_only_for_a_study"],
        "why": "every `dormouse ab NAME` loads the study's stack (its registry, its interaction rule) to ask whether "
               "NAME is a study: a plain comparison depends on the study it is a part of",
        "protects": "A/B rule",
    },
]
