"""One eval row, every sink, by name: a field added to the row shows under its own name in
the eval line (terminal and train.log), metrics.jsonl, wandb and every view of `dormouse logs` (table, tsv,
json), and every other field stays where it was.

The defect this pins: `dormouse logs` once rendered eval columns by position, so adding `grad_norm` to the
row put `window_steps`' value under `grad_norm` and shifted the next column, and no test failed. Each
added field below is put in the *middle* of the row (after `depth`), where a positional reader misplaces
it; the added counter stands for an arm the registry does not know (a plugin's, leaking: an unselected arm's 0/0
stays off the line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dormouse.arms.registry import ARMS
from dormouse.cli.logs import logs_command, run_table, tsv_lines
from dormouse.run.checks import checked_run
from dormouse.run.loglines import format_done_line, parse_eval_line
from dormouse.train.metrics import JsonlSink, Metrics, TerminalSink, TrainLogSink, WandbSink


def trainer_row(step: int, bpb: float) -> dict[str, Any]:
    """A row shaped like dormouse.train.loop._metrics_row's (GR, two depths): line fields, file-only fields,
    the probes' lists."""
    row: dict[str, Any] = {"step": step, "tokens": step * 4096 + 17, "loss": 1.41234567, "bpb": bpb,
                           "bpb@1": bpb + 0.123456, "bpb@2": bpb, "lr": 2.4e-4, "tok/s": 8123.4, "depth": 2.0,
                           "arm": "gr"}
    for arm in ARMS:
        row[f"{arm}_ran"] = row[f"{arm}_asked"] = 2400 if arm == "gr" else 0
    row.update({"learned_name": "gate", "learned": 0.15321, "kernel": "none", "skipped": 0, "time_s": 12.5,
                "peak_mem_bytes": 123456789, "params": 21604, "window_steps": 600, "depth_sum": 1200,
                "probe/gate_mean": [0.1, 0.2, 0.3, 0.4], "probe/gate_spread": [0.01, 0.02, 0.03, 0.04]})
    return row


ADDED = {"grad_norm": {"grad_norm": 0.8125},  # a number the line has no format for
         "counter": {"sgate_ran": 3, "sgate_asked": 0}}  # an arm the registry does not know


def with_added(row: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """``row`` with ``added`` inserted right after ``depth`` (the middle of the line)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        out[key] = value
        if key == "depth":
            out.update(added)
    return out


class FakeWandbRun:
    """What a sink needs of a wandb run: ``log(dict, step=)`` and ``finish()``, recorded."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.finished = False

    def log(self, data: dict[str, float], step: int) -> None:
        self.logged.append((step, dict(data)))

    def finish(self) -> None:
        self.finished = True


def write_run(run_dir: Path, rows: list[dict[str, Any]]) -> tuple[list[str], FakeWandbRun]:
    """A run directory written through the sinks, as the trainer writes one; returns the terminal lines and
    the wandb run."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("model:\n  use_gr: true\n  use_attnres: false\n"
                                         "train:\n  steps: 1200\n  eval_every: 600\n")
    (run_dir / "train.log").write_text("# dormouse: test\n")
    terminal: list[str] = []
    wandb = FakeWandbRun()
    metrics = Metrics([TerminalSink(terminal.append), TrainLogSink(run_dir / "train.log"),
                       JsonlSink(run_dir / "metrics.jsonl"), WandbSink(wandb)])
    for row in rows:
        metrics.log(row)
    metrics.close()
    with (run_dir / "train.log").open("a") as f:
        f.write(format_done_line(1200, 3.0) + "\n")
    return terminal, wandb


def tokens(line: str) -> dict[str, str]:
    return dict(t.split("=", 1) for t in line.split()[1:])


def rows() -> list[dict[str, Any]]:
    return [trainer_row(600, 2.5123456), trainer_row(1200, 2.40000012)]


@pytest.fixture(params=sorted(ADDED))
def added(request: pytest.FixtureRequest) -> dict[str, Any]:
    return ADDED[request.param]


@pytest.fixture
def runs(tmp_path: Path, added: dict[str, Any]) -> dict[str, Any]:
    base_term, base_wandb = write_run(tmp_path / "base", rows())
    plus_term, plus_wandb = write_run(tmp_path / "plus", [with_added(r, added) for r in rows()])
    return {"base": (tmp_path / "base", base_term, base_wandb), "plus": (tmp_path / "plus", plus_term, plus_wandb)}


def expected_tokens(added: dict[str, Any]) -> dict[str, str]:
    """How the added field reads on the eval line: a counter as ``ran/asked``, a number as itself."""
    if "sgate_ran" in added:
        return {"sgate": f"{added['sgate_ran']}/{added['sgate_asked']}"}
    return {k: format(v, ".4g") for k, v in added.items()}


def test_an_added_field_shows_under_its_own_name_on_the_eval_line_and_in_train_log(runs, added) -> None:
    base_dir, base_term, _ = runs["base"]
    plus_dir, plus_term, _ = runs["plus"]
    base_log = [ln for ln in (base_dir / "train.log").read_text().splitlines() if ln.startswith("eval ")]
    plus_log = [ln for ln in (plus_dir / "train.log").read_text().splitlines() if ln.startswith("eval ")]
    assert plus_log == plus_term and base_log == base_term  # the terminal and train.log show one line
    for base_line, plus_line in zip(base_term, plus_term, strict=True):
        assert tokens(plus_line) == {**tokens(base_line), **expected_tokens(added)}
        back = parse_eval_line(plus_line)  # and the parser reads it back under its name
        assert all(k in back for k in added)


def test_an_added_field_goes_to_metrics_jsonl_and_wandb_under_its_own_name(runs, added) -> None:
    base_dir, _, base_wandb = runs["base"]
    plus_dir, _, plus_wandb = runs["plus"]
    base = [json.loads(ln) for ln in (base_dir / "metrics.jsonl").read_text().splitlines()]
    plus = [json.loads(ln) for ln in (plus_dir / "metrics.jsonl").read_text().splitlines()]
    assert plus == [{**b, **added} for b in base]
    assert [s for s, _ in plus_wandb.logged] == [s for s, _ in base_wandb.logged] == [600, 1200]
    for (_, b), (_, p) in zip(base_wandb.logged, plus_wandb.logged, strict=True):
        assert p == {**b, **added}
        assert "probe/gate_mean/attn1" in b  # the probes as named scalars
    assert plus_wandb.finished


def table_cells(run_dir: Path) -> list[dict[str, str]]:
    """The rendered table's rows as {header: cell} (every column: no width)."""
    table = run_table(checked_run(run_dir))
    columns = {str(c.header): [str(x) for x in c.cells] for c in table.columns}
    n = len(next(iter(columns.values())))
    return [{h: cells[i] for h, cells in columns.items()} for i in range(n)]


def test_an_added_field_shows_under_its_own_name_in_every_logs_view(runs, added) -> None:
    base_dir, _, _ = runs["base"]
    plus_dir, _, _ = runs["plus"]
    # table
    for b, p in zip(table_cells(base_dir), table_cells(plus_dir), strict=True):
        assert p == {**b, **expected_tokens(added)}
    # tsv: every value, every digit, keyed as metrics.jsonl
    (base_head, *base_rows) = tsv_lines([checked_run(base_dir)])
    (plus_head, *plus_rows) = tsv_lines([checked_run(plus_dir)])
    for b, p in zip(base_rows, plus_rows, strict=True):
        bd = dict(zip(base_head.split("\t"), b.split("\t"), strict=True))
        pd = dict(zip(plus_head.split("\t"), p.split("\t"), strict=True))
        bd.pop("run"), pd.pop("run")
        extra = {k: str(v) for k, v in added.items()} if "grad_norm" in added else {"sgate": "3/0"}
        assert pd == {**bd, **extra}
    # json: the metrics.jsonl rows whole
    base_json, plus_json = (json_evals(d) for d in (base_dir, plus_dir))
    assert plus_json == [{**b, **added} for b in base_json]
    # and the table as printed, wide
    console = Console(record=True, width=250, force_terminal=True)
    logs_command([plus_dir], console=console, fmt="table")
    text = console.export_text()
    assert all(f" {name} " in text and f" {value} " in text for name, value in expected_tokens(added).items())


def json_evals(run_dir: Path) -> list[dict[str, Any]]:
    import io
    from contextlib import redirect_stdout

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        logs_command([run_dir], fmt="json", err_console=Console(file=io.StringIO()))
    (run,) = json.loads(buffer.getvalue())["runs"]
    return run["evals"]


def test_tsv_and_json_give_every_digit_from_metrics_jsonl(tmp_path: Path) -> None:
    """The line rounds (`tokens=2.46M`, `bpb=2.5123`); tsv and json read metrics.jsonl, the one source."""
    write_run(tmp_path / "r", rows())
    head, first, _ = tsv_lines([checked_run(tmp_path / "r")])
    cells = dict(zip(head.split("\t"), first.split("\t"), strict=True))
    assert cells["tokens"] == str(600 * 4096 + 17) and cells["bpb"] == "2.5123456"
    assert cells["loss"] == "1.41234567" and cells["learned"] == "gate:0.15321"
    evals = json_evals(tmp_path / "r")
    assert evals[0]["tokens"] == 600 * 4096 + 17 and evals[0]["probe/gate_mean"] == [0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize("width", [80, 120])
def test_the_table_fits_a_terminal_and_bpb_stays_readable(tmp_path: Path, width: int) -> None:
    """At 80 or 120 columns no cell is cut to `b…`: the table keeps the columns that fit (step,
    bpb, the training loss, the arm's counter first) and names the ones it leaves out."""
    write_run(tmp_path / "a-run-with-a-long-name-20261201-120000-000000", rows())
    console = Console(record=True, width=width, force_terminal=True)
    assert logs_command([tmp_path / "a-run-with-a-long-name-20261201-120000-000000"], console=console,
                        fmt="table") == 0
    text = console.export_text()
    table_lines = [ln for ln in text.splitlines() if ln[:1] in "┏┃┡│└"]
    assert table_lines and all(len(ln) <= width for ln in table_lines)
    assert "…" not in "\n".join(table_lines)
    assert "2.5123" in text and "2.4000" in text and "2400/2400" in text and "(nats)" in text
    assert "not shown at this width:" in text and "window_steps" in text
