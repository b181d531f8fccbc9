"""The plugins a run used: recorded in its provenance, loaded again by a command that reads the run.

A run of a plugin arm records that plugin (module, file, sha256; :func:`dormouse.arms.plugins.records_for`)
under ``plugins`` in ``provenance.json``. ``eval``, ``sample``, ``logs`` and a resume load what the run
recorded before they read its config (:func:`load_run_plugins`), so the arm the run trained is the arm they
build, or they refuse naming the plugin that is missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dormouse.arms.plugins import load_recorded
from dormouse.run.files import RunFiles

PROVENANCE_KEY = "plugins"


def recorded_plugins(run_dir: Path) -> list[dict[str, Any]]:
    """The plugins ``run_dir``'s provenance.json records (none for a built-in arm, an older run, or no file)."""
    try:
        prov = json.loads(RunFiles(Path(run_dir)).provenance.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return list(prov.get(PROVENANCE_KEY) or []) if isinstance(prov, dict) else []


def load_run_plugins(run_dir: Path) -> list[str]:
    """Load the plugins ``run_dir`` recorded; one note per plugin whose source changed since. Raises
    :class:`dormouse.arms.plugins.PluginError` naming a recorded plugin that cannot be found."""
    return load_recorded(recorded_plugins(run_dir), f"run {run_dir}")
