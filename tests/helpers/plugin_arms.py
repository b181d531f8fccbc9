"""A test that loads a plugin leaves nothing behind: its arms unregistered, its module gone from ``sys.modules``
and from the loaded plugins, ``DORMOUSE_PLUGINS`` as it was (loading a plugin exports it there for child
processes). Without this, one test's plugin arm is a fifth counter on every later test's eval line."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dormouse.arms import builtin, plugins  # noqa: F401  (built-ins registered before the arms are read)
from dormouse.arms.registry import arm_classes, unregister_arm

# The shipped example plugin (docs/arms.md walks through it): the scalar gate, arm `sgate`.
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "scalar_gate.py"


@contextmanager
def plugins_forgotten() -> Iterator[None]:
    """Whatever plugins the block loads (directly or through the CLI's ``--plugin``) are forgotten after it."""
    env = os.environ.get(plugins.ENV_VAR)
    arms, loaded, path = set(arm_classes()), set(plugins._LOADED), list(sys.path)
    try:
        yield
    finally:
        for name in set(arm_classes()) - arms:
            unregister_arm(name)
        for module in set(plugins._LOADED) - loaded:
            plugins._LOADED.pop(module)
            top = module.split(".")[0]  # a package plugin (pkg.arms): the package and all its modules
            for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
                del sys.modules[name]
        sys.path[:] = path
        if env is None:
            os.environ.pop(plugins.ENV_VAR, None)
        else:
            os.environ[plugins.ENV_VAR] = env


@contextmanager
def plugin_loaded(spec: str | Path = EXAMPLE) -> Iterator[plugins.Plugin]:
    """``spec`` loaded as ``--plugin`` would load it, for the block only."""
    with plugins_forgotten():
        yield plugins.load_plugin(str(spec))
