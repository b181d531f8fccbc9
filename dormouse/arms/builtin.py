"""Importing this module defines (so registers) the built-in arms; name-only readers skip it and torch."""

from dormouse.arms import attnres, gr, mhc, prenorm, rezero  # noqa: F401
