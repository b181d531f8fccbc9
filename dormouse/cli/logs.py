"""The log inspector behind ``dormouse logs PATH... [--check]``.

A run directory holds ``train.log``: ``# `` provenance lines, one ``eval`` line per evaluation
(docs/model.md, "The eval line"), and a final ``done step=<N> wall_s=<s>`` when the run finished; their
formats and parsers are :mod:`dormouse.run.loglines`'. This module reads a run (:func:`read_run`) or every run
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
  ``train.steps`` from the run's ``config.yaml``);
* a torn last line in ``train.log`` or ``metrics.jsonl`` (a write cut short by a crash or a full disk; a
  resume cuts it, dormouse.train.metrics) and a ``metrics.jsonl`` line that is not a JSON row (a torn line that an
  append extended before that repair existed: the row after it is lost to every reader).

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

from dormouse.config.schema import ARMS
from dormouse.errors import print_error
from dormouse.run.files import CONFIG, LOG, SWEEP, RunFiles
from dormouse.run.loglines import (
    DONE,
    EVAL,
    LEARNED,
    RESUME,
    LogLineError,
    cell,
    counter_names,
    eval_fields,
    line_kind,
    parse_done_line,
    parse_eval_line,
    parse_metrics_row,
    read_metrics,
    replay,
    torn_tail,
)


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
    """A parsed eval line and the line number (1-based) it came from; ``row`` is the run's metrics.jsonl row
    of the same step, when there is one: the unrounded source of every number the line shows."""

    line: int
    values: dict[str, Any]
    row: dict[str, Any] | None = None

    @property
    def step(self) -> int:
        return int(self.values["step"])

    @property
    def shown(self) -> dict[str, Any]:
        """What the tables show: the metrics.jsonl row's values (every digit), the line's where it has none
        (a run directory without metrics.jsonl, a train.log given on its own)."""
        return {**self.values, **self.row} if self.row is not None else self.values


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

    from dormouse.config.schema import arm_name

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
    for name in counter_names(v):  # by name: a line from before an arm was registered lacks its counter
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

    if path.is_file() and path.name != LOG and not run.evals and run.done is None and not any(
            line.startswith("# ") or line_kind(line) for line in lines):
        run.add(None, "not-a-log", f"{path} is not a train.log: none of its lines is a `# key: value` header "
                "or an eval, resume or done line; pass a run directory or its train.log")
        return run
    for row in run.evals:
        _check_row(run, row)
    _check_completeness(run)
    _check_torn(run, log_path, len(lines))
    if log_path.name == LOG:
        _check_metrics_file(run, RunFiles(run.run_dir).metrics)
    run.findings.sort(key=lambda f: (f.line is None, f.line or 0))
    _attach_metrics(run)
    return run


TORN_ADVICE = ("a write cut short (a crash or a full disk); readers skip it, and resuming the run "
               "(train.resume=auto) cuts it before appending")


def _check_torn(run: RunLog, path: Path, n_lines: int) -> None:
    """A last line without its newline (dormouse.run.loglines.torn_tail): reported, at that line, in a run not
    yet resumed (a resume cuts it and says so in a ``repair`` line)."""
    torn = torn_tail(path)
    if torn:
        run.findings.append(Finding(path, n_lines, "torn-line", f"the last line ({torn} bytes) has no newline: "
                                    + TORN_ADVICE))


def _check_metrics_file(run: RunLog, path: Path) -> None:
    """metrics.jsonl: every complete line a JSON row with a step, and no torn last line."""
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    torn = torn_tail(path)
    for n, line in enumerate(lines[:-1] if torn else lines, start=1):
        try:
            parse_metrics_row(line)
        except LogLineError as exc:
            run.findings.append(Finding(path, n, "malformed", f"{exc}: a row torn by a crash or a full disk and "
                                        "extended by a later append; this row and the one appended onto it "
                                        "are lost to every reader (train.log's eval lines still hold them)"))
    _check_torn(run, path, len(lines))


def _attach_metrics(run: RunLog) -> None:
    """Give each eval line its metrics.jsonl row (same step), the unrounded source of its numbers."""
    if run.path.name != LOG:
        return
    by_step = {int(r["step"]): r for r in read_metrics(RunFiles(run.run_dir).metrics)}
    for row in run.evals:
        row.row = by_step.get(row.step)


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
    v = r.shown
    if key == "line":
        return Text(str(r.line), style="dim")
    if key not in v and f"{key}_ran" not in v:
        return Text("-")
    text = cell(key, v)
    if f"{key}_ran" in v:
        ran, asked = v[f"{key}_ran"], v[f"{key}_asked"]
        ok = (ran == asked and (ran > 0 or r.step == 0)) if key == v.get("arm") else ran == asked == 0
        return Text(text, style="" if ok else "bold red")
    x = v[key]
    bad = (key in ("loss", "bpb") or key.startswith("bpb@")) and isinstance(x, float) and not math.isfinite(x)
    return Text(text, style="bold red" if bad else "")


def _fit(cols: list[str], cells: dict[str, list[Text]], width: int, arm: str | None) -> list[str]:
    """The columns that fit ``width`` (rich's box: 3 characters per column plus 1), chosen by priority
    and shown in line order."""
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


def run_table(run: RunLog, width: int | None = None) -> Table:
    """One rich table of a run's evals; problem cells are red (their lines appear in the findings).

    ``width`` (a terminal's) keeps the columns that fit, most wanted first (step, bpb, the training loss,
    the arm's counter, bpb by depth, ...); the caption names the columns left out."""
    state = "done" if run.finished else "not finished"
    arm = run.config_arm or (run.last or {}).get("arm", "?")
    table = Table(title=Text(f"{run.name}  ({arm}, {state})", style="bold"), title_justify="left")
    cols = ["line", *columns([r.shown for r in run.evals])]
    cells = {c: [_cell_text(c, r) for r in run.evals] for c in cols}
    shown = _fit(cols, cells, width, arm) if width else cols
    hidden = [c for c in cols if c not in shown]
    if hidden:
        table.caption = f"not shown at this width: {' '.join(hidden)} (--format tsv shows every column)"
        table.caption_justify = "left"
    for c in shown:
        table.add_column(_HEADERS.get(c, c), justify="left" if c in ("arm", "kernel") else "right",
                         no_wrap=True)
    flagged = {f.line for f in run.findings}
    for i, r in enumerate(run.evals):
        table.add_row(*(cells[c][i] for c in shown), style="on grey15" if r.line in flagged else None)
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


def tsv_lines(runs: list[RunLog]) -> list[str]:
    """Every run's evals as tab-separated rows under one header, the numbers from metrics.jsonl (the line's
    where a run has none): nothing rounded or cut, so a file or a pipe keeps every value (``run`` and
    ``line`` say where a row comes from). The columns are the rows' fields by name, keyed as metrics.jsonl."""
    cols = columns([r.shown for run in runs for r in run.evals])
    out = ["\t".join(["run", "line", *cols])]
    for run in runs:
        for r in run.evals:
            out.append("\t".join([str(run.run_dir), str(r.line), *(_plain(c, r.shown) for c in cols)]))
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
    """Every run, its eval rows (metrics.jsonl's rows whole where the run has them, else the parsed line,
    typed as metrics.jsonl types them) and its findings."""
    return {"runs": [{"run": str(run.run_dir), "arm": run.config_arm or (run.last or {}).get("arm"),
                      "finished": run.finished, "evals": [{"line": r.line, **r.shown} for r in run.evals],
                      "findings": [f.to_dict() for f in run.findings]} for run in runs]}


def sweep_table(folder: Path, runs: list[RunLog]) -> Table:
    """A sweep as one table: a row per setting (its run folder, the swept keys' values, the last eval's step,
    bpb and the run's findings), in the sweep's order (``sweep.yaml``, dormouse.cli.sweep)."""
    import yaml

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
        bpb = (last.row or last.values).get("bpb") if last is not None else None
        table.add_row(str(job["run"]).rsplit("/", 1)[-1], *[values.get(k, "") for k in swept],
                      str(last.step) if last else "-", f"{bpb:.4f}" if isinstance(bpb, float) else "-",
                      "not run" if run is None else str(len(run.findings)))
    return table


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
        print_error(err, f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return 2
    missing = [p for p in paths if not Path(p).exists()]
    for p in missing:
        print_error(err, f"{p}: no such file or directory")
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
        # On a terminal the table fits its width (columns chosen by priority); in a file every column.
        width = console.width if console.is_terminal else None
        if not console.is_terminal:  # a table in a file: wide enough for every column, never "…"
            console.width = max(console.width, 1000)
        for path in paths:  # a sweep (dormouse train -m): one table of its settings first
            if (Path(path) / SWEEP).is_file():
                console.print(sweep_table(Path(path), runs))
                console.print()
        for run in runs:
            if run.evals:
                console.print(run_table(run, width))
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
