"""Hydra configs, installed as the package ``dormouse.conf`` (see pyproject.toml)."""
