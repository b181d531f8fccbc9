"""How dormouse fails: the one base of its errors, the exit code each maps to, and the one way one is said.

Every exception class of the package derives from :class:`DormouseError` and declares, on its own class
line (``class ConfigError(DormouseError, ValueError, exit_code=2)``), the exit status of a command it ends:
2 for bad input refused before any work (a config, data or request that cannot run, a run directory or a
comparison that refuses this start), 1 for a run that failed on the way (a full disk, a non-finite loss),
128 + the signal for an interrupt (130 Ctrl-C, 143 SIGTERM). The CLI's one handler (dormouse/cli/exits.py)
ends every command on such an error with that code, saying it with :func:`print_error`: the only place the
``error:`` prefix is written. A class keeps its other base, so code that catches ``ValueError`` still does.

The bottom layer: it imports nothing from dormouse, so any module may raise these and say them.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text


class DormouseError(Exception):
    """An error dormouse means to report as one or more ``error:`` lines and an exit code, never a traceback.

    ``exit_code`` is the command's exit status; ``lines`` (set by the errors that name several problems at
    once: ConfigError, ComparisonError, LaunchError) holds one message per problem, else the message is one
    line; ``already_said`` marks an error whose raiser has told the user already, so nothing more is printed."""

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
    """A run that cannot start or continue; the message says what and how to fix it. ``diverged``: training
    stopped on a non-finite loss, gradient or eval (``train.nonfinite=stop``), a fact the caller records
    (a comparison's tune stage counts such a run as +inf)."""

    def __init__(self, message: str, *, diverged: bool = False) -> None:
        super().__init__(message)
        self.diverged = diverged


class StartRefused(TrainError, exit_code=2):
    """Bad input ``train`` refuses before it creates anything, as ``validate`` does (exit 2): a config that
    cannot fit in memory, wandb online without credentials, a run directory that refuses this start."""


class RunDirRefused(StartRefused):
    """The run directory refuses this start or resume (it holds another run, its checkpoint is unreadable
    or was made with another config): bad input, refused before step 0 by `train` and `validate` alike."""


class Interrupted(DormouseError, exit_code=130):
    """SIGINT/SIGTERM: a checkpoint was written; ``exit_code`` is 130 or 143 (128 + the signal). The loop
    (or the comparison's driver) has said where it stopped and how to resume, so the CLI adds nothing."""

    already_said = True

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def print_error(console: Console, message: str) -> None:
    """One ``error: <message>`` line on ``console`` (stderr in the CLI). The message is printed as it is:
    a path or value in square brackets is text, never rich markup; a long line is never wrapped."""
    console.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
