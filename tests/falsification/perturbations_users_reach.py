"""Perturbations of what users reach for (issue 24, "What users reach for that is missing"): wandb's
entity and tags, gradient accumulation's loss scaling, keeping the best checkpoint (tests/falsification;
format in perturbations_attnres.py, plus ``protects``)."""

from __future__ import annotations

_TRAIN = "dormouse/train.py"

PERTURBATIONS: list[dict] = [
    {
        "name": "wandb_tags_not_passed",
        "file": _TRAIN,
        "function": "_wandb_run",
        "old": "job_type=lg.wandb_job_type, tags=[str(tag) for tag in lg.wandb_tags],\n",
        "new": "job_type=lg.wandb_job_type, tags=None,\n",
        "gates": ["tests/test_wandb_team.py::test_entity_project_group_and_tags_reach_wandb_init"],
        "why": "logging.wandb_tags is accepted and dropped: the team's runs are not tagged and nothing says so",
        "protects": "training loop",
    },
]
