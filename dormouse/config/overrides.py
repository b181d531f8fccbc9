"""Command-line overrides (``key=value``) checked in dormouse's words before Hydra sees them, whose messages would
suggest ``+key`` or ``--multirun``. :func:`check_overrides` parses with Hydra's grammar and returns one line per
unknown key (with did-you-mean), ``+``/``~`` key, value of the wrong type, sweep, or missing preset."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dormouse.arms.plugin_routes import PLUGIN_HINT
from dormouse.arms.registry import switch_arm

GROUPS = ("preset",)  # Hydra config groups under conf/; every other key is a schema field


def available(group: str) -> list[str]:
    """The options of a config group: ``conf/<group>/*.yaml`` of the installed ``dormouse.conf``."""
    root = importlib.resources.files("dormouse.conf") / group
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def schema_keys(schema: type) -> tuple[list[str], list[str]]:
    """``(leaf keys, node keys)`` of a dataclass schema, dotted: ``model.attnres.block_size``, ``model``."""
    leaves: list[str] = []
    nodes: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                nodes.append(key)
                walk(type(default), key + ".")
            else:
                leaves.append(key)

    walk(schema, "")
    return leaves, nodes


def did_you_mean(key: str, candidates: list[str]) -> list[str]:
    """The closest candidates to ``key``: by the whole dotted key, else by its last part."""
    # 0.85: one or two typed characters off in a dotted key of ~15 characters (ratio 2M/T ~ 0.9-0.97);
    # a sibling that merely shares the prefix (model.use_gr for model.use_atnres, ~0.79) is not offered.
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.85)
    if close:
        return close
    leaf = key.rsplit(".", 1)[-1]
    by_leaf: dict[str, list[str]] = {}
    for c in candidates:
        by_leaf.setdefault(c.rsplit(".", 1)[-1], []).append(c)
    return [c for name in difflib.get_close_matches(leaf, list(by_leaf), n=3, cutoff=0.7) for c in by_leaf[name]][:3]


def _suggest(key: str, candidates: list[str]) -> str:
    close = did_you_mean(key, candidates)
    if not close:
        return "; `dormouse validate` prints every key"
    return "; did you mean " + " or ".join(close) + "?"


_TYPE_WORDS = {"IntegerNode": "an integer", "FloatNode": "a number", "BooleanNode": "true or false",
               "StringNode": "a string"}


def _expected(schema_cfg: Any, key: str) -> str:
    *parents, leaf = key.split(".")
    for part in parents:
        schema_cfg = schema_cfg[part]
    node = schema_cfg._get_node(leaf)
    words = _TYPE_WORDS.get(type(node).__name__, "a value")
    if getattr(node, "_is_optional", lambda: False)():
        words += " or null"
    return words


def quoted(parser: Any, text: str) -> str | None:
    """``key='value'`` when Hydra's grammar takes the value only quoted (non-ASCII words, ``run.name=ромео``), else
    None."""
    from hydra.errors import OverrideParseException

    key, eq, value = text.partition("=")
    if not eq or not key or "'" in value:
        return None
    try:
        parser.parse_overrides([f"{key}='{value}'"])
    except OverrideParseException:
        return None
    return f"{key}='{value}'"


def _unparsed(parser: Any, text: str, exc: Exception) -> str:
    """The line for an override Hydra's grammar does not parse: how to quote it when quoting is the fix."""
    fix = quoted(parser, text)
    if fix is not None:
        return (f"override {text!r}: Hydra reads an unquoted value as ASCII letters, digits and a few signs; "
                f"quote the value ({fix}), and in a shell quote the whole override: \"{fix}\"")
    first = str(exc).splitlines()[1:2] or [str(exc)]
    return f"override {text!r} is not key=value ({first[0].strip()}); e.g. model.d_model=128"


def check_overrides(overrides: list[str], schema: type, extra_options: dict[str, list[str]] | None = None) -> list[str]:
    """Every problem with ``overrides`` against ``schema``, one line each; ``extra_options`` are stored presets."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    leaves, nodes = schema_keys(schema)
    known = leaves + list(GROUPS)
    schema_cfg = OmegaConf.structured(schema)
    parser = OverridesParser.create()
    lines: list[str] = []
    for text in overrides:
        try:
            (o,) = parser.parse_overrides([text])
        except OverrideParseException as exc:
            lines.append(_unparsed(parser, text, exc))
            continue
        key = o.key_or_group
        if o.is_delete():
            lines.append(f"override {text!r} deletes a key: dormouse's config keys are fixed; "
                         f"set a value instead ({key}=...)")
            continue
        if key not in known and key not in nodes:
            verb = "adds a key" if o.is_add() else "sets an unknown key"
            hint = _suggest(key, known)
            if key.startswith("model.") and switch_arm(key):  # an arm's switch: its plugin may not be loaded
                hint = f"{hint} Or {PLUGIN_HINT}" if did_you_mean(key, known) else f"; {PLUGIN_HINT}"
            lines.append(f"override {text!r} {verb}: {key!r} is not in dormouse's config{hint}")
            continue
        if o.is_add():
            lines.append(f"override {text!r} adds a key, but {key} exists: dormouse's config is closed; "
                         f"set it without the '+': {text[1:]}")
            continue
        if o.is_sweep_override():
            lines.append(f"override {text!r} gives several values (a sweep): dormouse runs one config; give "
                         f"one value, or quote a string that holds a comma ({key}='a,b'); to explore settings, "
                         "sweep them (dormouse train -m); to decide between them, register an A/B comparison "
                         "(dormouse ab list)")
            continue
        value = o.value()
        if key in GROUPS:
            options = available(key)
            if str(value) not in options + (extra_options or {}).get(key, []):
                close = difflib.get_close_matches(str(value), options, n=1)
                hint = f"; did you mean {key}={close[0]}?" if close else ""
                lines.append(f"{key}={o.get_value_element_as_str()}: no such {key}; available: "
                             f"{', '.join(options)} (conf/{key}/*.yaml){hint}")
            continue
        if key in nodes:
            inner = [k for k in leaves if k.startswith(key + ".")][:3]
            lines.append(f"override {text!r}: {key} is a group of settings, not one value; set its fields, "
                         f"e.g. {', '.join(k + '=...' for k in inner)}")
            continue
        try:
            OmegaConf.update(schema_cfg, key, value, merge=True)
        except (OmegaConfBaseException, ValueError, TypeError):
            lines.append(f"{key}={o.get_value_element_as_str()} is invalid: {key} takes "
                         f"{_expected(schema_cfg, key)}")
    return lines
