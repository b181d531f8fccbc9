"""Where a perturbation applies: a pattern inside one named function, located with ``ast``.

A perturbation names its target as ``file`` (repo-relative) plus ``function``, the qualified name of the
definition it perturbs, and ``old``, a pattern that must occur exactly once inside that definition's source.
Keying to a definition, not to the file, is what lets the record survive refactors:

- the definition may move within its file, and the rest of the file may change (only its own lines are
  searched, from its first decorator to its last line);
- its indentation may change (a function moved into a class, a method moved out of one): when the pattern
  does not occur as written, it is matched re-indented by a constant shift of every line after the first
  (and of the first too when the pattern starts with indentation), and the replacement ``new`` is
  re-indented by the same shift.

What ``function`` may name:

- ``Class.method``, ``function``, ``outer.inner``: a ``def`` or ``class`` (dotted like ``__qualname__``,
  without ``<locals>``);
- ``NAME`` or ``Class.NAME``: a constant, i.e. an assignment to one name at module or class level;
- ``<module>``: top-level code outside every ``def`` and ``class`` (imports, ``if`` blocks, ...);
- ``<file>``: the whole file, for files that are not Python (YAML configs, JSON results).

A perturbation that no longer applies is stale, and the message says why: the definition is gone (and, when
the pattern now occurs in another definition of the file, which one), or the pattern is gone from it, or it
occurs more than once there.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

MODULE = "<module>"
WHOLE_FILE = "<file>"
REKEY = "python -m tests.falsification.key --write --rekey"  # the fix a stale key's message names
# How far a refactor may shift a definition's indentation (8 levels of 4 spaces).
_MAX_SHIFT = 32


class StalePerturbation(ValueError):
    """The perturbation's pattern does not occur exactly once in the definition it names."""


@dataclass(frozen=True)
class Scope:
    """One definition of a module: its qualified name and its span (character offsets, whole lines)."""

    qualname: str
    kind: str  # def | class | constant
    start: int
    end: int
    first_line: int
    last_line: int


@dataclass(frozen=True)
class Occurrence:
    """The pattern found at ``start`` (``length`` characters), every line shifted by ``shift`` spaces."""

    start: int
    length: int
    shift: int

    @property
    def end(self) -> int:
        return self.start + self.length


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts += [m.end() for m in re.finditer("\n", text)]
    return starts


def _nested_statements(node: ast.stmt) -> list[ast.stmt]:
    """The statements inside a compound statement that is not a definition (if/for/while/try/with/match)."""
    out: list[ast.stmt] = []
    for name in ("body", "orelse", "finalbody"):
        out += getattr(node, name, None) or []
    for handler in getattr(node, "handlers", None) or []:
        out += handler.body
    for case in getattr(node, "cases", None) or []:
        out += case.body
    return out


def _assigned_name(node: ast.stmt) -> str | None:
    """The one name a module- or class-level assignment binds (``X = ...``, ``X: int = ...``), else None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def scopes(text: str) -> list[Scope]:
    """Every def, class, and module/class-level constant of ``text``, spans including decorators."""
    return list(_scopes(text))


@functools.lru_cache(maxsize=256)
def _scopes(text: str) -> tuple[Scope, ...]:
    """:func:`scopes`, parsed once per text: the perturbations of one file all locate in the same text."""
    tree = ast.parse(text)
    starts = _line_starts(text)
    found: list[Scope] = []

    def span(first: int, last: int) -> tuple[int, int]:
        return starts[first - 1], starts[last] if last < len(starts) else len(text)

    def visit(body: list[ast.stmt], prefix: str, constants: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                last = node.end_lineno or node.lineno
                kind = "class" if isinstance(node, ast.ClassDef) else "def"
                found.append(Scope(prefix + node.name, kind, *span(first, last), first, last))
                # a class's body holds constants; a function's locals are not keys (they are not stable)
                visit(node.body, f"{prefix}{node.name}.", kind == "class")
            elif constants and (name := _assigned_name(node)) is not None:
                last = node.end_lineno or node.lineno
                found.append(Scope(prefix + name, "constant", *span(node.lineno, last), node.lineno, last))
            else:
                visit(_nested_statements(node), prefix, constants)

    visit(tree.body, "", True)
    return tuple(found)


def _shift(text: str, shift: int, first: bool, strict: bool) -> str | None:
    """``text`` with every line after the first (and the first when ``first``) indented by ``shift`` more
    spaces. A line without enough indentation to remove: None when ``strict``, else dedented to column 0."""
    lines = text.split("\n")
    out = []
    for k, line in enumerate(lines):
        if (k == 0 and not first) or not line.strip():
            out.append(line)
        elif shift >= 0:
            out.append(" " * shift + line)
        else:
            indent = len(line) - len(line.lstrip(" "))
            if indent < -shift and strict:
                return None
            out.append(line[min(indent, -shift):])
    return "\n".join(out)


def occurrences(text: str, pattern: str) -> list[Occurrence]:
    """Where ``pattern`` occurs in ``text``, as written (shift 0) and re-indented by every shift that fits."""
    if not pattern:
        return []
    found: list[Occurrence] = []
    first = pattern.startswith(" ")
    for shift in sorted(range(-_MAX_SHIFT, _MAX_SHIFT + 1), key=abs):
        shifted = _shift(pattern, shift, first, strict=True)
        if shifted is None or (shift != 0 and shifted == pattern):
            continue  # a one-line pattern that does not start indented is the same at every shift
        at = text.find(shifted)
        while at >= 0:
            # a pattern that starts with indentation must start at the line's indentation: else "    x" would
            # also match inside "        x" (a block nested one level deeper), and a replacement of several
            # lines would land at two indentations; that block is found at shift +4 instead
            if not first or at == 0 or text[at - 1] != " ":
                found.append(Occurrence(at, len(shifted), shift))
            at = text.find(shifted, at + 1)
    return found


def _contains(scope: Scope, occ: Occurrence) -> bool:
    return scope.start <= occ.start and occ.end <= scope.end


def innermost(all_scopes: list[Scope], occ: Occurrence) -> str:
    """The qualified name of the smallest definition containing ``occ``; MODULE when there is none."""
    holding = [s for s in all_scopes if _contains(s, occ)]
    if not holding:
        return MODULE
    return min(holding, key=lambda s: (s.end - s.start, -s.start)).qualname


def _in_key(all_scopes: list[Scope], key: str, occ: Occurrence) -> bool:
    if key == MODULE:  # outside every def and class (a module-level constant is module-level code)
        return not any(s.kind != "constant" and _contains(s, occ) for s in all_scopes)
    return any(s.qualname == key and _contains(s, occ) for s in all_scopes)


def _where_else(all_scopes: list[Scope], occs: list[Occurrence]) -> str:
    names = list(dict.fromkeys(innermost(all_scopes, o) for o in occs))
    if not names:
        return "it occurs nowhere else in the file either"
    return f"it now occurs in {', '.join(f'`{n}`' for n in names)}: if that is the same rule, re-key it ({REKEY})"


def locate(text: str, key: str, pattern: str, where: str) -> Occurrence:
    """The one occurrence of ``pattern`` inside definition ``key`` of ``text`` (file ``where``).

    As written first; re-indented only when it does not occur as written. Raises StalePerturbation, saying
    why, when that is not exactly one.
    """
    everywhere = occurrences(text, pattern)
    if key == WHOLE_FILE:
        exact = [o for o in everywhere if o.shift == 0]
        if len(exact) != 1:
            raise StalePerturbation(f"stale perturbation: the pattern occurs {len(exact)} times in {where} "
                                    "(expected exactly 1)")
        return exact[0]
    try:
        all_scopes = scopes(text)
    except SyntaxError as e:
        raise StalePerturbation(f"stale perturbation: {where} does not parse ({e})") from e
    known = key == MODULE or any(s.qualname == key for s in all_scopes)
    inside = [o for o in everywhere if _in_key(all_scopes, key, o)]
    outside = [o for o in everywhere if not _in_key(all_scopes, key, o)]
    if not known:
        raise StalePerturbation(f"stale perturbation: {where} has no definition `{key}` (removed or renamed); "
                                + _where_else(all_scopes, outside))
    exact = [o for o in inside if o.shift == 0]
    candidates = exact or inside
    if len(candidates) == 1:
        return candidates[0]
    span = ", ".join(f"lines {s.first_line}-{s.last_line}" for s in all_scopes if s.qualname == key)
    if not candidates:
        raise StalePerturbation(f"stale perturbation: the pattern no longer occurs in `{key}` ({where}"
                                f"{', ' + span if span else ''}); " + _where_else(all_scopes, outside))
    shifted = "" if exact else " (re-indented)"
    raise StalePerturbation(f"stale perturbation: the pattern occurs {len(candidates)} times{shifted} in `{key}` "
                            f"({where}; expected exactly 1): lengthen `old`")


def apply(text: str, key: str, old: str, new: str, where: str) -> str:
    """``text`` with the one occurrence of ``old`` inside definition ``key`` replaced by ``new`` (re-indented
    by the same shift as ``old`` was matched with)."""
    occ = locate(text, key, old, where)
    replacement = new if occ.shift == 0 else _shift(new, occ.shift, old.startswith(" "), strict=False)
    assert replacement is not None  # not strict: never None
    return text[: occ.start] + replacement + text[occ.end :]


def key_for(text: str, old: str, where: str, python: bool = True) -> str:
    """The key of a text patch: the innermost definition holding the one occurrence of ``old`` in the file
    (WHOLE_FILE for a file that is not Python). Raises StalePerturbation when ``old`` does not occur exactly
    once in the file as written."""
    exact = [o for o in occurrences(text, old) if o.shift == 0]
    if len(exact) != 1:
        inside = " (`old` starts with spaces: it must start at a line's indentation)" if text.count(old) else ""
        raise StalePerturbation(f"cannot key: `old` occurs {len(exact)} times in {where} (expected exactly 1)"
                                + inside)
    if not python:
        return WHOLE_FILE
    try:
        return innermost(scopes(text), exact[0])
    except SyntaxError as e:
        raise StalePerturbation(f"cannot key: {where} does not parse ({e})") from e
