"""The plugins a run used: recorded under ``plugins`` in ``provenance.json`` (module, file, sha256) and loaded
again (:func:`load_run_plugins`) by ``eval``, ``sample``, ``logs`` and a resume before they read the config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dormouse.arms.plugins import load_recorded
from dormouse.run.files import RunFiles

PROVENANCE_KEY = "plugins"


def recorded_plugins(run_dir: Path) -> list[dict[str, Any]]:
    """The plugins ``run_dir``'s provenance.json records (none for a built-in arm, a run without one, or no file)."""
    try:
        prov = json.loads(RunFiles(Path(run_dir)).provenance.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return list(prov.get(PROVENANCE_KEY) or []) if isinstance(prov, dict) else []


def load_run_plugins(run_dir: Path) -> list[str]:
    """Load the plugins ``run_dir`` recorded; a note per changed source; PluginError for a missing one."""
    return load_recorded(recorded_plugins(run_dir), f"run {run_dir}")
