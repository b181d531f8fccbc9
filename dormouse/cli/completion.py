"""Shell completion of the CLI's arguments (Typer's ``autocompletion=``; installed by
``dormouse --install-completion``).

* ``train``/``validate`` overrides: every schema key as ``key=`` (the keys
  :func:`dormouse.config.overrides.check_overrides` accepts), ``preset=`` and, after ``preset=``, the presets
  in conf/preset/*.yaml; a boolean key's ``key=true``/``key=false``.
* ``ab`` NAME: the registered comparisons (conf/ab/*.yaml).

bash splits words at ``=`` (COMP_WORDBREAKS), so under bash only the keys complete; zsh and fish also
complete the values.
"""

from __future__ import annotations

from omegaconf import OmegaConf


def complete_override(incomplete: str) -> list[str]:
    """The overrides that start with ``incomplete``: ``key=`` while the key is being typed, then its values
    where they are a closed set (a preset's names, a boolean's true/false)."""
    from dormouse.config.overrides import GROUPS, available, schema_keys
    from dormouse.config.schema import schema

    key, eq, value = incomplete.partition("=")
    leaves, _ = schema_keys(schema())
    if not eq:
        return [f"{k}=" for k in [*GROUPS, *leaves] if k.startswith(incomplete)]
    if key in GROUPS:
        return [f"{key}={o}" for o in available(key) if o.startswith(value)]
    if key in leaves and isinstance(OmegaConf.select(OmegaConf.structured(schema()), key), bool):
        return [f"{key}={v}" for v in ("true", "false") if v.startswith(value)]
    return []


def complete_comparison(incomplete: str) -> list[str]:
    """The registered comparisons (conf/ab/*.yaml) whose names start with ``incomplete``."""
    from dormouse.ab.comparison.registry import list_comparisons

    return [n for n in list_comparisons() if n.startswith(incomplete)]
