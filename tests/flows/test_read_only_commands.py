"""Commands that only print (help, the version) answer without importing torch: importing it is most of the
seconds a command takes to start, and these compute nothing with it."""

from __future__ import annotations

import subprocess
import sys

# Every command's --help, the app's and --version, run in one fresh interpreter: afterwards torch must not
# be among its modules.
PROBE = """
import sys
from typer.testing import CliRunner
from dormouse.cli.app import app
runner = CliRunner()
for args in {commands!r}:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (args, result.output)
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""
COMMANDS = [["--help"], ["--version"], *[[c, "--help"] for c in
                                        ("train", "validate", "ab", "logs", "arms", "eval", "sample")]]


def test_help_and_version_do_not_import_torch() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE.format(commands=COMMANDS)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"torch imported by help or --version: {done.stdout}"
