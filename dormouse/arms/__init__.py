"""The residual arms: the interface (:mod:`.base`), one module per arm, the registry, their probes and plots.

Importing this package defines the built-in arms, and defining an arm registers it (:mod:`.registry`), in
the order below: simplest first, which is the eval line's counter order and the order in which an A/B tie
keeps the simpler mechanism.
"""

# The registry order is this import order: not sorted.
# isort: off
from dormouse.arms import prenorm  # noqa: F401
from dormouse.arms import rezero  # noqa: F401
from dormouse.arms import gr  # noqa: F401
from dormouse.arms import attnres  # noqa: F401
# isort: on
