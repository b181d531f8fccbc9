"""How a ``dormouse`` command ends on an error: every command runs in :class:`ExitOnError`, so a
:class:`dormouse.errors.DormouseError` exits with its class's ``exit_code`` and ``error:`` lines, never a
traceback; any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from dormouse.errors import DormouseError, print_error

PLUGIN_OPTION = "--plugin"


def plugins_first(args: list[str]) -> list[str]:
    """``args`` with every ``--plugin`` option moved to the front, in order (up to a ``--``)."""
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


def load_plugins(ctx: click.Context) -> None:
    """Load the entry points, DORMOUSE_PLUGINS and the root's ``--plugin`` values: the first thing every command
    that reads arms does, before it reads a config (a plugin arm's switch is in the schema)."""
    from dormouse.arms.plugins import PluginError, activate  # the arms import torch: only when a command starts
    from dormouse.arms.registry import defined_arm_classes
    from dormouse.config.schema import option_default_problems

    loaded = activate(ctx.find_root().params.get("plugin") or [])
    classes = defined_arm_classes()
    bad = [line for plugin in loaded for arm in plugin.arms for line in option_default_problems(classes[arm])]
    if bad:  # refused at load, whether or not the arm is selected: no command could validate a config
        raise PluginError("; ".join(bad))


def exit_code_of(exc: DormouseError | KeyboardInterrupt, console: Console = err) -> int:
    """Say ``exc`` as ``error:`` lines (unless already said) and return its class's exit code (a bare Ctrl-C: 130)."""
    if isinstance(exc, KeyboardInterrupt):
        return CTRL_C_EXIT
    if not exc.already_said:
        for line in exc.messages():
            print_error(console, line)
    return exc.exit_code


class ExitOnError(TyperGroup):
    """The app's command group (``dormouse ab``'s verbs run inside its :meth:`invoke`): a DormouseError exits with
    its code, Ctrl-C with 130; ``--plugin`` is accepted anywhere."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, plugins_first(args))

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (DormouseError, KeyboardInterrupt) as exc:
            raise typer.Exit(exit_code_of(exc)) from None
