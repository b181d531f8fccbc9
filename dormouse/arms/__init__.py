"""The residual arms: interface, one module per arm, registry, probes and plots. Importing this package defines
no arm and imports no torch; :mod:`.builtin` defines the built-in ones."""
