"""The log inspector behind ``dormouse logs PATH... [--check]``.

A run directory holds ``train.log``: ``# `` provenance lines, one ``eval`` line per evaluation
(docs/model.md, "The eval line"), and a final ``done step=<N> wall_s=<s>`` when the run finished; their
formats and parsers are :mod:`dormouse.loglines`'. This module reads a run (:func:`read_run`) or every run
under a directory (:func:`read_runs`) and checks them. Every finding names the file and line it comes from.

The checks are the proof the A/B comparison leans on (``dormouse ab`` runs them on every run and marks a
failing arm invalid):

* the selected arm's counter reads 0 or ``ran != asked`` (a dead arm: the mechanism did not run);
* the selected arm's ``asked`` is not 2 x the eval line's ``depth_sum`` (the depths the schedule drew for the
  window's training steps): a sublayer the loop skipped, which lowers ran and asked together;
* an unselected arm's counter is non-zero (a leaking arm: two mechanisms ran);
* a NaN/inf loss or bpb;
* eval lines missing (none at all, or a multiple of ``train.eval_every`` skipped) or out of order;
* a malformed eval or done line (reported with its line number, never a crash);
* a run that ended without its final eval (no ``done`` line, or the last eval step is not
  ``train.steps`` from the run's ``config.yaml``).

Lines that start with neither ``eval `` nor ``done `` are ignored, except ``resume``: after a resume the
log replays evals from the checkpoint's step, so a step going back is expected there and the replayed
evals supersede the earlier ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dormouse.config import ARMS
from dormouse.loglines import (
    DONE,
    EVAL,
    RESUME,
    WINDOW_COLUMNS,
    LogLineError,
    eval_columns,
    human,
    line_kind,
    parse_done_line,
    parse_eval_line,
    replay,
)
from dormouse.runfiles import CONFIG, LOG, RunFiles


@dataclass
class Finding:
    """One problem in a run, located at ``path:line`` (``line`` is None when the file is absent/empty)."""

    path: Path
    line: int | None
    kind: str  # dead-arm | leaking-arm | non-finite | malformed | missing-eval | out-of-order | unfinished..
    message: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "line": self.line, "kind": self.kind, "message": self.message}


@dataclass
class EvalRow:
    """A parsed eval line and the line number (1-based) it came from."""

    line: int
    values: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.values["step"])


@dataclass
class RunLog:
    """Everything :func:`read_run` learned about one run, including its findings."""

    path: Path  # the train.log (which may not exist)
    evals: list[EvalRow] = field(default_factory=list)  # effective evals (replays after a resume win)
    done: dict[str, Any] | None = None
    done_line: int | None = None
    n_lines: int = 0
    config_steps: int | None = None
    config_eval_every: int | None = None
    config_arm: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def finished(self) -> bool:
        return self.done is not None

    @property
    def last(self) -> dict[str, Any] | None:
        return self.evals[-1].values if self.evals else None

    def add(self, line: int | None, kind: str, message: str) -> None:
        self.findings.append(Finding(self.path, line, kind, message))


def _read_config(run: RunLog) -> None:
    """Fill the config fields the checks need from the run's config.yaml (absent or unreadable: skip)."""
    cfg_path = RunFiles(run.run_dir).config
    if not cfg_path.is_file():
        return
    from omegaconf import OmegaConf

    from dormouse.config import arm_name

    try:
        cfg = OmegaConf.load(cfg_path)
        run.config_steps = int(cfg.train.steps)
        run.config_eval_every = int(cfg.train.eval_every)
        run.config_arm = arm_name(cfg)
    except Exception as exc:  # a config we cannot read must not hide the log's own findings
        run.add(None, "config", f"{cfg_path} could not be read ({type(exc).__name__}: {exc}); "
                "the step checks against train.steps are skipped")


def _check_row(run: RunLog, row: EvalRow) -> None:
    """Per-eval checks: the arm counters and finite metrics."""
    v, n = row.values, row.line
    arm = v["arm"]
    if arm not in ARMS:
        run.add(n, "unknown-arm", f"arm={arm!r} is not one of {', '.join(ARMS)}")
    elif run.config_arm is not None and arm != run.config_arm:
        run.add(n, "arm-mismatch", f"arm={arm} but config.yaml selects {run.config_arm}")
    for name in ARMS:
        if f"{name}_ran" not in v:  # an arm registered after the line was written: it could not have run
            continue
        ran, asked = v[f"{name}_ran"], v[f"{name}_asked"]
        if name == arm:
            # Step 0 (an eval before any training) has an empty window: 0/0 is honest there.
            if row.step > 0 and (ran == 0 or asked == 0 or ran != asked):
                why = "reads 0" if ran == 0 or asked == 0 else "ran != asked"
                run.add(n, "dead-arm", f"selected arm {name}={ran}/{asked} {why} at step {row.step}: "
                        "the mechanism did not (fully) run")
        elif ran != 0 or asked != 0:
            run.add(n, "leaking-arm", f"unselected arm {name}={ran}/{asked} at step {row.step} "
                    f"(arm={arm}): it must read 0/0")
    # `asked` means asked: the depths the schedule drew for the window's training forwards ask for two
    # sublayer aggregations per iteration. A sublayer the loop skipped lowers ran and asked together, which
    # the check above cannot see; this one can. (Lines written before these fields existed lack them.)
    if arm in ARMS and "depth_sum" in v and f"{arm}_asked" in v and v[f"{arm}_asked"] != 2 * v["depth_sum"]:
        asked, want = v[f"{arm}_asked"], 2 * v["depth_sum"]
        run.add(n, "asked-mismatch", f"selected arm {arm} asked={asked} but the window's "
                f"{v.get('window_steps', '?')} training steps drew depths summing to {v['depth_sum']}, which "
                f"ask for 2 x {v['depth_sum']} = {want} aggregations at step {row.step}: a sublayer did not "
                "run as the schedule asked")
    bad = [k for k, x in v.items() if (k in ("loss", "bpb") or k.startswith("bpb@"))
           and isinstance(x, float) and not math.isfinite(x)]
    if bad:
        run.add(n, "non-finite", f"{', '.join(f'{k}={v[k]}' for k in bad)} at step {row.step}")


def read_run(path: Path | str) -> RunLog:
    """Read and check one run: ``path`` is its directory or its train.log. Never raises on bad content."""
    path = Path(path)
    log_path = path if path.is_file() else RunFiles(path).log
    run = RunLog(path=log_path)
    _read_config(run)
    if not log_path.is_file():
        run.add(None, "no-log", f"no {LOG} (the run never started or the path is not a run)")
        return run

    text = log_path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    run.n_lines = len(lines)
    resumed = False  # a resume line was seen since the last eval: the next step may go back
    for n, line in enumerate(lines, start=1):
        stripped = line.strip()
        kind = line_kind(stripped)
        if kind == RESUME:
            resumed = True
        elif kind == EVAL:
            try:
                row = EvalRow(n, parse_eval_line(stripped))
            except LogLineError as exc:
                run.add(n, "malformed", f"eval line: {exc}")
                continue
            if run.evals and row.step <= run.evals[-1].step and not resumed:
                run.add(n, "out-of-order", f"step {row.step} follows step {run.evals[-1].step} "
                        f"(line {run.evals[-1].line})")
                continue
            resumed = False
            run.evals = replay(run.evals, row, lambda r: r.step)
        elif kind == DONE:
            try:
                run.done = parse_done_line(stripped)
                run.done_line = n
            except LogLineError as exc:
                run.add(n, "malformed", f"done line: {exc}")

    for row in run.evals:
        _check_row(run, row)
    _check_completeness(run)
    run.findings.sort(key=lambda f: (f.line is None, f.line or 0))
    return run


def _check_completeness(run: RunLog) -> None:
    """Missing evals and a run that ended without its final eval."""
    end = run.n_lines or None  # where a missing final line would have been
    if not run.evals:
        run.add(end, "missing-eval", "no eval lines")
    else:
        seen = {r.step for r in run.evals}
        last = run.evals[-1]
        if run.config_eval_every:
            expected = range(run.config_eval_every, last.step + 1, run.config_eval_every)
            for step in expected:
                if step not in seen:
                    after = next(r for r in run.evals if r.step > step)
                    run.add(after.line, "missing-eval",
                            f"no eval line for step {step} (train.eval_every={run.config_eval_every})")
        if run.config_steps is not None and last.step != run.config_steps:
            run.add(last.line, "unfinished",
                    f"last eval is at step {last.step} but train.steps={run.config_steps}")
    if run.done is None:
        run.add(end, "unfinished", "no `done` line: the run was interrupted or is still running")
    elif run.config_steps is not None and run.done["step"] != run.config_steps:
        run.add(run.done_line, "unfinished",
                f"done at step {run.done['step']} but train.steps={run.config_steps}")


def find_runs(path: Path | str) -> list[Path]:
    """The run directories (or train.log files) ``path`` stands for.

    A train.log file or a run directory stands for itself; any other directory (an A/B comparison)
    for every run below it. A directory with no train.log anywhere is returned as a run, so that
    reading it reports the missing log rather than silently checking nothing.
    """
    path = Path(path)
    if path.is_file() or RunFiles(path).log.is_file() or RunFiles(path).config.is_file():
        return [path]
    found = {p.parent for p in path.rglob(LOG)} | {p.parent for p in path.rglob(CONFIG)}
    # A config.yaml inside a run (e.g. in checkpoints/) is not another run.
    below = sorted(d for d in found if not any(a in found for a in d.parents))
    return below or [path]


def read_runs(paths: list[Path] | list[str]) -> list[RunLog]:
    """:func:`read_run` for every run the paths stand for (see :func:`find_runs`)."""
    return [read_run(p) for path in paths for p in find_runs(path)]


# --- display -------------------------------------------------------------------------------------------

def _fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def run_table(run: RunLog) -> Table:
    """One rich table of a run's eval lines; problem cells are red (their lines appear in the findings)."""
    depths = sorted({int(k[4:]) for r in run.evals for k in r.values if k.startswith("bpb@")})
    flagged = {f.line for f in run.findings}
    state = "done" if run.finished else "not finished"
    arm = run.config_arm or (run.last or {}).get("arm", "?")
    table = Table(title=Text(f"{run.name}  ({arm}, {state})", style="bold"), title_justify="left")
    # The eval line's columns; the table shows every depth any row has (a malformed run may differ).
    columns = eval_columns(0)
    at = columns.index("bpb") + 1
    cols = ["line", *columns[:at], *[f"bpb@{k}" for k in depths], *columns[at:], *WINDOW_COLUMNS]
    for c in cols:
        table.add_column(c, justify="left" if c in ("arm", "kernel") else "right", no_wrap=True)
    for r in run.evals:
        v = r.values
        cells: list[Text] = [Text(str(r.line), style="dim"), Text(str(v["step"])),
                             Text(human(v["tokens"]) if "tokens" in v else "-")]
        for k in ("loss", "bpb", *[f"bpb@{d}" for d in depths]):
            x = v.get(k, "-")
            bad = isinstance(x, float) and not math.isfinite(x)
            cells.append(Text(_fmt(x, ".4f"), style="bold red" if bad else ""))
        cells += [Text(_fmt(v.get("lr", "-"), ".2e")), Text(human(v["tok/s"]) if "tok/s" in v else "-"),
                  Text(_fmt(v.get("depth", "-"), ".2f")), Text(str(v["arm"]))]
        for name in ARMS:
            if f"{name}_ran" not in v:  # an arm registered after the line was written
                cells.append(Text("-"))
                continue
            ran, asked = v[f"{name}_ran"], v[f"{name}_asked"]
            ok = (ran == asked and (ran > 0 or r.step == 0)) if name == v["arm"] else ran == asked == 0
            cells.append(Text(f"{ran}/{asked}", style="" if ok else "bold red"))
        cells.append(Text(f"{v['learned_name']}:{v['learned']:.4f}" if "learned" in v else "-"))
        cells += [Text(str(v.get("kernel", "-"))), Text(str(v.get("skipped", "-")))]
        cells += [Text(str(v.get(k, "-"))) for k in WINDOW_COLUMNS]
        table.add_row(*cells, style="on grey15" if r.line in flagged else None)
    return table


FORMATS = ("table", "tsv", "json")


def _plain(key: str, v: dict[str, Any]) -> str:
    """One value of a parsed eval line, complete, as plain text (counters ``ran/asked``)."""
    if key in ARMS:
        return f"{v[f'{key}_ran']}/{v[f'{key}_asked']}" if f"{key}_ran" in v else ""
    if key == "learned":
        return f"{v['learned_name']}:{v['learned']}" if "learned" in v else ""
    x = v.get(key, "")
    return repr(x) if isinstance(x, float) else str(x)


def tsv_lines(runs: list[RunLog]) -> list[str]:
    """Every run's eval lines as tab-separated rows under one header: nothing rounded or cut, so a file or
    a pipe keeps every value (``run`` and ``line`` say where a row comes from)."""
    depths = sorted({int(k[4:]) for run in runs for r in run.evals for k in r.values if k.startswith("bpb@")})
    columns = eval_columns(0)
    at = columns.index("bpb") + 1
    # window_steps and depth_sum last, as on the eval line: what `logs --check` checks asked against
    columns = [*columns[:at], *[f"bpb@{k}" for k in depths], *columns[at:], *WINDOW_COLUMNS]
    out = ["\t".join(["run", "line", *columns])]
    for run in runs:
        for r in run.evals:
            out.append("\t".join([str(run.run_dir), str(r.line), *(_plain(c, r.values) for c in columns)]))
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


def json_document(runs: list[RunLog]) -> dict[str, Any]:
    """Every run, its eval rows (typed as metrics.jsonl types them) and its findings."""
    return {"runs": [{"run": str(run.run_dir), "arm": run.config_arm or (run.last or {}).get("arm"),
                      "finished": run.finished, "evals": [{"line": r.line, **r.values} for r in run.evals],
                      "findings": [f.to_dict() for f in run.findings]} for run in runs]}


def logs_command(paths: list[Path], check: bool = False, console: Console | None = None,
                 fmt: str | None = None, err_console: Console | None = None) -> int:
    """``dormouse logs PATH... [--check] [--format table|tsv|json]``: every run's eval rows and findings.

    ``fmt`` None = a table on a terminal, tab-separated rows otherwise (a rich table in a file or a pipe is
    cut to 80 columns). In tsv and json the rows go to stdout and the findings to stderr (json also holds
    them). Returns the exit code: 2 when a path does not exist or the format is unknown; with ``check``, 1
    on any finding; else 0.
    """
    console = console or Console()
    err = err_console or Console(stderr=True, highlight=False)
    fmt = fmt or ("table" if console.is_terminal else "tsv")
    if fmt not in FORMATS:
        err.print(f"[red]error:[/red] --format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return 2
    missing = [p for p in paths if not Path(p).exists()]
    for p in missing:
        err.print(f"[red]error:[/red] {p}: no such file or directory")
    if missing:
        return 2
    runs = read_runs([Path(p) for p in paths])
    total = sum(len(run.findings) for run in runs)
    verdict = "no findings" if not total else f"{total} finding(s)"
    if fmt == "json":
        print(json.dumps(_json_safe(json_document(runs)), indent=1, default=str))
    elif fmt == "tsv":
        print("\n".join(tsv_lines(runs)), flush=True)
        for run in runs:
            for f in run.findings:
                err.print(Text(str(f)), soft_wrap=True)
    else:
        if not console.is_terminal:  # a table in a file: wide enough for every column, never "…"
            console.width = max(console.width, 1000)
        for run in runs:
            if run.evals:
                console.print(run_table(run))
            else:
                console.print(Text(f"{run.name}: no eval lines", style="bold"))
            for f in run.findings:
                console.print(Text(f"  {f}", style="red"), soft_wrap=True)
            if not run.findings:
                console.print(Text(f"  {run.path}: ok", style="green"))
            console.print()
        console.print(f"{len(runs)} run(s), {verdict}", style="green" if not total else "bold red")
        return 1 if check and total else 0
    err.print(f"{len(runs)} run(s), {verdict}", style="green" if not total else "bold red")
    return 1 if check and total else 0
