"""Every line a run writes about its progress, formatter and parser side by side (docs/model.md, "The eval line").
``train.log`` holds ``# key: value`` provenance, then ``eval``, ``resume``, ``interrupted``, ``repair`` and ``done``
lines; ``metrics.jsonl`` one JSON row per eval, each step once after a resume (:func:`replay`)::

    eval step=400 tokens=1.64M train_loss_nats=1.412 bpb=2.037 bpb@1=2.410 ... arm=attnres attnres=3600/3600 ...
    resume step=400 from=runs/x/checkpoints/step_00000400.pt
    done step=2400 wall_s=339.2

The eval line shows the selected arm's counter and any other arm's that moved (a leak); metrics.jsonl keeps every
registered arm's, unselected as 0/0."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dormouse.arms.registry import ARMS
from dormouse.errors import DormouseError

EVAL, RESUME, INTERRUPTED, DONE, REPAIR = "eval", "resume", "interrupted", "done", "repair"
KINDS = (EVAL, RESUME, INTERRUPTED, DONE, REPAIR)

_SUFFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_COUNTER = re.compile(r"^(\d+)/(\d+)$")
_INT_KEYS = ("step", "skipped", "window_steps", "depth_sum")
_FLOAT_KEYS = ("loss", "bpb", "lr", "depth")
_STR_KEYS = ("arm", "kernel")
# Without these an eval line cannot be checked; every arm's counter is required too (docs/model.md).
_REQUIRED = ("step", "loss", "bpb", "arm")
# How the eval line renders a field (format spec; "" = str); bpb@k like bpb, counters and counts below.
_SPEC = {"loss": ".4f", "bpb": ".4f", "lr": ".2e", "depth": ".2f"}

Row = TypeVar("Row")


class LogLineError(DormouseError, ValueError, exit_code=2):
    """A line that does not parse; the message says which field and why."""


# --- numbers ---------------------------------------------------------------------------------------------

def human(n: float) -> str:
    """3 significant figures with a k/M/G/T/P suffix (1638400 -> '1.64M'); :func:`parse_count` inverts it."""
    for div, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}" if isinstance(n, float) else str(n)


def parse_count(text: str) -> float:
    """``'1.64M'`` -> 1640000.0, ``'8.1k'`` -> 8100.0, ``'512'`` -> 512.0 (k/M/G/T/P suffixes)."""
    if text and text[-1] in _SUFFIX:
        return float(text[:-1]) * _SUFFIX[text[-1]]
    return float(text)


def format_params(counts: dict[str, int]) -> str:
    """The model's size as every command that builds one prints it: ``params=<total> arm_params=<the arm's>``."""
    return f"params={counts['params']:,} arm_params={counts['arm_params']:,}"


def line_kind(line: str) -> str | None:
    """Which of :data:`KINDS` a ``train.log`` line is (by its first word), or None (provenance, warnings)."""
    head = line.strip().split(" ", 1)[0]
    return head if head in KINDS else None


def _runs(line: str, head: str) -> list[tuple[str, str]]:
    parts = line.split()
    if not parts or parts[0] != head:
        raise LogLineError(f"does not start with {head!r}")
    runs = []
    for token in parts[1:]:
        key, sep, value = token.partition("=")
        if not sep or not key or not value:
            raise LogLineError(f"{token!r} is not key=value")
        runs.append((key, value))
    return runs


# --- the eval line ---------------------------------------------------------------------------------------
#
# The eval line shows a metrics row by name: every field is a ``key=value`` token, and which fields appear
# and in what order is decided from the row's own keys (:func:`eval_fields`), never by position. A field
# added to the row appears on the line under its own name, after the known ones; the parser keeps a field
# it does not know. What stays off the line lives in metrics.jsonl only (:data:`FILE_ONLY`, ``probe/...``).

# `learned=<name>:<value>`: the arm's one-number summary from its learned-value probes (dormouse.arms.probes; each
# arm names its own); metrics.jsonl keeps "learned" (the value) and "learned_name";
# a row may lack it.
LEARNED = "learned"
# The training loss the eval line reports is the window's mean cross-entropy in nats per byte, printed
# beside the eval set's bpb (bits): the line labels it with its unit. metrics.jsonl keeps the key "loss".
LINE_LABELS = {"loss": "train_loss_nats"}
_LINE_KEYS = {label: key for key, label in LINE_LABELS.items()}  # the bare key (loss=) parses too
# The head of the line, in this order; the bpb@k columns follow bpb, the counters follow arm.
_HEAD = ("step", "tokens", "loss", "bpb")
_MIDDLE = ("lr", "tok/s", "depth", "arm")
_TAIL = (LEARNED, "kernel", "skipped")
# What the window's schedule asked, from the loop's own depth draws (not from the counters): the training
# forwards of the window (skipped updates included) and the sum of their depths over every rank. The loop
# always writes them; a line may lack them, so they close the line when present.
# `dormouse logs --check` verifies the selected arm's asked = 2 x depth_sum (two sublayers per iteration).
WINDOW_COLUMNS = ("window_steps", "depth_sum")
# Row fields kept in metrics.jsonl (and wandb) but not on the line: cost figures and the learned summary's
# name (it rides in the `learned=` token). Fields named ``probe/...`` are the arm's probes: file only too.
FILE_ONLY = ("learned_name", "time_s", "peak_mem_bytes", "params")
PROBE_PREFIX = "probe/"


def counter_names(keys: Any) -> list[str]:
    """The counters among a row's keys (both ``_ran`` and ``_asked``), registry arms first."""
    keys = list(keys)
    found = [k[: -len("_ran")] for k in keys if k.endswith("_ran") and f"{k[: -len('_ran')]}_asked" in keys]
    return [a for a in ARMS if a in found] + [a for a in found if a not in ARMS]


def _depth_keys(keys: Any) -> list[str]:
    return sorted((k for k in keys if k.startswith("bpb@") and k[4:].isdigit()), key=lambda k: int(k[4:]))


def _on_line(key: str, value: Any) -> bool:
    """A field the line shows: a scalar (lists and dicts are metrics.jsonl's) that is not file-only."""
    return (isinstance(value, (int, float, str)) and key not in FILE_ONLY
            and not key.startswith(PROBE_PREFIX))


def eval_fields(row: dict[str, Any]) -> list[str]:
    """The eval line's fields for ``row``: known ones in fixed order, other scalars, then window columns."""
    counters = counter_names(row)
    counter_keys = {f"{c}_{part}" for c in counters for part in ("ran", "asked")}
    # an unselected arm's 0/0 stays in metrics.jsonl: with many arms registered the line would be mostly zeros
    shown = [c for c in counters if c == row.get("arm") or row[f"{c}_ran"] or row[f"{c}_asked"]]
    known = [*_HEAD, *_depth_keys(row), *_MIDDLE, *shown, *_TAIL]
    head = [k for k in known if k in row or k in shown]
    placed = {*head, *counter_keys, *WINDOW_COLUMNS}
    extra = [k for k, v in row.items() if k not in placed and _on_line(k, v)]
    return [*head, *extra, *(k for k in WINDOW_COLUMNS if k in row)]


def cell(key: str, row: dict[str, Any]) -> str:
    """One field of ``row`` as the eval line writes it, rounded; a counter as ``ran/asked``."""
    if f"{key}_ran" in row and f"{key}_asked" in row:
        return f"{row[f'{key}_ran']}/{row[f'{key}_asked']}"
    if key == LEARNED:
        return f"{row['learned_name']}:{row[LEARNED]:.4f}"
    value = row[key]
    if key in ("tokens", "tok/s"):
        return human(value if key == "tokens" else float(value))
    # A float field the line has no format for: 4 significant figures (metrics.jsonl keeps every digit).
    spec = _SPEC.get(key, ".4f" if key.startswith("bpb@") else ".4g" if isinstance(value, float) else "")
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def format_eval_line(row: dict[str, Any], max_iter: int | None = None) -> str:
    """Render a metrics row as the eval line, by name; ``max_iter`` is accepted and unused."""
    return "eval " + " ".join(f"{LINE_LABELS.get(key, key)}={cell(key, row)}" for key in eval_fields(row))


def _convert(key: str, value: str, out: dict[str, Any]) -> None:
    """Store one ``key=value`` run typed as metrics.jsonl stores it (counters as ``<arm>_ran/_asked``)."""
    if key in _INT_KEYS:
        out[key] = int(value)
    elif key == "tokens":
        out[key] = int(round(parse_count(value)))
    elif key == "tok/s":
        out[key] = parse_count(value)
    elif key in _FLOAT_KEYS or key.startswith("bpb@"):
        out[key] = float(value)
    elif key in _STR_KEYS:
        out[key] = value
    elif key == LEARNED:
        name, sep, number = value.partition(":")
        if not sep or not name:
            raise ValueError(value)
        out["learned_name"], out[LEARNED] = name, float(number)
    elif (m := _COUNTER.match(value)) is not None:
        out[f"{key}_ran"], out[f"{key}_asked"] = int(m.group(1)), int(m.group(2))
    else:
        # A field this parser does not know (a newer train.py): kept, typed as well as it can be.
        for cast in (int, float):
            try:
                out[key] = cast(value)
                return
            except ValueError:
                pass
        out[key] = value


def missing_fields(row: dict[str, Any]) -> list[str]:
    """The fields ``row`` lacks that the checks need: step, loss, bpb, arm, the selected arm's counter."""
    missing = [k for k in _REQUIRED if k not in row]
    arm = row.get("arm")
    if arm in ARMS and (f"{arm}_ran" not in row or f"{arm}_asked" not in row):
        missing.append(str(arm))
    return missing


def parse_eval_line(line: str) -> dict[str, Any]:
    """One eval line as a metrics.jsonl-keyed dict; :class:`LogLineError` names a bad field."""
    out: dict[str, Any] = {}
    for label, value in _runs(line.strip(), EVAL):
        key = _LINE_KEYS.get(label, label)
        if key in out or f"{key}_ran" in out:
            raise LogLineError(f"field {label!r} appears twice")
        try:
            _convert(key, value, out)
        except ValueError:
            raise LogLineError(f"field {label}={value!r} is not a valid value") from None
    missing = [LINE_LABELS.get(k, k) for k in missing_fields(out)]
    if missing:
        raise LogLineError(f"missing field(s): {', '.join(missing)}")
    return out


# --- resume, interrupted, done -----------------------------------------------------------------------------

def format_resume_line(step: int, source: object) -> str:
    """Where a run continued: ``resume step=<N> from=<checkpoint path>`` (the path runs to the line's end)."""
    return f"{RESUME} step={step} from={source}"


def parse_resume_line(line: str) -> dict[str, Any]:
    """``{"step": int, "from": str}``; the checkpoint path may contain spaces. Raises :class:`LogLineError`."""
    head, _, rest = line.strip().partition(" from=")
    runs = dict(_runs(head, RESUME))
    if "step" not in runs or not rest:
        raise LogLineError("expected `resume step=<N> from=<path>`")
    return {"step": _int_field("step", runs["step"]), "from": rest}


def format_interrupted_line(step: int) -> str:
    """Where a run stopped early (a checkpoint of that step was written first)."""
    return f"{INTERRUPTED} step={step}"


def parse_interrupted_line(line: str) -> dict[str, Any]:
    """``{"step": int}``; raises :class:`LogLineError`."""
    runs = dict(_runs(line.strip(), INTERRUPTED))
    if "step" not in runs:
        raise LogLineError("missing field: step")
    return {"step": _int_field("step", runs["step"])}


def format_done_line(step: int, wall_s: float) -> str:
    """The last line of a finished run."""
    return f"{DONE} step={step} wall_s={wall_s:.1f}"


def parse_done_line(line: str) -> dict[str, Any]:
    """Parse ``done step=<N> wall_s=<float>``; raises :class:`LogLineError`."""
    out: dict[str, Any] = {}
    for key, value in _runs(line.strip(), DONE):
        try:
            out[key] = int(value) if key == "step" else float(value) if key == "wall_s" else value
        except ValueError:
            raise LogLineError(f"field {key}={value!r} is not a valid value") from None
    if "step" not in out:
        raise LogLineError("missing field: step")
    return out


def format_repair_line(file: str, torn_bytes: int, dropped_rows: int = 0) -> str:
    """What a resume repaired before appending: the torn bytes cut and the rows dropped."""
    return f"{REPAIR} file={file} torn_bytes={torn_bytes} dropped_rows={dropped_rows}"


def parse_repair_line(line: str) -> dict[str, Any]:
    """``{"file": str, "torn_bytes": int, "dropped_rows": int}``; raises :class:`LogLineError`."""
    runs = dict(_runs(line.strip(), REPAIR))
    if "file" not in runs or "torn_bytes" not in runs:
        raise LogLineError("expected `repair file=<name> torn_bytes=<N> dropped_rows=<M>`")
    return {"file": runs["file"], "torn_bytes": _int_field("torn_bytes", runs["torn_bytes"]),
            "dropped_rows": _int_field("dropped_rows", runs.get("dropped_rows", "0"))}


def _int_field(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise LogLineError(f"field {key}={value!r} is not a valid value") from None


# --- provenance header and metrics.jsonl -------------------------------------------------------------------

def format_header(provenance: dict[str, Any]) -> list[str]:
    """The provenance at the top of train.log: one ``# key: value`` line per field."""
    return [f"# {k}: {v}" for k, v in provenance.items()]


def format_metrics_row(row: dict[str, Any]) -> str:
    """One metrics.jsonl line (NaN is written as JSON's non-standard ``NaN``, which json.loads reads back)."""
    return json.dumps(row) + "\n"


def parse_metrics_row(line: str) -> dict[str, Any]:
    """One metrics.jsonl row; :class:`LogLineError` for a line without a step."""
    try:
        row = json.loads(line)
        int(row["step"])
    except (ValueError, KeyError, TypeError):
        raise LogLineError(f"not a metrics row: {line[:80]!r}") from None
    return row


def torn_tail(path: Path) -> int:
    """Bytes of ``path`` after its last newline (a write cut short); 0 when it ends in one, is empty or absent."""
    try:
        with path.open("rb") as f:
            end = f.seek(0, 2)
            pos = end
            while pos > 0:
                size = min(65536, pos)
                f.seek(pos - size)
                chunk = f.read(size)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    return end - (pos - size + newline + 1)
                pos -= size
            return end
    except (FileNotFoundError, IsADirectoryError):
        return 0


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The effective rows of a metrics.jsonl, each step once; unparseable lines skipped."""
    return [row for _, row in read_metrics_lines(path)]


def read_metrics_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """:func:`read_metrics`' rows with their 1-based line numbers."""
    rows: list[tuple[int, dict[str, Any]]] = []
    if not path.is_file():
        return rows
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        try:
            row = parse_metrics_row(line)
        except LogLineError:
            continue
        rows = replay(rows, (n, row), lambda r: int(r[1]["step"]))
    return rows


def last_eval_phrase(rows: list[dict[str, Any]]) -> str:
    """``stopped before its first eval`` or ``last eval at step N (bpb B)``, for a stopped run."""
    if not rows:
        return "stopped before its first eval"
    last = rows[-1]
    bpb = last.get("bpb")
    return f"last eval at step {last['step']}" + (f" (bpb {bpb:.4f})" if isinstance(bpb, float) else "")


# --- the replay rule --------------------------------------------------------------------------------------

def replay(rows: list[Row], row: Row, step_of: Callable[[Row], int]) -> list[Row]:
    """``rows`` plus ``row``, which supersedes every earlier row from its step on."""
    step = step_of(row)
    return [*(r for r in rows if step_of(r) < step), row]
