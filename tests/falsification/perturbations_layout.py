"""Perturbations of the layering (the README's "Layout"): a module that imports from a layer above its own
(tests/falsification; format in perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

PERTURBATIONS: list[dict] = [
    {
        "name": "ab_reads_runs_through_the_logs_view",
        "file": "dormouse/ab/records.py",
        "function": "<module>",
        "old": "from dormouse.run.checks import checked_run\n",
        "new": "import dormouse.cli.logs  # noqa: F401\nfrom dormouse.run.checks import checked_run\n",
        "gates": ["tests/flows/test_layering.py::test_each_layer_imports_only_from_the_layers_below"],
        "why": "the A/B engine imports the `dormouse logs` view again: a change to what the view prints can change "
               "whether a run counts toward a verdict, and the layers no longer read top-down",
        "protects": "A/B rule",
    },
]
