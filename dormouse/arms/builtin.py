"""Importing this module defines (so registers) the built-in arms; name-only readers skip it and torch."""

from dormouse.arms import (  # noqa: F401
    attnres,
    delta_attnres,
    denseformer,
    gr,
    injection,
    laurel,
    mhc,
    prenorm,
    rezero,
    value_residual,
)
