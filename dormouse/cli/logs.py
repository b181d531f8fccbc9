"""The view behind ``dormouse logs``: tables of runs' evals, their findings and a sweep's settings. Reading is
dormouse.run.reader's and validity dormouse.run.checks'; this module only shows them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dormouse.cli.comparison_table import comparison_notes, comparison_table, comparison_tsv, is_comparison
from dormouse.errors import print_error
from dormouse.run.checks import checked_runs, counter_fault, non_finite
from dormouse.run.files import RUNS_ROOT, SWEEP, RunFiles
from dormouse.run.loglines import LEARNED, cell, eval_fields
from dormouse.run.reader import EvalRow, RunReading, find_runs

# --- display -------------------------------------------------------------------------------------------
#
# Every view selects its columns by name: the columns are the eval line's fields (dormouse.run.loglines.
# eval_fields) over the rows shown, and each cell is looked up by its column's name, so a field added to the
# row shows under its own name and moves no other value.

def columns(rows: list[dict[str, Any]]) -> list[str]:
    """The columns for ``rows``: the eval line's fields of every row, in the line's order."""
    union: dict[str, Any] = {}
    for r in rows:
        for k, v in r.items():
            union.setdefault(k, v)
    return eval_fields(union)


# A header that says the unit where the name alone does not (the training loss is in nats, bpb in bits).
_HEADERS = {"loss": "train loss\n(nats)", "bpb": "bpb\n(bits)"}
# Which columns a narrow terminal keeps, most wanted first; the rest follow in line order.
_PRIORITY = ("step", "bpb", "loss", "<arm>", "bpb@*", "tokens", "line", LEARNED, "depth", "lr", "tok/s",
             "skipped")


def _priority(cols: list[str], arm: str | None) -> list[str]:
    order: list[str] = []
    for want in _PRIORITY:
        if want == "<arm>":
            order += [c for c in cols if c == arm]
        elif want == "bpb@*":
            order += sorted((c for c in cols if c.startswith("bpb@")), key=lambda c: -int(c[4:]))
        else:
            order += [c for c in cols if c == want]
    return order + [c for c in cols if c not in order]


def _cell_text(key: str, r: EvalRow) -> Text:
    """One table cell: the value as the eval line rounds it; a non-finite metric or a wrong counter in red."""
    v = r.values
    if key == "line":  # "-": a metrics.jsonl row that no train.log line shows
        return Text("-" if r.line is None else str(r.line), style="dim")
    if key not in v and f"{key}_ran" not in v:
        return Text("-")
    text = cell(key, v)
    if f"{key}_ran" in v:
        return Text(text, style="bold red" if counter_fault(key, v) else "")
    return Text(text, style="bold red" if non_finite(key, v[key]) else "")


def _fit(cols: list[str], cells: dict[str, list[Text]], width: int, arm: str | None) -> list[str]:
    """The columns that fit ``width`` (3 characters per column plus 1), chosen by priority, in line order."""
    def need(c: str) -> int:
        head = max(len(h) for h in _HEADERS.get(c, c).split("\n"))
        return max([head, *(t.cell_len for t in cells[c])]) + 3

    # A column with a red cell (a leaking counter, a NaN) comes right after the arm's counter.
    order = _priority(cols, arm)
    red = [c for c in order if any("red" in str(t.style) for t in cells[c])]
    order = [c for c in order[:4] if c not in red] + red + [c for c in order[4:] if c not in red]
    used, keep = 1, set()
    for c in order:
        if used + need(c) <= width:
            keep.add(c)
            used += need(c)
    return [c for c in cols if c in keep]


def run_table(run: RunReading, width: int | None = None) -> Table:
    """A rich table of a run's evals, problem cells red; columns that do not fit ``width`` are named below."""
    state = "done" if run.finished else "not finished"
    arm = run.config_arm or (run.last or {}).get("arm", "?")
    table = Table(title=Text(f"{run.name}  ({arm}, {state})", style="bold"), title_justify="left")
    cols = ["line", *columns([r.values for r in run.evals])]
    cells = {c: [_cell_text(c, r) for r in run.evals] for c in cols}
    shown = _fit(cols, cells, width, arm) if width else cols
    hidden = [c for c in cols if c not in shown]
    if hidden:
        table.caption = f"not shown at this width: {' '.join(hidden)} (--format tsv shows every column)"
        table.caption_justify = "left"
    for c in shown:
        table.add_column(_HEADERS.get(c, c), justify="left" if c in ("arm", "kernel") else "right",
                         no_wrap=True)
    flagged = {(f.path, f.line) for f in run.findings}
    for i, r in enumerate(run.evals):
        table.add_row(*(cells[c][i] for c in shown), style="on grey15" if r.at in flagged else None)
    return table


FORMATS = ("table", "tsv", "json")


def _plain(key: str, v: dict[str, Any]) -> str:
    """One value of a row, complete, as plain text (counters ``ran/asked``, floats with every digit)."""
    if f"{key}_ran" in v:
        return f"{v[f'{key}_ran']}/{v[f'{key}_asked']}"
    if key == LEARNED:
        return f"{v['learned_name']}:{v[LEARNED]}" if LEARNED in v else ""
    x = v.get(key, "")
    return repr(x) if isinstance(x, float) else str(x)


def tsv_lines(runs: list[RunReading]) -> list[str]:
    """Every run's evals as unrounded tab-separated rows under one header, keyed as metrics.jsonl."""
    cols = columns([r.values for run in runs for r in run.evals])
    out = ["\t".join(["run", "line", *cols])]
    for run in runs:
        for r in run.evals:
            line = "" if r.line is None else str(r.line)
            out.append("\t".join([str(run.run_dir), line, *(_plain(c, r.values) for c in cols)]))
    return out


def _json_safe(x: Any) -> Any:
    """NaN/inf (a finding's subject) as the strings "nan"/"inf": valid JSON that still says which."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def _in_line_order(r: EvalRow) -> dict[str, Any]:
    """An eval's fields in the eval line's order, then those only metrics.jsonl holds."""
    return {**{k: r.values[k] for k in r.logged or () if k in r.values}, **r.values}


def json_document(runs: list[RunReading]) -> dict[str, Any]:
    """Every run with its eval rows (typed as metrics.jsonl) and its findings."""
    return {"runs": [{"run": str(run.run_dir), "arm": run.config_arm or (run.last or {}).get("arm"),
                      "finished": run.finished, "evals": [{"line": r.line, **_in_line_order(r)} for r in run.evals],
                      "findings": [f.to_dict() for f in run.findings]} for run in runs]}


def sweep_table(folder: Path, runs: list[RunReading]) -> Table:
    """A sweep as one table, a row per setting (folder, swept values, last step, bpb, findings)."""
    sweep = yaml.safe_load((folder / SWEEP).read_text()) or {}
    swept = list(sweep.get("swept", []))
    by_dir = {run.run_dir.resolve(): run for run in runs}
    table = Table(title=f"sweep {folder} ({len(sweep.get('jobs', []))} settings)", title_justify="left")
    for name in ["run", *swept, "step", "bpb\n(bits)", "findings"]:
        table.add_column(name, overflow="fold")
    for job in sweep.get("jobs", []):
        values = dict(s.partition("=")[::2] for s in job.get("overrides", []))
        run = by_dir.get((folder / str(job["run"]).rsplit("/", 1)[-1]).resolve())
        last = run.evals[-1] if run is not None and run.evals else None
        bpb = last.values.get("bpb") if last is not None else None
        table.add_row(str(job["run"]).rsplit("/", 1)[-1], *[values.get(k, "") for k in swept],
                      str(last.step) if last else "-", f"{bpb:.4f}" if isinstance(bpb, float) else "-",
                      "not run" if run is None else str(len(run.findings)))
    return table


def _holds_runs(path: Path) -> bool:
    """Whether ``path`` is a train.log, a run directory, or a folder with a run below it."""
    files = RunFiles(path)
    return path.is_file() or files.log.is_file() or files.config.is_file() or find_runs(path) != [path]


def _path_problems(paths: list[Path]) -> list[str]:
    """One line per path that holds nothing to show: it does not exist, or it is a folder with no run."""
    if paths == [RUNS_ROOT] and not RUNS_ROOT.exists():
        return [f"no path given and no {RUNS_ROOT}/ folder here: name a run directory, a comparison or a "
                "train.log (e.g. dormouse logs runs/NAME), or train one first (dormouse train)"]
    return [f"{p}: no such file or directory" if not p.exists() else
            f"{p}: no runs in this folder (no train.log or config.yaml in it or below it); give a run "
            f"directory, a comparison (runs/ab/NAME) or a train.log" for p in paths if not p.exists()
            or not _holds_runs(p)]


def _summarized(paths: list[Path], runs: list[RunReading]) -> set[Path]:
    """The runs a comparison's row per arm stands for: those below a comparison folder among ``paths``."""
    comparisons = [p.resolve() for p in paths if not (p / SWEEP).is_file() and is_comparison(p)]
    return {run.run_dir.resolve() for run in runs for c in comparisons if c in run.run_dir.resolve().parents}


def _print_tsv(paths: list[Path], runs: list[RunReading], per_run: bool) -> None:
    """The tsv view: each comparison's row per arm (as its table shows it), then the other runs' evals; a
    comparison's runs' evals only with ``per_run``, as in the table view."""
    blocks = [comparison_tsv(p, runs) for p in paths if not (p / SWEEP).is_file() and is_comparison(p)]
    hidden = set() if per_run else _summarized(paths, runs)
    shown = [run for run in runs if run.run_dir.resolve() not in hidden]
    if shown or not blocks:
        blocks.append(tsv_lines(shown))
    print("\n\n".join("\n".join(b) for b in blocks), flush=True)


def _print_tables(paths: list[Path], runs: list[RunReading], console: Console, per_run: bool) -> None:
    """The table view: sweeps, comparisons (a row per arm), then each other run's table and findings."""
    width = console.width if console.is_terminal else None
    if not console.is_terminal:  # a table in a file: wide enough for every column, never "…"
        console.width = max(console.width, 1000)
    for path in paths:  # a sweep (dormouse train -m) or a comparison (dormouse ab): one table of it first
        if (path / SWEEP).is_file():
            console.print(sweep_table(path, runs))
            console.print()
        elif is_comparison(path):
            console.print(comparison_table(path, runs))
            console.print(Text("; ".join(comparison_notes(path, runs)), style="dim"), soft_wrap=True)
            console.print()
    summarized = _summarized(paths, runs)
    for run in runs:
        if run.run_dir.resolve() in summarized and not per_run:
            for f in run.findings:  # a finding is never hidden behind the summary
                console.print(Text(f"{run.name}: {f}", style="red"), soft_wrap=True)
            continue
        if run.evals:
            console.print(run_table(run, width))
        else:
            console.print(Text(f"{run.name}: no eval lines", style="bold"))
        for f in run.findings:
            console.print(Text(f"  {f}", style="red"), soft_wrap=True)
        if not run.findings:
            console.print(Text(f"  {run.path}: ok", style="green"))
        console.print()


def logs_command(paths: list[Path], check: bool = False, console: Console | None = None,
                 fmt: str | None = None, err_console: Console | None = None, per_run: bool = False) -> int:
    """``dormouse logs``: every run's rows and findings (default ``runs/``), a table on a terminal when ``fmt`` is None.
    Returns 2 for no run or an unknown format, 1 for a finding under ``check``, else 0."""
    console = console or Console()
    err = err_console or Console(stderr=True, highlight=False)
    fmt = fmt or ("table" if console.is_terminal else "tsv")
    if fmt not in FORMATS:
        print_error(err, f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return 2
    paths = [Path(p) for p in paths] or [RUNS_ROOT]
    problems = _path_problems(paths)
    for line in problems:
        print_error(err, line)
    if problems:
        return 2
    runs = checked_runs(paths)
    total = sum(len(run.findings) for run in runs)
    verdict = "no findings" if not total else f"{total} finding(s)"
    if fmt == "json":
        print(json.dumps(_json_safe(json_document(runs)), indent=1, default=str))
    elif fmt == "tsv":
        _print_tsv(paths, runs, per_run)
        for run in runs:
            for f in run.findings:
                err.print(Text(str(f)), soft_wrap=True)
    else:
        _print_tables(paths, runs, console, per_run)
        console.print(f"{len(runs)} run(s), {verdict}", style="green" if not total else "bold red")
        return 1 if check and total else 0
    err.print(f"{len(runs)} run(s), {verdict}", style="green" if not total else "bold red")
    return 1 if check and total else 0
