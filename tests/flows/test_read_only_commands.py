"""Commands that only print or read (help, the version, `logs`, `ab list`) answer without importing torch:
importing it is most of the seconds a command takes to start, and these compute nothing with it. `logs`
reads the arm names from the registry's declaration (dormouse.arms.registry.BUILTIN_ARMS), not from the
arm classes; `ab list` validates each registration's design without scipy, which only computing does. A config
composes and validates without torch: the schema is built from the arms' specs (dormouse.arms.specs). `ab plan`,
`status` and `design` import no torch: their plan validates every run's config and reads its corpus as bytes
(dormouse.data); what the machine can run (CUDA, the kernel) is checked by `ab run`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.flows.test_logs import healthy, plant
from tests.flows.test_logs_comparison import plant_comparison

# The commands, run in one fresh interpreter: afterwards none of the named packages may be among its modules.
PROBE = """
import sys
from typer.testing import CliRunner
from dormouse.cli.app import app
runner = CliRunner()
for args in {commands!r}:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (args, result.output)
print(sorted(m for m in sys.modules if m.split(".")[0] in {packages!r}))
"""
COMMANDS = [["--help"], ["--version"], *[[c, "--help"] for c in
                                        ("train", "validate", "ab", "logs", "arms", "eval", "sample")],
            *[["ab", verb, "--help"] for verb in ("run", "plan", "status", "design", "list", "publish", "carry",
                                                  "rerun", "size")]]


def imported(commands: list[list[str]], packages: set[str], cwd: Path | None = None) -> str:
    """The modules of ``packages`` that running ``commands`` in one fresh interpreter imported ("[]": none)."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(commands=commands, packages=packages)],
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_help_and_version_do_not_import_torch() -> None:
    assert imported(COMMANDS, {"torch"}) == "[]", "torch imported by help or --version"


def test_logs_of_runs_and_a_comparison_does_not_import_torch(tmp_path: Path) -> None:
    plant_comparison(tmp_path / "runs")  # runs with a config.yaml each: the reader works out their arm
    plant(tmp_path / "runs", healthy("attnres"), arm="attnres", name="solo")
    commands = [["logs"], ["logs", "runs/ab/tiny", "--format", "table", "--runs"],
                ["logs", "runs/ab/tiny", "--format", "json"], ["logs", "runs/solo", "--format", "tsv"]]
    assert imported(commands, {"torch"}, cwd=tmp_path) == "[]", "torch imported by dormouse logs"


def test_ab_list_imports_neither_torch_nor_scipy() -> None:
    assert imported([["ab", "list"]], {"torch", "scipy"}) == "[]", "torch or scipy imported by ab list"


# Every arm of a registered comparison composed and validated in a fresh interpreter, and one bad option refused.
CONFIG_PROBE = """
import sys
from dormouse.ab.comparison.registry import load_spec
from dormouse.config.schema import compose_config, validate
spec = load_spec("smoke").spec
for overrides in spec.arms.values():
    assert validate(compose_config([*spec.fixed, *overrides])) == [], overrides
bad = validate(compose_config([*spec.fixed, "model.attnres.block_size=2"]))
assert bad == ["model.attnres.block_size=2 is set but model.use_attnres=false: set model.use_attnres=true or leave "
               "block_size null"], bad
print("torch" in sys.modules)
"""


def test_a_comparisons_configs_compose_and_validate_without_torch() -> None:
    """The schema and the option checks are the arms' specs (dormouse.arms.specs), not their nn.Module classes."""
    done = subprocess.run([sys.executable, "-c", CONFIG_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", "torch imported by composing or validating a config"


# The read-only ab verbs on a plain comparison and a registered study, in one fresh interpreter; a status of a
# comparison never started exits 2.
VERBS_PROBE = """
import sys
from typer.testing import CliRunner
from dormouse.cli.app import app
runner = CliRunner()
for name in ("smoke", "smoke_study"):
    for verb, codes in (("plan", {{0}}), ("status", {{0, 2}}), ("design", {{0}})):
        result = runner.invoke(app, ["ab", verb, name, "--root", {root!r}])
        assert result.exit_code in codes, (verb, name, result.exit_code, result.output)
assert runner.invoke(app, ["ab", "list"]).exit_code == 0
print("torch" in sys.modules)
"""


def test_read_only_ab_verbs_import_no_torch(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", VERBS_PROBE.format(root=str(tmp_path / "ab"))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", "torch imported by ab plan, status, design or list"
