"""The residual-arm registry: every arm by name in registry order, the eval line's counter order and the A/B
tie-break order (docs/ab-protocol.md). Built-ins are declared by name (:data:`BUILTIN_ARMS`) so name-only readers
import no torch; a ResidualArm subclass with its own ``name`` registers itself when defined."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from dormouse.errors import DormouseError

# The built-in arms (defined in dormouse.arms.<name>, imported by dormouse.arms.builtin), simplest first: the
# registry's order starts with them, not sorted.
BUILTIN_ARMS: tuple[str, ...] = ("prenorm", "rezero", "gr", "attnres")
DEFAULT_ARM = "rezero"  # the arm no switch selects; its class declares default=True
BUILTIN_PACKAGE = "dormouse.arms"  # a class defined in a module under it is a built-in arm

_REGISTRY: dict[str, Any] = {}  # name -> ResidualArm subclass, in definition order


def register_arm(cls: Any) -> None:
    """Enter ``cls`` when it is defined; refuses a taken name, a second default arm, and an undeclared built-in."""
    name = cls.name
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"arm name {name!r} is already registered by {_REGISTRY[name].__qualname__}: "
                         f"choose another name for {cls.__qualname__}")
    if bool(cls.default) != (name == DEFAULT_ARM):
        raise ValueError(f"{cls.__qualname__} declares default={bool(cls.default)} but {DEFAULT_ARM} is the "
                         "default arm (dormouse.arms.registry.DEFAULT_ARM)")
    if cls.__module__.startswith(BUILTIN_PACKAGE + ".") and name not in BUILTIN_ARMS:
        raise ValueError(f"{cls.__qualname__} ({cls.__module__}) is a built-in arm named {name!r} that "
                         "dormouse.arms.registry.BUILTIN_ARMS does not declare: add it there, in its place")
    _REGISTRY[name] = cls


def unregister_arm(name: str) -> None:
    """Remove an arm (for tests that define a throw-away arm)."""
    _REGISTRY.pop(name, None)


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
        raise UnknownArmError(f"model.{unknown[0]}=true selects arm {unknown[0][len('use_'):]!r}, which no loaded "
                              "code defines: load the plugin that defines it (--plugin FILE, DORMOUSE_PLUGINS, "
                              "or an installed package's `dormouse.arms` entry point); `dormouse arms` lists "
                              "the arms this command knows")
    chosen = selected_arms(model_cfg)
    return chosen[0] if chosen else default_arm()


def build_arm(model_cfg: Any, kernel: str = "torch") -> Any:
    """The arm a model config selects, on the read path ``kernel`` (ignored without a fused read)."""
    return arm_class(model_arm(model_cfg)).from_config(model_cfg, kernel)
