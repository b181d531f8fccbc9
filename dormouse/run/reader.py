"""A run directory read into one typed record: its config, its evals (metrics.jsonl's rows, or a bare train.log's
lines) and how it ended. Reading never raises on bad content: what cannot be read is a :class:`Finding`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dormouse.arms.plugins import PluginError
from dormouse.arms.registry import model_arm
from dormouse.run.files import CONFIG, LOG, RunFiles
from dormouse.run.loglines import (
    DONE,
    EVAL,
    RESUME,
    LogLineError,
    line_kind,
    missing_fields,
    parse_done_line,
    parse_eval_line,
    read_metrics_lines,
    replay,
)
from dormouse.run.plugins import load_run_plugins


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
    """One evaluation: ``values`` its row, ``line`` the train.log line showing it (or None), ``logged`` that line
    parsed, ``at`` where a finding points."""

    values: dict[str, Any]
    line: int | None
    at: tuple[Path, int]
    logged: dict[str, Any] | None = None

    @property
    def step(self) -> int:
        return int(self.values["step"])


@dataclass
class RunReading:
    """Everything :func:`read_run` learned about one run, and the findings."""

    path: Path  # the train.log (which may not exist)
    metrics: Path | None = None  # the record, when it is metrics.jsonl; None: the log's eval lines are
    has_log: bool = False  # a train.log was read: without one there is nothing to check
    evals: list[EvalRow] = field(default_factory=list)  # effective evals (replays after a resume win)
    done: dict[str, Any] | None = None
    done_line: int | None = None
    n_lines: int = 0
    config_steps: int | None = None
    config_eval_every: float | None = None
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
        """The run wrote its ``done`` line (train.log holds it; metrics.jsonl has no row for it)."""
        return self.done is not None

    @property
    def last(self) -> dict[str, Any] | None:
        return self.evals[-1].values if self.evals else None

    @property
    def final(self) -> EvalRow | None:
        """The registered final eval: the last one, when it is at ``train.steps`` (known from config.yaml)."""
        last = self.evals[-1] if self.evals else None
        return last if last is not None and last.step == self.config_steps else None

    def add(self, line: int | None, kind: str, message: str) -> None:
        """A finding at a line of train.log."""
        self.findings.append(Finding(self.path, line, kind, message))

    def add_at(self, row: EvalRow, kind: str, message: str) -> None:
        """A finding about one eval, where a person reads it (:attr:`EvalRow.at`)."""
        self.findings.append(Finding(*row.at, kind, message))


def _load_config(path: Path) -> DictConfig:
    """A run's config.yaml, parsed once per version of the file (a comparison replays every run's after each
    batch of runs; parsing is most of a replay's time)."""
    st = path.stat()
    return _parsed_config(str(path), st.st_ino, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=4096)
def _parsed_config(path: str, inode: int, mtime_ns: int, size: int) -> DictConfig:
    cfg = OmegaConf.load(path)
    OmegaConf.set_readonly(cfg, True)  # shared by every later read of this version
    return cfg  # type: ignore[return-value]


def _read_config(run: RunReading) -> None:
    """Fill the config fields the checks need from the run's config.yaml (absent or unreadable: skip)."""
    cfg_path = RunFiles(run.run_dir).config
    if not cfg_path.is_file():
        return
    try:
        for note in load_run_plugins(run.run_dir):  # the run's plugin arm, so its counters are known
            run.add(None, "plugin-changed", note)
    except PluginError as exc:
        run.add(None, "missing-plugin", str(exc))
    try:
        cfg = _load_config(cfg_path)
        run.config_steps = int(cfg.train.steps)
        run.config_eval_every = cfg.train.eval_every
        run.config_arm = model_arm(cfg.model)
    except Exception as exc:  # a config we cannot read must not hide the log's own findings
        run.add(None, "config", f"{cfg_path} could not be read ({type(exc).__name__}: {exc}); "
                "the step checks against train.steps are skipped")


def _read_log_lines(run: RunReading, lines: list[str]) -> list[EvalRow]:
    """train.log's effective eval lines, parsed; a malformed line or an unexplained step back is a finding."""
    evals: list[EvalRow] = []
    resumed = False  # a resume line was seen since the last eval: the next step may go back
    for n, line in enumerate(lines, start=1):
        stripped = line.strip()
        kind = line_kind(stripped)
        if kind == RESUME:
            resumed = True
        elif kind == EVAL:
            try:
                values = parse_eval_line(stripped)
            except LogLineError as exc:
                run.add(n, "malformed", f"eval line: {exc}")
                continue
            row = EvalRow(values, n, (run.path, n), logged=values)
            if evals and row.step <= evals[-1].step and not resumed:
                run.add(n, "out-of-order", f"step {row.step} follows step {evals[-1].step} (line {evals[-1].line})")
                continue
            resumed = False
            evals = replay(evals, row, lambda r: r.step)
        elif kind == DONE:
            try:
                run.done = parse_done_line(stripped)
                run.done_line = n
            except LogLineError as exc:
                run.add(n, "malformed", f"done line: {exc}")
    return evals


def logged_evals(run_dir: Path) -> list[dict[str, Any]]:
    """train.log's effective eval rows, from its own lines: what the run logged whatever metrics.jsonl lost."""
    run = RunReading(path=RunFiles(run_dir).log)
    if not run.path.is_file():
        return []
    lines = run.path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [row.values for row in _read_log_lines(run, lines)]


def _metrics_rows(run: RunReading, metrics: Path, logged: list[EvalRow]) -> list[EvalRow]:
    """metrics.jsonl's rows with their train.log lines; a row missing a needed field is a finding."""
    shown = {row.step: row for row in logged}
    evals = []
    for n, values in read_metrics_lines(metrics):
        missing = missing_fields(values)
        if missing:
            run.findings.append(Finding(metrics, n, "incomplete-row", f"metrics row of step {values['step']}: "
                                        f"missing field(s): {', '.join(missing)}"))
            continue
        line = shown.get(int(values["step"]))
        if line is None:
            evals.append(EvalRow(values, None, (metrics, n)))
        else:
            evals.append(EvalRow(values, line.line, line.at, logged=line.values))
    return evals


def _is_not_a_log(path: Path, run: RunReading, lines: list[str], logged: list[EvalRow]) -> bool:
    """A file given by name, not called train.log, with none of a log's lines: a path mistaken for a log."""
    return (path.is_file() and path.name != LOG and not logged and run.done is None
            and not any(line.startswith("# ") or line_kind(line) for line in lines))


def read_run(path: Path | str) -> RunReading:
    """Read one run from its directory or train.log; never raises on bad content."""
    path = Path(path)
    log_path = path if path.is_file() else RunFiles(path).log
    run = RunReading(path=log_path)
    _read_config(run)
    if not log_path.is_file():
        run.add(None, "no-log", f"no {LOG} (the run never started or the path is not a run)")
        return run
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    run.n_lines = len(lines)
    logged = _read_log_lines(run, lines)
    if _is_not_a_log(path, run, lines, logged):
        run.add(None, "not-a-log", f"{path} is not a train.log: none of its lines is a `# key: value` header "
                "or an eval, resume or done line; pass a run directory or its train.log")
        return run
    run.has_log = True
    metrics = RunFiles(run.run_dir).metrics
    if log_path.name == LOG and metrics.is_file():
        run.metrics = metrics
        run.evals = _metrics_rows(run, metrics, logged)
    else:
        run.evals = logged
    return run


def find_runs(path: Path | str) -> list[Path]:
    """The runs ``path`` stands for; a directory without a train.log is one, so its missing log is reported."""
    path = Path(path)
    if path.is_file() or RunFiles(path).log.is_file() or RunFiles(path).config.is_file():
        return [path]
    found = {p.parent for p in path.rglob(LOG)} | {p.parent for p in path.rglob(CONFIG)}
    # A config.yaml inside a run (e.g. in checkpoints/) is not another run.
    below = sorted(d for d in found if not any(a in found for a in d.parents))
    return below or [path]
