"""The residual-arm registry: every arm by name in registry order, the eval line's counter order and the A/B
tie-break order (docs/ab-protocol.md). Built-ins are declared by name (:data:`BUILTIN_ARMS`) so name-only readers
import no torch; a ResidualArm subclass with its own ``name`` registers itself when defined."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from dormouse.arms.plugin_routes import PLUGIN_HINT
from dormouse.errors import DormouseError

# The built-in arms (defined in dormouse.arms.<name>, imported by dormouse.arms.builtin), simplest first: the
# registry's order starts with them, not sorted.
BUILTIN_ARMS: tuple[str, ...] = ("prenorm", "rezero", "gr", "value_residual", "laurel", "denseformer",
                                 "injection", "attnres", "delta_attnres", "mhc")
DEFAULT_ARM = "rezero"  # the arm no switch selects; its class declares default=True
BUILTIN_PACKAGE = "dormouse.arms"  # a class defined in a module under it is a built-in arm

_REGISTRY: dict[str, Any] = {}  # name -> ResidualArm subclass, in definition order
_SAME: dict[str, list[Any]] = {}  # name -> further classes of the registered arm's exact source (another route)


def source_file(cls: Any) -> str:
    """The file that defines ``cls`` ("" when its module has none)."""
    return str(getattr(sys.modules.get(cls.__module__), "__file__", None) or "")


def _source_bytes(cls: Any) -> bytes | None:
    try:
        return Path(source_file(cls)).read_bytes() if source_file(cls) else None
    except OSError:
        return None


def same_source(a: Any, b: Any) -> bool:
    """One arm reached by two routes (a plugin file and the package that installs it): one class name, and the
    files defining them hold the same bytes."""
    return a.__qualname__ == b.__qualname__ and _source_bytes(a) is not None and _source_bytes(a) == _source_bytes(b)


class ArmNameTaken(DormouseError, ValueError, exit_code=2):
    """A class names itself like another arm: a built-in (``taken`` None when not imported yet) or one of other
    source. The plugin loader says it with both plugins' origins."""

    def __init__(self, name: str, cls: Any, taken: Any) -> None:
        self.name, self.cls, self.taken = name, cls, taken
        if name in BUILTIN_ARMS:
            why = f"arm name {name!r} is taken by dormouse's built-in arm {name!r}"
        else:
            why = f"arm name {name!r} is taken by {taken.__qualname__} ({taken.__module__}, {source_file(taken)})"
        super().__init__(f"{why}: {cls.__qualname__} ({cls.__module__}, {source_file(cls)}) must choose another name")


def register_arm(cls: Any) -> None:
    """Enter ``cls`` when it is defined; refuses a built-in's name outside dormouse.arms, a name taken by other
    source, a second default arm, and an undeclared built-in. The same source again joins the arm it is."""
    name = cls.name
    builtin = cls.__module__.startswith(BUILTIN_PACKAGE + ".")
    if name in BUILTIN_ARMS and not builtin:  # refused even before the built-ins are imported
        raise ArmNameTaken(name, cls, _REGISTRY.get(name))
    taken = _REGISTRY.get(name)
    if taken is not None and taken is not cls:
        if not same_source(taken, cls):
            raise ArmNameTaken(name, cls, taken)
        _SAME.setdefault(name, []).append(cls)
        return
    if bool(cls.default) != (name == DEFAULT_ARM):
        raise ValueError(f"{cls.__qualname__} declares default={bool(cls.default)} but {DEFAULT_ARM} is the "
                         "default arm (dormouse.arms.registry.DEFAULT_ARM)")
    if builtin and name not in BUILTIN_ARMS:
        raise ValueError(f"{cls.__qualname__} ({cls.__module__}) is a built-in arm named {name!r} that "
                         "dormouse.arms.registry.BUILTIN_ARMS does not declare: add it there, in its place")
    _REGISTRY[name] = cls


def unregister_arm(name: str) -> None:
    """Remove an arm (for tests that define a throw-away arm)."""
    _REGISTRY.pop(name, None)
    _SAME.pop(name, None)


def forget_module(module: str) -> None:
    """Drop the further classes a module (or its submodules) gave an arm: an import that failed leaves none."""
    for classes in _SAME.values():
        classes[:] = [c for c in classes if not _in_module(c, module)]


def _in_module(cls: Any, module: str) -> bool:
    return bool(cls.__module__ == module or cls.__module__.startswith(module + "."))


def arms_of_module(module: str) -> tuple[str, ...]:
    """The arms ``module`` (or a submodule) defines, a class of the registered arm's exact source included."""
    return tuple(name for name, cls in defined_arm_classes().items()
                 if any(_in_module(c, module) for c in (cls, *_SAME.get(name, ()))))


def arm_names() -> tuple[str, ...]:
    """Every arm's name in registry order: declared built-ins, then others as defined; needs no class."""
    return (*BUILTIN_ARMS, *(name for name in _REGISTRY if name not in BUILTIN_ARMS))


def defined_arm_classes() -> dict[str, Any]:
    """The arm classes defined so far in this process, in registry order."""
    return {name: _REGISTRY[name] for name in arm_names() if name in _REGISTRY}


def arm_classes() -> dict[str, Any]:
    """Every registered arm class by name; a declared built-in with no class is a RuntimeError."""
    missing = [name for name in BUILTIN_ARMS if name not in _REGISTRY]
    if missing:
        raise RuntimeError(f"the built-in arms {', '.join(missing)} are declared "
                           "(dormouse.arms.registry.BUILTIN_ARMS) but not defined: import dormouse.arms.builtin "
                           "before reading arm classes")
    return defined_arm_classes()


def arm_class(name: str) -> Any:
    """The class registered as ``name``; a KeyError naming the registered arms otherwise."""
    classes = arm_classes()
    if name not in classes:
        raise KeyError(f"arm {name!r} is not registered; the arms are {', '.join(classes)}")
    return classes[name]


def default_arm() -> str:
    """The arm a config selects when no switch is on."""
    return DEFAULT_ARM


class _ArmNames(Sequence[str]):
    """The arm names (:func:`arm_names`), read live: an arm registered later (a test's) is in every later read."""

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return arm_names()[index]

    def __len__(self) -> int:
        return len(arm_names())

    def __iter__(self) -> Iterator[str]:
        return iter(arm_names())

    def __contains__(self, name: object) -> bool:
        return name in arm_names()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, _ArmNames)) else other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


ARMS: Sequence[str] = _ArmNames()


def arm_switch(arm: str) -> str:
    """The ModelConfig field that selects ``arm`` (the default arm has none: it is what no switch selects)."""
    return f"use_{arm}"


def selected_arms(model_cfg: Any) -> list[str]:
    """The non-default arms whose switches are on (at most one after validation); an absent switch is off."""
    return [name for name in arm_names()
            if name != DEFAULT_ARM and bool(getattr(model_cfg, arm_switch(name), False))]


class UnknownArmError(DormouseError, ValueError, exit_code=2):
    """A saved config switches on an arm no loaded code defines (a plugin not loaded); the message says how to load it.
    """


def switch_arm(key: str) -> str | None:
    """The arm a switch key (``use_<name>``, ``model.use_<name>``) names; None for another key."""
    leaf = key.removeprefix("model.")
    prefix = arm_switch("")
    return leaf[len(prefix):] if leaf.startswith(prefix) and "." not in leaf and len(leaf) > len(prefix) else None


def unknown_switches(model_cfg: Any) -> list[str]:
    """The ``use_<name>`` keys of ``model_cfg`` that are on but select no registered arm."""
    known = {arm_switch(name) for name in arm_names()}
    keys = model_cfg.keys() if hasattr(model_cfg, "keys") else vars(model_cfg).keys()
    return [str(k) for k in keys
            if str(k).startswith("use_") and str(k) not in known and bool(getattr(model_cfg, str(k), False))]


def model_arm(model_cfg: Any) -> str:
    """The arm whose switch is on, else the default; a switch for an unregistered arm is :class:`UnknownArmError`."""
    unknown = unknown_switches(model_cfg)
    if unknown:
        raise UnknownArmError(f"model.{unknown[0]}=true selects arm {switch_arm(unknown[0])!r}, which no loaded "
                              f"code defines: {PLUGIN_HINT}")
    chosen = selected_arms(model_cfg)
    return chosen[0] if chosen else default_arm()


def build_arm(model_cfg: Any, kernel: str = "torch") -> Any:
    """The arm a model config selects, on the read path ``kernel`` (ignored without a fused read)."""
    return arm_class(model_arm(model_cfg)).from_config(model_cfg, kernel)
