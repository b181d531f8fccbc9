"""The residual arms: the interface (:mod:`.base`), one module per arm, the registry, their probes and plots.

Importing this package defines no arm, so importing :mod:`.registry` or :mod:`.plugins` imports no torch:
the built-in arms are named in the registry (:data:`.registry.BUILTIN_ARMS`) and defined by importing
:mod:`.builtin`, which what builds or configures a model imports (dormouse.config.schema,
dormouse.model.looped).
"""
