"""Perturbations of the one error base and the CLI's one handler (dormouse/errors.py, dormouse/cli/exits.py):
every dormouse error ends a command with the exit code its class declares and one ``error:`` line, no
traceback (tests/falsification; format in perturbations_attnres.py, plus ``protects``).

The exit codes are what scripts and the comparison's driver read: 2 says nothing ran, so rerunning the same
command is pointless; 1 says a run failed, 130/143 that it was stopped and can resume. A command that maps
an error by hand again drifts from that, and an exception class outside the base escapes as a traceback.
"""

from __future__ import annotations

_GATES = "tests/flows/test_error_exits.py::"
_MAPPED = _GATES + "test_every_command_ends_on_each_dormouse_error_with_its_exit_code_and_one_error_line"

PERTURBATIONS: list[dict] = [
    {
        "name": "a_command_catches_an_error_by_hand_with_its_own_code",
        "file": "dormouse/cli/app.py",
        "function": "eval_",
        "old": "    _, row = eval_checkpoint(run_dir, checkpoint, device, on_loaded=loaded)\n",
        "new": "    try:\n        _, row = eval_checkpoint(run_dir, checkpoint, device, on_loaded=loaded)\n"
               "    except Exception as exc:\n        err.print(f\"error: {exc}\")\n"
               "        raise typer.Exit(1) from None\n",
        "gates": [_MAPPED + "[eval:eval_checkpoint]"],
        "why": "`dormouse eval` catches the errors itself again and exits 1 on a refused request (a missing run, "
               "bad data): a script reads 'the run failed' where nothing ran",
        "protects": "training loop",
    },
    {
        "name": "an_exception_class_drops_the_base",
        "file": "dormouse/run/lock.py",
        "function": "LockHeld",
        "old": "class LockHeld(DormouseError, RuntimeError, exit_code=2):",
        "new": "class LockHeld(RuntimeError):",
        "gates": [_GATES + "test_every_exception_class_of_the_package_derives_from_dormouse_error"],
        "why": "a lock held by another process escapes the CLI's handler: a traceback and exit 1 wherever a "
               "command does not catch it by name",
        "protects": "training loop",
    },
    {
        "name": "the_handler_exits_1_whatever_the_error",
        "file": "dormouse/cli/exits.py",
        "function": "exit_code_of",
        "old": "    return exc.exit_code\n",
        "new": "    return 1\n",
        "gates": [_MAPPED + "[train:load_run_config]"],
        "why": "a config `train` refuses before any work exits 1 like a failed run, not 2 as `validate` says",
        "protects": "training loop",
    },
    {
        "name": "an_error_message_is_read_as_markup",
        "file": "dormouse/errors.py",
        "function": "print_error",
        "old": "    console.print(Text.assemble((\"error:\", \"bold red\"), \" \", message), soft_wrap=True)\n",
        "new": "    console.print(f\"[bold red]error:[/] {message}\", soft_wrap=True)\n",
        "gates": [_MAPPED + "[train:load_run_config]"],
        "why": "a value in square brackets in an error (data.path=[x], a path) is eaten as rich markup, and a "
               "closing tag in one crashes the CLI with a MarkupError",
        "protects": "training loop",
    },
]
