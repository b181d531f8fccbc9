"""One error base, one CLI handler: every exception class of the package is a DormouseError, and every command
ends on each of them with the exit code the class declares and its message as one ``error:`` line, no
traceback (dormouse/errors.py, dormouse/cli/exits.py).

The classes are found by walking the package, not listed, so a new one that forgets the base goes red here;
the commands are read from the app, so a new command without a row below goes red too. Each command's work
(the function it calls) is replaced by one that raises the error, so a command that catches an error by hand
again, with its own exit code or its own way of printing, is caught whichever error it catches.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import typer
from typer.testing import CliRunner

import dormouse
from dormouse.cli.app import app
from dormouse.errors import DormouseError, Interrupted

runner = CliRunner()

# A message with what rich would read as markup: it must be printed as it is.
MESSAGE = "cannot go on with [x] at runs/[bold]r; fix it"


def _package_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a dormouse module (``__main__`` runs the CLI: not imported)."""
    found = []
    for info in pkgutil.walk_packages(dormouse.__path__, "dormouse."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found += [obj for obj in vars(module).values()
                  if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name]
    return found


EXCEPTIONS = _package_exceptions()

# Each command (and each path through one), the function that does its work (imported by the command when
# it runs, so replacing the module's attribute reaches it) and the arguments that get there.
WORK = [
    ("train", "dormouse.train.run_config.load_run_config", ["train"]),
    ("train", "dormouse.train.loop.train", ["train"]),
    ("train", "dormouse.cli.sweep.run_sweep", ["train", "-m", "train.lr=1e-3,3e-3"]),
    ("train", "dormouse.config.schema.compose_config", ["train", "--cfg", "job"]),
    ("validate", "dormouse.train.preflight.preflight", ["validate"]),
    ("ab", "dormouse.ab.comparison.command.ab_run", ["ab", "smoke"]),
    ("ab run", "dormouse.ab.comparison.command.ab_run", ["ab", "run", "smoke"]),
    ("ab plan", "dormouse.ab.comparison.command.ab_plan", ["ab", "plan", "smoke"]),
    ("ab status", "dormouse.ab.comparison.command.ab_status", ["ab", "status", "smoke"]),
    ("ab design", "dormouse.ab.comparison.command.ab_design", ["ab", "design", "smoke"]),
    ("ab list", "dormouse.ab.comparison.registry.list_comparisons", ["ab", "list"]),
    ("ab publish", "dormouse.ab.lifecycle.publish.publish_named", ["ab", "publish", "smoke", "--command", "x"]),
    ("ab carry", "dormouse.ab.lifecycle.carry.save", ["ab", "carry", "save", "smoke"]),
    ("ab carry", "dormouse.ab.lifecycle.carry.restore", ["ab", "carry", "restore", "smoke"]),
    ("ab rerun", "dormouse.ab.lifecycle.rerun.rerun", ["ab", "rerun", "smoke", "gr", "1"]),
    ("ab size", "dormouse.ab.lifecycle.size.size_from", ["ab", "size", "results.json", "--looks", "2,4"]),
    ("logs", "dormouse.cli.logs.logs_command", ["logs", "."]),
    ("eval", "dormouse.cli.eval.eval_checkpoint", ["eval", "runs/r"]),
    ("sample", "dormouse.cli.sample.sample_run", ["sample", "runs/r"]),
    ("arms", "dormouse.cli.arms.arms_command", ["arms"]),
]


def _instance(cls: type[DormouseError]) -> DormouseError:
    """``cls`` carrying MESSAGE, whatever its constructor takes (a list of lines, a lock's holder, a code)."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, MESSAGE)
    return exc


def test_every_exception_class_of_the_package_derives_from_dormouse_error():
    assert len(EXCEPTIONS) >= 12 and DormouseError in EXCEPTIONS and Interrupted in EXCEPTIONS
    strays = [f"{cls.__module__}.{cls.__qualname__}" for cls in EXCEPTIONS if not issubclass(cls, DormouseError)]
    assert not strays, f"exception classes outside DormouseError (no exit code, a traceback in the CLI): {strays}"


def test_every_exception_class_declares_an_exit_code_the_cli_knows():
    codes = {f"{cls.__module__}.{cls.__qualname__}": cls.exit_code for cls in EXCEPTIONS
             if issubclass(cls, DormouseError)}
    assert set(codes.values()) <= {1, 2, 130}, codes
    refused = ["ConfigError", "DataError", "SampleError", "ModelLoadError", "StartRefused", "RunDirRefused",
               "LockHeld", "LaunchError", "ComparisonError", "ABSpecError"]
    assert all(code == 2 for name, code in codes.items() if name.rsplit(".", 1)[1] in refused), codes
    assert codes["dormouse.errors.TrainError"] == 1 and codes["dormouse.run.checkpoint.CheckpointError"] == 1


def test_every_command_is_covered_by_the_mapping_test():
    group = typer.main.get_command(app)
    commands = set(group.commands) | {f"ab {verb}" for verb in group.commands["ab"].commands}
    assert commands == {command for command, _, _ in WORK}


def test_ctrl_c_before_a_command_turns_it_into_an_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch):
    def ctrl_c(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("dormouse.ab.comparison.command.ab_plan", ctrl_c)
    result = runner.invoke(app, ["ab", "plan", "smoke"])
    assert (result.exit_code, result.stderr) == (130, "")


@pytest.fixture(scope="module")
def default_config():
    """The default run config, composed once: train and validate load it before their work."""
    from dormouse.train.run_config import load_run_config

    return load_run_config([])


@pytest.mark.parametrize("command,target,args", WORK, ids=[f"{c}:{t.rsplit('.', 1)[1]}" for c, t, _ in WORK])
def test_every_command_ends_on_each_dormouse_error_with_its_exit_code_and_one_error_line(
        monkeypatch: pytest.MonkeyPatch, default_config, command: str, target: str, args: list[str]):
    monkeypatch.setattr("dormouse.train.run_config.load_run_config", lambda *_args, **_kwargs: default_config)
    module, _, name = target.rpartition(".")
    wrong = []
    for cls in (cls for cls in EXCEPTIONS if issubclass(cls, DormouseError)):
        exc = _instance(cls)

        def fail(*_args: object, _exc: DormouseError = exc, **_kwargs: object) -> None:
            raise _exc

        monkeypatch.setattr(importlib.import_module(module), name, fail)
        result = runner.invoke(app, args)
        said = "" if cls.already_said else f"error: {MESSAGE}\n"
        if (result.exit_code, result.stderr) != (cls.exit_code, said) or not isinstance(result.exception,
                                                                                        (SystemExit, type(None))):
            wrong.append(f"{cls.__name__}: exit {result.exit_code} (declared {cls.exit_code}), "
                         f"stderr {result.stderr!r}, exception {result.exception!r}")
    assert not wrong, f"dormouse {' '.join(args)} with {target} raising:\n" + "\n".join(wrong)


def test_an_interrupt_exits_with_its_signals_code_and_says_nothing_more(monkeypatch: pytest.MonkeyPatch):
    def stopped(*_args: object, **_kwargs: object) -> None:
        raise Interrupted(143, "interrupted at step 3; the loop said so")

    monkeypatch.setattr("dormouse.train.loop.train", stopped)
    result = runner.invoke(app, ["train"])
    assert (result.exit_code, result.stderr) == (143, "")


def test_an_error_naming_several_problems_says_each_on_its_own_line(monkeypatch: pytest.MonkeyPatch):
    from dormouse.config.schema import ConfigError

    def refused(*_args: object, **_kwargs: object) -> None:
        raise ConfigError(["model.a: first", "model.b: second"])

    monkeypatch.setattr("dormouse.train.run_config.load_run_config", refused)
    result = runner.invoke(app, ["validate"])
    assert (result.exit_code, result.stderr) == (2, "error: model.a: first\nerror: model.b: second\n")
