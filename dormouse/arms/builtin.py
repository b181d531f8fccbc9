"""The built-in arms, defined (so registered, :mod:`dormouse.arms.registry`) by importing this module.

What needs the arm classes (a config's schema and checks, a model, ``dormouse arms``) imports it; what needs
only their names (``dormouse logs``, ``dormouse ab --list``) does not, and so imports no torch. The registry
declares these arms by name, simplest first (:data:`dormouse.arms.registry.BUILTIN_ARMS`), and checks each
class against that declaration when it registers.
"""

from dormouse.arms import attnres, gr, prenorm, rezero  # noqa: F401
