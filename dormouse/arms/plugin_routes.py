"""The routes by which an arm outside dormouse is loaded (a file named on the command line or in the
environment, an installed package's entry point), and the hint that names them wherever an arm name no loaded
code defines is refused. The loader is :mod:`dormouse.arms.plugins`; the registry and the config's overrides
say the hint without importing it."""

ENTRY_POINT_GROUP = "dormouse.arms"
ENV_VAR = "DORMOUSE_PLUGINS"
PLUGIN_HINT = (f"is it a plugin arm? load it with --plugin FILE (or {ENV_VAR}), or install the package that "
               f"declares it under the `{ENTRY_POINT_GROUP}` entry points; `dormouse arms` lists the arms this "
               "command knows")
