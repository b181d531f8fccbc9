"""The config a run starts with: composed from the overrides and validated, without torch, so that a comparison's
plan checks every run's config before any run; a resume's saved config (:func:`dormouse.train.start.resumed_config`)
reads the run's checkpoints and arm plugins, torch code."""

from __future__ import annotations

from omegaconf import DictConfig

from dormouse.config.schema import ConfigError, compose_config, validate
from dormouse.train.dist_info import dist_info_from_env


def load_run_config(overrides: list[str] | None = None) -> DictConfig:
    """The config a run starts with (saved config under ``overrides`` when resuming), validated."""
    cfg = compose_config(overrides)
    if str(cfg.train.resume) != "never":
        from dormouse.train.start import resumed_config  # torch: only a resume reads a run's checkpoints

        cfg = resumed_config(cfg, list(overrides or []))
    problems = validate(cfg, dist_info_from_env().world_size)  # torchrun's WORLD_SIZE: the batch split
    if problems:
        raise ConfigError(problems)
    return cfg
