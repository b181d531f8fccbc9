"""The registry names the built-in arms without their classes (dormouse.arms.registry.BUILTIN_ARMS,
DEFAULT_ARM), so `dormouse logs` and the run reader need no torch; the classes are checked against that
declaration when they register and when they are read, so the names and the classes cannot drift."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dormouse.arms import builtin, registry  # noqa: F401  (builtin: the classes this module compares)
from dormouse.arms.base import ResidualArm
from dormouse.arms.specs import BUILTIN_SPECS


def test_the_declared_builtin_arms_are_the_classes_dormouse_arms_builtin_defines() -> None:
    classes = registry.arm_classes()
    defined_here = [name for name, cls in classes.items() if cls.__module__.startswith("dormouse.arms.")]
    assert defined_here == list(registry.BUILTIN_ARMS)  # the registry order starts with them, as declared
    assert [name for name, cls in classes.items() if cls.default] == [registry.DEFAULT_ARM]
    assert list(registry.ARMS) == list(classes) and registry.default_arm() == registry.DEFAULT_ARM


def test_the_registry_order_is_the_declared_built_ins_simplest_first_then_the_others() -> None:
    """The order is the tie-break's (a tie keeps the simpler arm) and the counters' in metrics.jsonl: declared, not
    sorted."""
    names = registry.arm_names()
    assert names[:len(registry.BUILTIN_ARMS)] == registry.BUILTIN_ARMS
    assert names[:4] == ("prenorm", "rezero", "gr", "value_residual") and names[-3:] == ("attnres", "delta_attnres",
                                                                                         "mhc")


def test_each_builtin_arm_class_derives_from_the_spec_the_schema_reads() -> None:
    """The schema is built from the specs (no torch); each class takes its name, default and options from its own."""
    classes = registry.arm_classes()
    assert list(BUILTIN_SPECS) == list(registry.BUILTIN_ARMS)
    assert all(issubclass(classes[name], spec) for name, spec in BUILTIN_SPECS.items())


def test_a_builtin_arm_the_registry_does_not_declare_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'undeclared'.*BUILTIN_ARMS does not declare"):
        type("Undeclared", (ResidualArm,), {"name": "undeclared", "__module__": "dormouse.arms.undeclared"})
    assert "undeclared" not in registry.ARMS


def test_a_second_default_arm_is_refused() -> None:
    with pytest.raises(ValueError, match=r"declares default=True but rezero is the default arm"):
        type("OtherDefault", (ResidualArm,), {"name": "other_default", "default": True})
    assert "other_default" not in registry.ARMS


def test_a_declared_arm_no_class_defines_is_refused_when_the_classes_are_read(monkeypatch) -> None:
    monkeypatch.setattr(registry, "BUILTIN_ARMS", (*registry.BUILTIN_ARMS, "ghost"))
    assert "ghost" in registry.ARMS  # the names are the declaration
    with pytest.raises(RuntimeError, match=r"ghost are declared .* but not defined"):
        registry.arm_classes()


# In a fresh interpreter, without the arm classes: the names, the default and a config's arm, as the run
# reader works them out for `dormouse logs`.
NAMES_PROBE = """
import sys
from omegaconf import OmegaConf
from dormouse.arms.registry import ARMS, default_arm, model_arm
from dormouse.run import checks, reader  # noqa: F401
arms = [model_arm(OmegaConf.create({"model": {f"use_{a}": True}}).model) for a in ARMS if a != default_arm()]
print(list(ARMS), default_arm(), arms, "torch" in sys.modules)
"""


def test_the_arm_names_and_a_configs_arm_are_read_without_importing_torch() -> None:
    """No plugin loaded (DORMOUSE_PLUGINS dropped): the built-in arms alone, named without their classes."""
    done = subprocess.run([sys.executable, "-c", NAMES_PROBE], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "DORMOUSE_PLUGINS"})
    assert done.returncode == 0, done.stderr
    builtins = list(registry.BUILTIN_ARMS)
    others = [a for a in builtins if a != registry.DEFAULT_ARM]
    assert done.stdout.strip() == f"{builtins} {registry.DEFAULT_ARM} {others} False"
