"""Whether a run is valid (``dormouse logs --check``, and ``dormouse ab``'s invalid arms): a dead or leaking arm,
``asked`` not ``2 x depth_sum``, the wrong arm, a non-finite loss or bpb, missing or final evals absent, torn or
non-JSON lines. Every finding names its file and line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dormouse.arms.registry import ARMS
from dormouse.config.eval_schedule import eval_steps
from dormouse.run.files import LOG, RunFiles
from dormouse.run.loglines import LogLineError, counter_names, parse_metrics_row, torn_tail
from dormouse.run.reader import EvalRow, Finding, RunReading, find_runs, read_run

TORN_ADVICE = ("a write cut short (a crash or a full disk); readers skip it, and resuming the run "
               "(train.resume=auto) cuts it before appending")


def counter_fault(name: str, values: dict[str, Any]) -> str | None:
    """The fault of counter ``name`` in a row, or None: selected ran = asked > 0, others 0/0."""
    ran, asked = values[f"{name}_ran"], values[f"{name}_asked"]
    if name != values.get("arm"):
        return "leaks" if ran != 0 or asked != 0 else None
    # Step 0 (an eval before any training) has an empty window: 0/0 is honest there.
    if int(values["step"]) > 0 and (ran == 0 or asked == 0 or ran != asked):
        return "reads 0" if ran == 0 or asked == 0 else "ran != asked"
    return None


def non_finite(key: str, value: Any) -> bool:
    """A loss or bpb field (``loss``, ``bpb``, ``bpb@k``) that is NaN or infinite: a run that diverged."""
    return (key in ("loss", "bpb") or key.startswith("bpb@")) and isinstance(value, float) and not math.isfinite(value)


def _check_counters(run: RunReading, row: EvalRow) -> None:
    """The arm the eval names, and every arm's counter (:func:`counter_fault`)."""
    v = row.values
    arm = v["arm"]
    if arm not in ARMS:
        run.add_at(row, "unknown-arm", f"arm={arm!r} is not one of {', '.join(ARMS)}")
    elif run.config_arm is not None and arm != run.config_arm:
        run.add_at(row, "arm-mismatch", f"arm={arm} but config.yaml selects {run.config_arm}")
    for name in counter_names(v):  # by name: a row from before an arm was registered lacks its counter
        why, ran, asked = counter_fault(name, v), v[f"{name}_ran"], v[f"{name}_asked"]
        if why is None:
            continue
        if name == arm:
            run.add_at(row, "dead-arm", f"selected arm {name}={ran}/{asked} {why} at step {row.step}: "
                       "the mechanism did not (fully) run")
        else:
            run.add_at(row, "leaking-arm", f"unselected arm {name}={ran}/{asked} at step {row.step} "
                       f"(arm={arm}): it must read 0/0")


def _check_row(run: RunReading, row: EvalRow) -> None:
    """Per-eval checks: the arm counters, what the schedule asked, and finite metrics."""
    _check_counters(run, row)
    v, arm = row.values, row.values["arm"]
    # `asked` means asked: the depths the schedule drew for the window's training forwards ask for two
    # sublayer aggregations per iteration. A sublayer the loop skipped lowers ran and asked together, which
    # the check above cannot see; this one can. (A row without depth_sum is not checked.)
    if arm in ARMS and isinstance(v.get("depth_sum"), int) and v[f"{arm}_asked"] != 2 * v["depth_sum"]:
        asked, want = v[f"{arm}_asked"], 2 * v["depth_sum"]
        run.add_at(row, "asked-mismatch", f"selected arm {arm} asked={asked} but the window's "
                   f"{v.get('window_steps', '?')} training steps drew depths summing to {v['depth_sum']}, which "
                   f"ask for 2 x {v['depth_sum']} = {want} aggregations at step {row.step}: a sublayer did not "
                   "run as the schedule asked")
    bad = [k for k, x in v.items() if non_finite(k, x)]
    if bad:
        run.add_at(row, "non-finite", f"{', '.join(f'{k}={v[k]}' for k in bad)} at step {row.step}")


def _check_completeness(run: RunReading) -> None:
    """Missing evals and a run that ended without its final eval."""
    end = run.n_lines or None  # where a missing final line would have been
    if not run.evals:
        run.add(end, "missing-eval", "no eval lines")
    else:
        seen = {r.step for r in run.evals}
        last = run.evals[-1]
        if run.config_eval_every:
            expected = [s for s in eval_steps(run.config_eval_every, last.step) if s < last.step]
            for step in expected:
                if step not in seen:
                    after = next(r for r in run.evals if r.step > step)
                    run.add_at(after, "missing-eval",
                               f"no eval line for step {step} (train.eval_every={run.config_eval_every})")
        if run.config_steps is not None and last.step != run.config_steps:
            run.add_at(last, "unfinished", f"last eval is at step {last.step} but train.steps={run.config_steps}")
    if run.done is None:
        run.add(end, "unfinished", "no `done` line: the run was interrupted or is still running")
    elif run.config_steps is not None and run.done["step"] != run.config_steps:
        run.add(run.done_line, "unfinished",
                f"done at step {run.done['step']} but train.steps={run.config_steps}")


def _check_torn(run: RunReading, path: Path, n_lines: int) -> None:
    """A torn last line, reported in a run not yet resumed (a resume cuts it)."""
    torn = torn_tail(path)
    if torn:
        run.findings.append(Finding(path, n_lines, "torn-line", f"the last line ({torn} bytes) has no newline: "
                                    + TORN_ADVICE))


def _check_metrics_file(run: RunReading, path: Path) -> None:
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


def check_run(run: RunReading) -> RunReading:
    """Add the validity findings to a read run, every finding ordered by line; returns ``run``."""
    if not run.has_log:
        return run
    for row in run.evals:
        _check_row(run, row)
    _check_completeness(run)
    _check_torn(run, run.path, run.n_lines)
    if run.path.name == LOG:
        _check_metrics_file(run, RunFiles(run.run_dir).metrics)
    run.findings.sort(key=lambda f: (f.line is None, f.line or 0))
    return run


def checked_run(path: Path | str) -> RunReading:
    """Read one run and check it (``path``: its directory or its train.log)."""
    return check_run(read_run(path))


def checked_runs(paths: list[Path] | list[str]) -> list[RunReading]:
    """:func:`checked_run` for every run the paths stand for (dormouse.run.reader.find_runs)."""
    return [checked_run(p) for path in paths for p in find_runs(path)]
