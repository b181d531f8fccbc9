"""How a ``dormouse`` command ends on an error: the CLI's one handler of :class:`dormouse.errors.DormouseError`.

Every command of the Typer app runs inside :class:`ExitOnError` (the app's command group), so no command
catches an error by hand: whatever dormouse error a command raises ends it with the class's own
``exit_code`` (2 bad input refused before any work, 1 a run that failed, 130/143 an interrupt) and its
message as ``error:`` lines on stderr, never a traceback. Any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from dormouse.errors import DormouseError, print_error

PLUGIN_OPTION = "--plugin"


def plugins_first(args: list[str]) -> list[str]:
    """``args`` with every ``--plugin VALUE`` / ``--plugin=VALUE`` moved to the front, in order (before a
    ``--``, which ends the options)."""
    moved: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg == PLUGIN_OPTION and i + 1 < len(args):
            moved += args[i:i + 2]
            i += 2
            continue
        if arg.startswith(PLUGIN_OPTION + "="):
            moved.append(arg)
        else:
            rest.append(arg)
        i += 1
    return moved + rest


# The CLI's stderr: every command's notes, warnings and errors (stdout is the command's output).
err = Console(stderr=True, highlight=False)


# Ctrl-C that reached a command before any dormouse code turned it into Interrupted: 128 + SIGINT, as a shell says.
CTRL_C_EXIT = 130


def exit_code_of(exc: DormouseError | KeyboardInterrupt, console: Console = err) -> int:
    """Say ``exc`` on ``console`` (one ``error:`` line per message; nothing when its raiser said it already,
    as an interrupted run did) and return the exit code its class declares (a bare Ctrl-C: 130)."""
    if isinstance(exc, KeyboardInterrupt):
        return CTRL_C_EXIT
    if not exc.already_said:
        for line in exc.messages():
            print_error(console, line)
    return exc.exit_code


class ExitOnError(TyperGroup):
    """The app's command group: a command that raises a :class:`DormouseError` exits with its code, said once
    (a sub-group's commands too: ``dormouse ab``'s verbs run inside this group's :meth:`invoke`); Ctrl-C 130.

    ``--plugin`` is the group's option (plugins load before a command composes its config) but is accepted
    anywhere on the line: :meth:`parse_args` moves each occurrence in front of the command's name."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, plugins_first(args))

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (DormouseError, KeyboardInterrupt) as exc:
            raise typer.Exit(exit_code_of(exc)) from None
