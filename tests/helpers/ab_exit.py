"""A ``dormouse ab`` verb ended as the CLI ends it: a refusal or an interrupt becomes its exit code, said on a
console (dormouse/cli/exits.py's one handler), so a test that injects a trainer reads the same code a user would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console

from dormouse.cli.exits import exit_code_of
from dormouse.errors import DormouseError


def exit_code(verb: Callable[..., int], *args: Any, err: Console | None = None, **kwargs: Any) -> int:
    """``verb(*args, **kwargs)``'s exit code; a DormouseError's (or Ctrl-C's) as the CLI says it on ``err``."""
    try:
        return verb(*args, **kwargs)
    except (DormouseError, KeyboardInterrupt) as exc:
        return exit_code_of(exc, err or Console(record=True))
