"""How dormouse fails: every error derives from :class:`DormouseError` and declares its exit code on its class line
(2 input refused before work, 1 a failed run, 128 + signal an interrupt); :func:`print_error` is the one writer
of ``error:``. Imports nothing from dormouse."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text


class DormouseError(Exception):
    """An error said as ``error:`` lines (``lines``, one per problem) with an exit code, never a traceback."""

    exit_code: int = 1
    already_said: bool = False
    lines: Sequence[str] = ()

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs: object) -> None:
        """``class ConfigError(DormouseError, ValueError, exit_code=2)``: the code on the class's own line."""
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code

    def messages(self) -> list[str]:
        """What the CLI prints, one ``error:`` line each."""
        return list(self.lines) or [str(self)]


class TrainError(DormouseError, RuntimeError, exit_code=1):
    """A run that cannot start or continue; ``diverged``: stopped on a non-finite value (a tune's +inf)."""

    def __init__(self, message: str, *, diverged: bool = False) -> None:
        super().__init__(message)
        self.diverged = diverged


class StartRefused(TrainError, exit_code=2):
    """Bad input ``train`` refuses before creating anything, as ``validate`` does (exit 2)."""


class RunDirRefused(StartRefused):
    """The run directory refuses this start or resume (another run, unreadable or other-config checkpoint)."""


class Interrupted(DormouseError, exit_code=130):
    """SIGINT/SIGTERM after a checkpoint; exit 128 + signal, the resume already said."""

    already_said = True

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def print_error(console: Console, message: str) -> None:
    """One ``error: <message>`` line, printed as is: no rich markup, no wrapping."""
    console.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
