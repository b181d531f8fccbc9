"""The console views of a comparison: ``ab plan`` (the looks, seeds, runs and cost up to the maximum; composes every
run, so a bad override is refused as a run would, and writes nothing), ``ab status`` (safe while a comparison runs:
it reads the run directories and attempt records and probes the locks, never taking one) and the closing verdicts.
Compute estimates are :mod:`dormouse.model.flops`'."""

from __future__ import annotations

import functools
import heapq
import json
import time
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dormouse.ab.comparison.budget import budget_of, rounding_line
from dormouse.ab.comparison.plan import ComparisonPlan
from dormouse.ab.reporting.report import verdict_rows
from dormouse.ab.reporting.results import ComparisonResults
from dormouse.ab.rule.looks import Progress
from dormouse.ab.rule.sequential import holdback_words
from dormouse.ab.runs.job import Run, failed_by_the_driver, read_launch_job, read_launch_record, run_state
from dormouse.model.flops import training_cost
from dormouse.run.files import AB_ERROR, ComparisonFiles, RunFiles
from dormouse.run.lock import is_locked, read_holder
from dormouse.run.loglines import EVAL, RESUME, LogLineError, human, line_kind, parse_resume_line
from dormouse.run.reader import read_run


def tune_most_runs(plan: ComparisonPlan) -> int:
    """The most runs the tune stage may train: every tuned arm's budget spent (0 without a stage)."""
    return plan.spec.tune.bracketing().budget * len(plan.tuned_arms) if plan.tune_runs else 0


def tune_cost_line(plan: ComparisonPlan) -> str:
    """What the tune stage adds to the card's cost: the grid's runs and the most its bracketing may add."""
    costs = [training_cost(p.cfg) for p in plan.tune_runs]
    confirmatory = [training_cost(p.cfg) for p in plan.runs]
    rule = plan.spec.tune.bracketing()
    most = tune_most_runs(plan)
    per_run = sum(c["flops"] for c in costs) / max(1, len(costs))
    beyond = (f"; at most {most} runs with bracketing ({len(plan.tuned_arms)} arms × a budget of {rule.budget} "
              f"runs), ~{human(per_run * most)} training FLOPs" if most > len(costs) else "")
    return (f"tune stage (runs first, not in the card above): {len(costs)} runs ({len(plan.tuned_arms)} arms × "
            f"{len(plan.spec.tune.lrs)} lrs × {plan.spec.tune.replicates} replicate(s)), "
            f"{human(sum(c['tokens'] for c in costs))} tokens, {human(sum(c['flops'] for c in costs))} training "
            f"FLOPs{beyond}; the confirmatory runs at the maximum: {len(confirmatory)} runs, "
            f"{human(sum(c['flops'] for c in confirmatory))} FLOPs")


def budget_lines(plan: ComparisonPlan) -> list[str]:
    """The registered budget as ``ab plan`` and ``ab design`` state it: each arm's steps (the rounding stated) and
    training FLOPs, the confirmatory runs' FLOPs at the maximum, and any arm whose own FLOPs are uncounted."""
    if not plan.budgets:
        return []
    budget = budget_of(plan.spec)
    told = f"{budget.value:g} {budget.unit} per arm" if budget.matches_cost else "the same steps for every arm"
    lines = [f"budget: {budget.unit} ({told}); per arm:"]
    lines += [f"  {rounding_line(budget, arm, b)}; {human(b.flops)} training FLOPs" for arm, b in plan.budgets.items()]
    total = sum(plan.budgets[p.arm].flops for p in plan.runs)
    lines.append(f"  the confirmatory runs at the maximum: {len(plan.runs)} runs, ≈{human(total)} training FLOPs")
    uncounted = [arm for arm, b in plan.budgets.items() if not b.arm_counted]
    if uncounted:
        lines.append(f"  arm(s) {', '.join(uncounted)}: the arm declares no FLOP count (flops_per_token): its FLOPs "
                     "are the block's alone, its own work uncounted")
    return lines


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@functools.cache
def _this_cpu() -> dict[str, Any]:
    from dormouse.train.start import cpu_description  # torch: only once a run's CPU is asked about

    return cpu_description()


def timed_elsewhere(run_dir: Path) -> bool:
    """Whether a run recorded computing on another CPU than this machine's (provenance.json ``cpu``). Wall time
    depends on the CPU (3.7x between an AVX2 and an AVX512 machine in the depth study), so the time left is
    estimated from runs timed here; a run with no CPU counts as timed here."""
    try:
        cpu = json.loads(RunFiles(run_dir).provenance.read_text()).get("cpu")
    except (OSError, ValueError):
        return False
    return cpu is not None and cpu != _this_cpu()


def run_wall_s(run: Run, comp_dir: Path) -> float | None:
    """How long a finished run took: its attempts' elapsed time summed, else its log's done line."""
    attempts = read_launch_record(comp_dir, run.name).get("attempts", [])
    total = sum(float(a.get("elapsed_s") or 0) for a in attempts)
    if total > 0:
        return total
    done = read_run(run.run_dir).done
    return float(done["wall_s"]) if done and "wall_s" in done else None


# --- the plan -------------------------------------------------------------------------------------------

def _plan_state(run: Run, comp_dir: Path) -> tuple[str, str]:
    """:func:`run_state`, except that a run whose lock a live process holds is ``running`` (by whom): it is
    being trained, not waiting to be resumed or restarted."""
    state, why = run_state(run)
    lock_path = ComparisonFiles(Path(comp_dir)).run_lock(run.name)
    if state == "complete" or not is_locked(lock_path):
        return state, why
    holder = read_holder(lock_path) or {}
    return "running", f"being trained by pid {holder.get('pid', '?')} on {holder.get('host', '?')}"


def _say(console: Console, text: str) -> None:
    console.print(text, soft_wrap=True, highlight=False)


def render_schedule(plan: ComparisonPlan, console: Console) -> None:
    """The looks and the replicates' seed streams (what the registration fixes before any run)."""
    spec = plan.spec
    if plan.reg.protocol == 1:
        _say(console, f"protocol 1 (read only): seeds {', '.join(str(r.init_seed) for r in plan.replicates)} "
             "as one look; each arm's data seed is its own")
        return
    _say(console, f"protocol 2: SESOI {spec.sesoi:g} bpb, α {spec.alpha:g} family-wise over "
         f"{len(spec.tested)} tested arm(s) ({', '.join(spec.tested)}); looks at {', '.join(map(str, plan.looks))} "
         f"replicates per arm (maximum {plan.looks[-1]}); decided arms stop, the baseline"
         + (f" and the A/A arm {spec.aa_arm!r}" if spec.aa_arm else "") + " run while any arm is undecided")
    if spec.contrast is not None:
        c = spec.contrast
        _say(console, f"registered contrast: {c.arm} − {c.against}, paired by replicate, SESOI {c.sesoi:g} bpb, "
             f"α {spec.alpha:g} as its own family of one test; both arms run while it is undecided")
    table = Table(title="replicates (train.seed = init seed: shared initial weights; train.data_seed: data order)",
                  title_justify="left")
    for col in ("replicate", "look", "init seed", "data seed", "A/A data seed"):
        table.add_column(col, no_wrap=True)
    for rep in plan.replicates:
        table.add_row(str(rep.index), plan.look_label(rep.index), str(rep.init_seed), str(rep.data_seed),
                      "—" if rep.aa_data_seed is None else str(rep.aa_data_seed))
    console.print(table)


def render_plan(plan: ComparisonPlan, *, launch: dict[str, Any], registration: str, console: Console) -> None:
    spec, comp_dir, runs = plan.spec, plan.comp_dir, plan.runs
    _say(console, f"[bold]plan: ab {plan.name}[/] -> {comp_dir}  (trains nothing, writes nothing)")
    _say(console, f"registration: {registration}")
    render_schedule(plan, console)
    _say(console, "launch: " + ", ".join(f"{k}={v}" for k, v in launch.items() if v is not None))
    _say(console, "each run gets the Hydra overrides, in order: fixed, the arm's, the CLI's, then "
         "train.seed=<init seed> train.data_seed=<data seed> run.name=<arm>-s<init seed> run.dir=<comparison dir>")
    _say(console, f"  fixed: {' '.join(spec.fixed) or '(none)'}")
    width = max(len(a) for a in spec.arms)
    for arm, ovs in spec.arms.items():
        _say(console, f"  arm {arm:<{width}}: {' '.join(ovs) or '(none)'}")
    _say(console, f"  CLI:   {' '.join(plan.overrides) or '(none)'}")
    for line in budget_lines(plan):
        _say(console, line)
    table = Table(title_justify="left")
    for col in ("run", "look", "state", "tokens", "est. FLOPs", "wall"):
        table.add_column(col, no_wrap=True)
    states = {p.name: _plan_state(p, comp_dir) for p in runs}
    measured: dict[str, list[float]] = {}
    for p in runs:
        w = run_wall_s(p, comp_dir) if states[p.name][0] == "complete" else None
        if w is not None and not timed_elsewhere(p.run_dir):
            measured.setdefault(p.arm, []).append(w)
    total_flops = total_tokens = 0.0
    remaining_s: float | None = 0.0
    left = 0
    for p in runs:
        state, why = states[p.name]
        cost = training_cost(p.cfg)
        wall = run_wall_s(p, comp_dir) if state == "complete" else None
        if state != "complete":
            left += 1
            total_flops += cost["flops"]
            total_tokens += cost["tokens"]
            est = median(measured[p.arm]) if p.arm in measured else None
            remaining_s = None if est is None or remaining_s is None else remaining_s + est
        table.add_row(p.name, plan.look_label(p.replicate), "done" if state == "complete" else f"{state}: {why}"
                      if state != "new" else "new", human(cost["tokens"]), human(cost["flops"]),
                      _fmt_s(wall) if wall else "")
    console.print(table)
    jobs = int(launch.get("jobs") or 1)
    _say(console, f"left to run at most (every look, no arm decided early): {left} of {len(runs)} runs, "
         f"{human(total_tokens)} training tokens, ≈{human(total_flops)} FLOPs (matmuls only, ×3 for backward; "
         "eval excluded)")
    if left and remaining_s is not None:
        _say(console, f"estimated wall time: ≈{_fmt_s(remaining_s / max(1, jobs))} at {jobs} run(s) at once "
             "(from this comparison's finished runs on this CPU, per arm)")
    elif left:
        _say(console, "estimated wall time: unknown until a run of each arm has finished on this CPU "
             "(then plan and status use the measured time)")


# --- the status -----------------------------------------------------------------------------------------

def _log_lines(run_dir: Path) -> list[str]:
    try:
        return RunFiles(run_dir).log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _last_eval_line(run_dir: Path) -> str:
    return next((ln for ln in reversed(_log_lines(run_dir)) if line_kind(ln) == EVAL), "")


def run_status(run: Run, comp_dir: Path, now: float | None = None) -> dict[str, Any]:
    """One run's ``ab status`` state, last eval line, elapsed time and, running, its ETA."""
    now = time.time() if now is None else now
    lock_path = ComparisonFiles(Path(comp_dir)).run_lock(run.name)
    attempts = read_launch_record(comp_dir, run.name).get("attempts", [])
    last_attempt = attempts[-1] if attempts else {}
    job = read_launch_job(comp_dir, run.name)
    state, why = run_state(run)
    reading = read_run(run.run_dir) if run.run_dir.exists() else None
    step = int(reading.last["step"]) if reading and reading.last else 0
    out: dict[str, Any] = {"pair": run.name, "arm": run.arm, "seed": run.seed, "step": step,
                           "steps": run.steps, "last_eval": _last_eval_line(run.run_dir), "elapsed_s": None,
                           "eta_s": None, "where": "", "note": ""}
    if state == "complete":
        out.update(state="done", elapsed_s=run_wall_s(run, comp_dir), timed_here=not timed_elsewhere(run.run_dir))
    elif is_locked(lock_path):
        holder = read_holder(lock_path) or {}
        out["state"] = "running"
        out["where"] = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}" + (
            f", job {job['job_id']}" if job.get("state") == "submitted" and job.get("job_id") else "")
        started = last_attempt.get("started")
        if started:
            elapsed = now - datetime.fromisoformat(started).timestamp()
            out["elapsed_s"] = elapsed
            first = _attempt_start_step(run.run_dir)
            if step > first:
                out["eta_s"] = elapsed / (step - first) * (run.steps - step)
    elif failed_by_the_driver(job, last_attempt):
        out.update(state="failed", note=job.get("note") or "failed by the driver")
    elif last_attempt.get("state") == "failed" or run.files.ab_error.is_file():
        out.update(state="failed", note=last_attempt.get("note", f"see {AB_ERROR}"))
    elif state in ("resume", "restart"):
        out.update(state="interrupted", note=why)
    else:
        out["state"] = "pending"
    return out


def _attempt_start_step(run_dir: Path) -> int:
    """The step the current attempt started at (its last ``resume step=N`` line), else 0."""
    for ln in reversed(_log_lines(run_dir)):
        if line_kind(ln) == RESUME:
            try:
                return int(parse_resume_line(ln)["step"])
            except LogLineError:
                return 0
    return 0


def comparison_eta(running: list[tuple[float, float | None]], done_walls: list[float], todo: int) -> float | None:
    """Seconds until the running runs and the ``todo`` runs after them are done, on as many slots as are running
    (at least one). ``running``: ``(elapsed_s, eta_s)`` per run. A run takes the mean wall time of the finished
    ones, else the running ones' mean projected total; waiting runs go to the first slot to free, as
    :class:`dormouse.ab.launchers.local.ProcessLauncher` does. None when no time is known."""
    projected = [elapsed + eta for elapsed, eta in running if eta is not None]
    per_run = (sum(done_walls) / len(done_walls) if done_walls
                else sum(projected) / len(projected) if projected else None)
    if per_run is None:
        return None if running or todo else 0.0
    free = [eta if eta is not None else max(0.0, per_run - elapsed) for elapsed, eta in running] or [0.0]
    heapq.heapify(free)
    for _ in range(todo):
        heapq.heappush(free, heapq.heappop(free) + per_run)
    return max(free)


def comparison_status(plan: ComparisonPlan) -> dict[str, Any]:
    """Every started run's status, the next look's pending runs, the live driver, and the ETA."""
    now = time.time()
    comp_dir = plan.comp_dir
    # the first look's runs and the grid's tune runs; a tune run beyond the grid's once it started
    first = {p.name for p in plan.tune_runs} | {p.name for p in plan.runs if p.replicate <= plan.looks[0]}
    runs = [p for p in plan.all_runs if p.run_dir.exists() or read_launch_record(comp_dir, p.name)["attempts"]
            or p.name in first or ComparisonFiles(comp_dir).launch_job(p.name).is_file()]
    rows = [run_status(p, comp_dir, now) for p in runs]
    lock_path = ComparisonFiles(Path(comp_dir)).lock
    driver = read_holder(lock_path) if is_locked(lock_path) else None
    done_walls = [r["elapsed_s"] for r in rows if r["state"] == "done" and r["elapsed_s"] and r["timed_here"]]
    running = [(r["elapsed_s"] or 0.0, r["eta_s"]) for r in rows if r["state"] == "running"]
    todo = sum(r["state"] in ("pending", "interrupted", "failed") for r in rows)
    eta = comparison_eta(running, done_walls, todo) if running or todo else None
    counts = {s: sum(r["state"] == s for r in rows) for s in ("done", "running", "pending", "interrupted", "failed")}
    return {"pairs": rows, "driver": driver, "counts": counts, "eta_s": eta, "slots": max(1, len(running))}


def render_status(plan: ComparisonPlan, status: dict[str, Any], console: Console) -> None:
    name, comp_dir = plan.name, plan.comp_dir
    driver = status["driver"]
    who = (f"driver: pid {driver.get('pid')} on {driver.get('host')} since {driver.get('started')}"
           if driver else "no `dormouse ab` is running on it")
    counts = ", ".join(f"{n} {s}" for s, n in status["counts"].items() if n)
    console.print(f"[bold]status: ab {name}[/] ({comp_dir}): {counts}; {who}")
    console.print(status_table(status["pairs"]))
    if status["counts"]["done"] < len(status["pairs"]):
        console.print(f"comparison ETA: {_fmt_s(status['eta_s'])}"
                      + (f" ({status['slots']} run(s) at once)" if status["eta_s"] is not None
                         else " (unknown until a run has finished or evaluated)"))


_STATE_STYLE = {"done": "green", "running": "bold cyan", "failed": "bold red", "interrupted": "yellow",
                "pending": "dim"}


STATUS_RUN_WIDTH = len("attnres_full-s10")  # the widest run name `ab status` keeps on one line
_STATUS_COLUMNS = ("run", "state", "step", "elapsed", "ETA", "bpb", "last eval / note")


def status_table(rows: list[dict[str, Any]]) -> Table:
    """``ab status``'s table in 80 columns: the last bpb has its own column, never cut; the last column (eval in
    brief, pid and host, or the note) takes the width left and folds; every other column is as wide as its widest
    value."""
    cells = [_status_cells(r) for r in rows]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, col in enumerate(_STATUS_COLUMNS):
        if col == _STATUS_COLUMNS[-1]:
            table.add_column(col, overflow="fold", ratio=1)
            continue
        width = max([len(col), *(len(Text.from_markup(c[i]).plain) for c in cells)])
        table.add_column(col, overflow="fold", no_wrap=col != "run",
                         width=min(width, max(STATUS_RUN_WIDTH, len(col))) if col == "run" else width)
    for c in cells:
        table.add_row(*c)
    return table


def _status_cells(r: dict[str, Any]) -> list[str]:
    bpb, rest = _abridge(r["last_eval"])
    where = f"({r['where']})" if r["where"] else ""
    return [r["pair"], f"[{_STATE_STYLE[r['state']]}]{r['state']}[/]", f"{r['step']}/{r['steps']}",
            _fmt_s(r["elapsed_s"]), _fmt_s(r["eta_s"]) if r["state"] == "running" else "", bpb,
            r["note"] or " ".join(x for x in (rest, where) if x)]


def render_looks(plan: ComparisonPlan, state: Progress, console: Console) -> None:
    """The looks taken so far and what each decided, and what the next look needs."""
    table = Table(title=f"looks ({', '.join(map(str, plan.looks))} replicates per arm)", title_justify="left")
    for col in ("look", "replicates", "arm", "verdict", "mean Δ", "interval"):
        table.add_column(col, no_wrap=True)
    for look in state.looks:
        for arm, d in look.decisions.items():
            lo, hi = d.interval
            table.add_row(str(look.index + 1), str(look.n), arm, str(d.verdict), f"{d.mean:+.4f}",
                          f"[{lo:+.4f}, {hi:+.4f}]")
    for arm, why in state.invalid.items():
        table.add_row("", "", arm, "invalid", "", why)
    c = state.contrast
    if c is not None:
        for d in c.decisions:
            table.add_row(str(d.look + 1), str(d.n), f"contrast {c.arm} − {c.against}", str(d.verdict),
                          f"{d.mean:+.4f}", f"[{d.interval[0]:+.4f}, {d.interval[1]:+.4f}]")
        if c.invalid is not None:
            table.add_row("", "", f"contrast {c.arm} − {c.against}", "invalid", "", c.invalid)
    console.print(table)
    if state.pending:
        arms = ", ".join(dict.fromkeys(p.arm for p in state.pending))
        what = "the tune stage" if plan.lr_pending else f"look {int(state.next_look or 0) + 1}"
        _say(console, f"next: {what} needs {len(state.pending)} run(s) ({arms})")
    else:
        _say(console, "every look this comparison needs is taken" if not state.invalid else
             "no further look can be taken until the invalid arms' runs are fixed (rerun to retry failed runs)")


_ABRIDGED = {"train_loss_nats": "loss", "loss": "loss"}  # line key -> shown as


def _abridge(line: str) -> tuple[str, str]:
    """The eval line in brief: its bpb ("" without one) and ``loss=…`` (``train_loss_nats``, or a log's ``loss``);
    the speed is in the ETA, the step in its column."""
    fields = dict(w.partition("=")[::2] for w in line.split() if "=" in w)
    return fields.get("bpb", ""), " ".join(f"{shown}={fields[key]}" for key, shown in _ABRIDGED.items()
                                            if key in fields)


def status_json(status: dict[str, Any]) -> str:
    return json.dumps(status, indent=2, default=str)


# --- the verdicts ---------------------------------------------------------------------------------------

_VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "tie": "yellow", "invalid": "bold red",
                  "undecided": "yellow", "baseline": "dim", "aa": "dim"}


def assumption_caption(results: ComparisonResults) -> Text | None:
    """The registered contrast's verdict, the A/A check's sentence and the pooled skewness with its skew line (None
    when none was made)."""
    cal, skew, c = results.aa_calibration, results.skewness, results.contrast
    said = [f"Registered contrast {c['arm']} − {c['against']}: {c['verdict']}. {c['sentence']}" if c else "",
            f"A/A calibration check: {cal['sentence']}" if cal else "",
            f"Skewness: {skew['sentence']}." if skew else ""]
    return Text("\n".join(x for x in said if x)) if any(said) else None


def verdict_table(results: ComparisonResults) -> Table:
    """The verdicts as a rich table, each with its sentence."""
    held = holdback_words(float(results.alpha), float(results.alpha_holdback))
    table = Table(title=f"ab {results.name}: SESOI ±{results.sesoi:g} bpb, α {results.alpha:g} over "
                  f"{results.n_arms} arm(s){f' ({held})' if held else ''}, looks {results.looks}",
                  title_justify="left",
                  caption=assumption_caption(results), caption_justify="left")
    for c in ("arm", "bpb mean", "Δ mean", "repeated interval", "look", "verdict", "kept", "what was tested"):
        table.add_column(c, overflow="fold")  # a narrow terminal wraps a value; it never cuts it to "…"
    for row in verdict_rows(results):
        iv = row["interval"]
        table.add_row(
            row["arm"],
            "—" if row["bpb_mean"] is None else f"{row['bpb_mean']:.4f}",
            "—" if row["diff_mean"] is None else f"{row['diff_mean']:+.4f}",
            "—" if iv is None else f"[{iv[0]:+.4f}, {iv[1]:+.4f}]",
            "—" if row["look"] is None else str(row["look"]),
            f"[{_VERDICT_STYLE.get(row['verdict'], '')}]{row['verdict']}[/]",
            row["kept"] or "—",
            Text(row["sentence"] or "—"),
        )
    return table
