"""Arms from outside the package (docs/arms.md): a plugin module defines arms when imported. Plugins come from the
``dormouse.arms`` entry points, ``DORMOUSE_PLUGINS`` and ``--plugin``/a registration/a run's record; each is
added to ``DORMOUSE_PLUGINS`` so child processes load it too, and a file is imported under its stem so its
classes pickle. A bad plugin is a :class:`PluginError` (exit 2)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dormouse.arms.plugin_routes import ENTRY_POINT_GROUP, ENV_VAR, PLUGIN_HINT  # noqa: F401
from dormouse.arms.registry import (
    BUILTIN_ARMS,
    ArmNameTaken,
    arms_of_module,
    defined_arm_classes,
    forget_module,
    source_file,
    unregister_arm,
)
from dormouse.errors import DormouseError


class PluginError(DormouseError, ValueError, exit_code=2):
    """A plugin that cannot be used (not found, import fails, no arm, a clash): exit 2, named with the fix."""


@dataclass(frozen=True)
class Plugin:
    """A loaded plugin: module, file, source sha256, where it was named, and its arms."""

    module: str
    file: str
    sha256: str
    origin: str
    arms: tuple[str, ...]
    spec: str = ""  # how to load it again: its file for a file plugin, its module name; "" for an entry point

    def record(self) -> dict[str, str]:
        """What a run's provenance keeps: enough to load the same plugin again and to tell it changed."""
        return {"module": self.module, "file": self.file, "sha256": self.sha256}


_LOADED: dict[str, Plugin] = {}  # module name -> plugin, in load order


def loaded_plugins() -> list[Plugin]:
    """Every plugin this process has loaded, in load order."""
    return list(_LOADED.values())


def plugin_of_arm(arm: str) -> Plugin | None:
    """The loaded plugin that defines ``arm`` (None for a built-in arm or one defined elsewhere)."""
    return next((p for p in _LOADED.values() if arm in p.arms), None)


def plugin_of_module(module: str) -> Plugin | None:
    """The loaded plugin ``module`` (None when not loaded)."""
    return _LOADED.get(module)


def source_files(module: str, module_file: Path) -> dict[str, Path]:
    """A plugin's source files by path relative to its root: a lone module's file; for a module inside a package,
    every ``*.py`` of its top-level package (subpackages included), since any of them may compute the arm."""
    depth = module.count(".") + (module_file.name == "__init__.py")
    if not depth:
        return {module_file.name: module_file}
    root = module_file.parents[depth - 1]
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def file_digests(module: str, module_file: Path) -> dict[str, str]:
    """``relative path -> sha256`` of a plugin's source files as they are now (a file gone is left out)."""
    return {rel: hashlib.sha256(path.read_bytes()).hexdigest()
            for rel, path in source_files(module, module_file).items() if path.is_file()}


def combined_sha256(module: str, digests: dict[str, str]) -> str:
    """A plugin's sha256 from its files' (:func:`file_digests`): a lone module's is its file's, as ``sha256sum``
    prints it; a package's is the sha256 of ``sha256sum``'s lines for its files (``<sha256>  ./<path>``) in byte
    order of the path, the recipe in docs/arms.md."""
    if "." not in module and list(digests) == [f"{module}.py"]:
        return digests[f"{module}.py"]
    lines = "".join(f"{digests[rel]}  ./{rel}\n" for rel in sorted(digests, key=lambda rel: rel.encode()))
    return hashlib.sha256(lines.encode()).hexdigest()


def source_sha256(module: str, module_file: Path) -> str:
    """The sha256 a run records for a plugin (:func:`combined_sha256`), read now."""
    return combined_sha256(module, file_digests(module, module_file))


def _finish(module: Any, origin: str, label: str, spec: str = "") -> Plugin:
    """The loaded module as a :class:`Plugin`; refused when it defines no arm."""
    arms = arms_of_module(module.__name__)
    if not arms:
        sys.modules.pop(module.__name__, None)  # a later load of a corrected file imports it afresh
        raise PluginError(f"plugin {label} ({origin}) defines no arm: it must define a subclass of "
                          "dormouse.arms.base.ResidualArm with its own `name` (docs/arms.md)")
    file = Path(module.__file__ or "").resolve()
    plugin = Plugin(module.__name__, str(file), source_sha256(module.__name__, file), origin, arms, spec)
    _LOADED[module.__name__] = plugin
    return plugin


def _import(label: str, origin: str, do_import: Any, module_name: str) -> Any:
    """Run ``do_import()``; a failure is one PluginError, and arms a half-imported module registered are removed."""
    before = set(defined_arm_classes())
    try:
        return do_import()
    except PluginError:
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        for name in set(defined_arm_classes()) - before:
            unregister_arm(name)
        forget_module(module_name)
        if isinstance(exc, ArmNameTaken):
            message = _name_taken(exc, label, origin)  # reads the file of a module not yet forgotten
        else:
            why = str(exc).splitlines()[0] if str(exc) else ""
            message = f"plugin {label} ({origin}) failed to import: {type(exc).__name__}: {why}"
        sys.modules.pop(module_name, None)
        raise PluginError(message) from None


def _name_taken(exc: ArmNameTaken, label: str, origin: str) -> str:
    """A plugin arm's name is taken: by a built-in (the plugin renames its arm), or by another plugin's arm of
    other source (load one of the two, or rename one)."""
    this = f"plugin {label} ({origin}; module {exc.cls.__module__}, file {source_file(exc.cls)})"
    if exc.name in BUILTIN_ARMS:
        return (f"{this}: its arm {exc.cls.__qualname__} is named {exc.name!r}, which is taken by dormouse's "
                f"built-in arm {exc.name!r}; the plugin must choose another name (its class's `name`)")
    other = plugin_of_arm(exc.name)
    how = f"{other.origin}; " if other else ""
    return (f"{this} defines arm {exc.name!r}, which {exc.taken.__module__} ({how}file {source_file(exc.taken)}) "
            "already defines from other source: load only one of them (drop a --plugin, a "
            f"{ENV_VAR} entry or a registration's `plugins:` entry, or `pip uninstall` the package that "
            "installs one), or rename one of the two arms")


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.is_file() and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _load_file(path: Path, origin: str, label: str) -> Plugin:
    if not path.is_file():
        raise PluginError(f"plugin {label} ({origin}): no such file {path}; give the path of a .py file or the "
                          "name of an importable module")
    name = path.stem
    if not name.isidentifier():
        raise PluginError(f"plugin {label} ({origin}): {path.name} is not a module name; rename the file to a "
                          "Python identifier (letters, digits, _)")
    present = sys.modules.get(name)
    if present is not None:
        present_file = Path(getattr(present, "__file__", "") or "").resolve()
        if present_file != path and not _same_bytes(present_file, path):  # the same source: one plugin
            raise PluginError(f"plugin {label} ({origin}): the module name {name!r} is already taken by "
                              f"{getattr(present, '__file__', None) or 'a built-in module'}; rename {path.name}")
        return _LOADED.get(name) or _finish(present, origin, label, str(path))

    def do_import() -> Any:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before executing: a dataclass in the file looks its module up
        spec.loader.exec_module(module)
        return module

    return _finish(_import(label, origin, do_import, name), origin, label, str(path))


def _load_module(name: str, origin: str) -> Plugin:
    if name in _LOADED:
        return _LOADED[name]
    if importlib.util.find_spec(name.split(".")[0]) is None:
        raise PluginError(f"plugin {name} ({origin}): no such file or importable module; give the path of a "
                          ".py file (my_arms.py) or an installed module's name")
    return _finish(_import(name, origin, lambda: importlib.import_module(name), name), origin, name, name)


def _export(spec: str) -> None:
    """Add a file or module plugin to this process's ``DORMOUSE_PLUGINS``: its children load it too."""
    present = [s for s in os.environ.get(ENV_VAR, "").split(os.pathsep) if s]
    if spec not in present:
        os.environ[ENV_VAR] = os.pathsep.join([*present, spec])


def is_file_spec(spec: str) -> bool:
    """A plugin named by its file (``*.py`` or a path) rather than by its module name."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def load_plugin(spec: str, origin: str = "--plugin", base: Path | None = None) -> Plugin:
    """Load one plugin (a ``.py`` file relative to ``base``, or a module name), once. Raises PluginError."""
    spec = spec.strip()
    if not spec:
        raise PluginError(f"an empty plugin name ({origin}); give a .py file or a module name")
    if is_file_spec(spec):
        path = Path(spec).expanduser()
        path = (path if path.is_absolute() else (base or Path.cwd()) / path).resolve()
        plugin = _load_file(path, origin, spec)
        _export(str(path))
    else:
        plugin = _load_module(spec, origin)
        _export(spec)
    return plugin


def load_entry_points() -> list[Plugin]:
    """Every module installed distributions declare under ``dormouse.arms``."""
    out: list[Plugin] = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep.dist, "name", None) or "an installed distribution"
        origin = f"entry point {ep.name!r} of {dist}"
        if ep.module in _LOADED:
            out.append(_LOADED[ep.module])
            continue
        _import(ep.value, origin, ep.load, ep.module)
        out.append(_finish(sys.modules[ep.module], origin, ep.value))
    return out


def environment_specs() -> list[str]:
    """The plugins ``DORMOUSE_PLUGINS`` names."""
    return [s for s in os.environ.get(ENV_VAR, "").split(os.pathsep) if s.strip()]


def activate(specs: Iterable[str] = (), origin: str = "--plugin") -> list[Plugin]:
    """Load the entry points, ``DORMOUSE_PLUGINS`` and ``specs`` in that order; returns every plugin loaded."""
    load_entry_points()
    for spec in environment_specs():
        load_plugin(spec, ENV_VAR)
    for spec in specs:
        load_plugin(spec, origin)
    return loaded_plugins()


def plugin_specs() -> list[str]:
    """Each file or module plugin's spec in load order: what a child process needs besides entry points."""
    return [p.spec for p in _LOADED.values() if p.spec]


def records_for(arm: str) -> list[dict[str, str]]:
    """What a run of ``arm`` records as its plugins: the plugin that defines it, or nothing (a built-in arm)."""
    plugin = plugin_of_arm(arm)
    return [plugin.record()] if plugin else []


def load_recorded(records: Sequence[dict[str, Any]], what: str) -> list[str]:
    """Load the plugins a run recorded (by module, else file); a note per plugin whose sha256 differs."""
    notes: list[str] = []
    for rec in records:
        module, file, sha = str(rec.get("module")), str(rec.get("file")), str(rec.get("sha256"))
        plugin = _LOADED.get(module)
        if plugin is None:
            if Path(file).is_file():
                plugin = load_plugin(file, f"recorded by {what}")
            elif importlib.util.find_spec(module.split(".")[0]) is not None:
                plugin = load_plugin(module, f"recorded by {what}")
            else:
                raise PluginError(f"{what} used plugin {module} (file {file}), which is not there now; pass "
                                  "--plugin FILE with its source")
        if plugin.sha256 != sha:
            notes.append(f"{what} used plugin {module} with source sha256 {sha[:12]}; the one loaded now "
                         f"({plugin.file}) is {plugin.sha256[:12]}")
    return notes
