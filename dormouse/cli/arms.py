"""``dormouse arms``: the arms this process knows (built-in and plugin) in registry order (docs/arms.md), each with
its switch, options and defaults, origin and description. A table on a terminal, otherwise one tab-separated
line per arm with indented ``key=default`` lines, or JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dormouse.arms import builtin  # noqa: F401  (the arms this command lists)
from dormouse.arms.plugins import plugin_of_arm
from dormouse.arms.registry import arm_classes
from dormouse.errors import print_error

FORMATS = ("table", "text", "json")
NO_SWITCH = "default (no switch)"
PACKAGE = "dormouse"


@dataclass(frozen=True)
class Source:
    """Where an arm's class was defined: ``built-in``, ``plugin`` (its file and how it was named) or ``module``."""

    kind: str
    module: str
    file: str | None = None
    origin: str | None = None

    def __str__(self) -> str:
        if self.kind == "plugin":
            return f"plugin {self.module} ({self.file}; {self.origin})"
        return f"{self.kind} ({self.module})"


@dataclass(frozen=True)
class ArmInfo:
    """What ``dormouse arms`` says about one registered arm."""

    name: str
    default: bool
    switch: str | None  # model.use_<name>; None for the default arm
    options: dict[str, Any]  # model.<name>.<field> -> its default
    source: Source
    description: str

    @property
    def switch_text(self) -> str:
        return self.switch or NO_SWITCH


def option_defaults(name: str, options: type | None) -> dict[str, Any]:
    """An arm's options as ``{"model.<name>.<field>": default}``; None where the config requires it."""
    if options is None:
        return {}
    out: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        out[f"model.{name}.{f.name}"] = value
    return out


def source_of(name: str, cls: type) -> Source:
    """Where ``cls`` (registered as ``name``) came from: a loaded plugin, the dormouse package, or a module."""
    plugin = plugin_of_arm(name)
    if plugin is not None:
        return Source("plugin", plugin.module, plugin.file, plugin.origin)
    module = cls.__module__
    kind = "built-in" if module == PACKAGE or module.startswith(PACKAGE + ".") else "module"
    return Source(kind, module)


def arm_infos() -> list[ArmInfo]:
    """Every registered arm, in registry order."""
    out: list[ArmInfo] = []
    for name, cls in arm_classes().items():
        switch = cls.switch()
        out.append(ArmInfo(name, bool(cls.default), f"model.{switch}" if switch else None,
                           option_defaults(name, cls.options), source_of(name, cls), cls.describe()))
    return out


def override_value(value: Any) -> str:
    """A default as an override would write it (``null``, ``true``, ``0.0``, ``paper``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def text_lines(infos: list[ArmInfo]) -> list[str]:
    """The plain form: ``name<TAB>switch<TAB>source<TAB>description``, then ``<TAB>key=default`` per option."""
    lines: list[str] = []
    for info in infos:
        lines.append("\t".join([info.name, info.switch_text, str(info.source), info.description]))
        lines += [f"\t{key}={override_value(value)}" for key, value in info.options.items()]
    return lines


def json_document(infos: list[ArmInfo]) -> dict[str, Any]:
    """The JSON form: ``{"arms": [...]}``, one object per arm in registry order."""
    return {"arms": [{"name": i.name, "default": i.default, "switch": i.switch, "options": i.options,
                      "source": dataclasses.asdict(i.source), "description": i.description} for i in infos]}


def arms_table(infos: list[ArmInfo]) -> Table:
    """The terminal form: one row per arm; the default arm's switch cell says so, in bold."""
    table = Table(title="arms, in registry order", title_justify="left", show_lines=True)
    for column in ("arm", "switch", "options (default)", "from", "description"):
        table.add_column(column, overflow="fold")
    for info in infos:
        options = "\n".join(f"{k}={override_value(v)}" for k, v in info.options.items()) or "-"
        table.add_row(Text(info.name, style="bold"), Text(info.switch_text, style="bold" if info.default else ""),
                      Text(options), Text(str(info.source)), Text(info.description))
    return table


def arms_command(console: Console, fmt: str | None = None, err_console: Console | None = None) -> int:
    """``dormouse arms``; ``fmt`` None is a table on a terminal. Returns 2 for an unknown format, else 0."""
    fmt = fmt or ("table" if console.is_terminal else "text")
    if fmt not in FORMATS:
        print_error(err_console or Console(stderr=True), f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return 2
    infos = arm_infos()
    if fmt == "json":
        print(json.dumps(json_document(infos), indent=1, default=str), flush=True)
    elif fmt == "text":
        print("\n".join(text_lines(infos)), flush=True)
    else:
        console.print(arms_table(infos))
    return 0
