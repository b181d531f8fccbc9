"""``dormouse ab NAME [OVERRIDES...]``: run every (arm, seed) pair of a registered comparison, then report.

The flow (docs/ab-protocol.md):

1. Load and check the registered file (:mod:`dormouse.ab.registry`), then compose and validate every
   pair's config. Anything wrong is refused here, before any run.
2. Check the registration stamp in ``<root>/<name>/registration.json``: the hash of the registered file
   plus the CLI overrides. A comparison is continued only under the registration it started with;
   ``restart=True`` discards its runs and starts over.
3. Run the pairs in-process, one after another, seed-major (all arms of seed 1 first, so paired results
   exist early). A pair whose final metrics row is at ``train.steps`` with a finite bpb and whose log has
   its ``done`` line is kept; an interrupted pair resumes from its newest checkpoint
   (``train.resume=auto``) or, without one (or if the resume fails), is restarted from scratch.
4. Analyse and write ``results.json``, ``report.md`` and the plots (:mod:`dormouse.ab.report`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dormouse.ab.records import final_row, load_record, read_metrics
from dormouse.ab.registry import (
    RUNNER_KEYS,
    ABSpecError,
    ComparisonError,
    Registered,
    load_spec,
    override_key,
)
from dormouse.ab.report import analyze, write_outputs
from dormouse.checkpoint import atomic_write_text, list_checkpoints
from dormouse.config import ConfigError, arm_name, load_config
from dormouse.errors import Interrupted
from dormouse.logs import read_run
from dormouse.runfiles import REGISTRATION, ComparisonFiles, RunFiles, run_name

__all__ = ["ComparisonError", "ABSpecError", "Pair", "plan_pairs", "pair_state", "run_comparison",
           "ab_command", "STAMP_NAME"]

STAMP_NAME = REGISTRATION
TrainFn = Callable[[DictConfig], Any]
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_./-]+$")


@dataclass
class Pair:
    """One (arm, seed) run of the comparison."""

    arm: str
    seed: int
    cfg: DictConfig  # composed and validated
    run_dir: Path
    status: str = "pending"  # pending | running | resuming | done | kept | failed | interrupted
    note: str = ""

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def files(self) -> RunFiles:
        return RunFiles(self.run_dir)

    @property
    def steps(self) -> int:
        return int(self.cfg.train.steps)


def _quote(value: str) -> str:
    """A Hydra override value: plain paths stay as they are, anything else is single-quoted."""
    if _PLAIN_VALUE.match(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def registration_hash(reg: Registered, overrides: list[str]) -> str:
    """What a comparison is bound to: the registered file's exact bytes and the CLI overrides, in order."""
    blob = json.dumps({"file_sha256": reg.sha256, "overrides": list(overrides)}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def check_cli_overrides(reg: Registered, overrides: list[str]) -> None:
    """CLI overrides may tune the environment (device, steps for a quick look, wandb) but must not set a
    key the runner owns or a key an arm sets: that would erase the difference the comparison measures."""
    arm_keys = {override_key(o): arm for arm, ovs in reg.spec.arms.items() for o in ovs}
    lines = []
    for o in overrides:
        key = override_key(o)
        if "=" not in o:
            lines.append(f"override {o!r} is not key=value")
        elif key in RUNNER_KEYS:
            lines.append(f"override {o!r} sets {key}, which `dormouse ab` sets for every pair "
                         f"({', '.join(RUNNER_KEYS)})")
        elif key in arm_keys:
            lines.append(f"override {o!r} sets {key}, which arm {arm_keys[key]!r} sets: it would change what "
                         "the arms differ in; register another comparison instead")
    if lines:
        raise ComparisonError(lines)


def plan_pairs(reg: Registered, overrides: list[str], comp_dir: Path) -> list[Pair]:
    """Compose and validate every pair's config (seed-major order). Raises :class:`ComparisonError` with
    one line per problem, each naming the arm, before anything runs.

    Each arm is composed once (Hydra composition is the slow part); its seeds differ only in
    ``train.seed`` and ``run.name``, which are set on copies.
    """
    spec = reg.spec
    lines: list[str] = []
    arm_cfgs: dict[str, DictConfig] = {}
    for arm, arm_overrides in spec.arms.items():
        full = [*spec.fixed, *arm_overrides, *overrides,
                f"run.dir={_quote(str(comp_dir))}", f"run.name={run_name(arm, spec.seeds[0])}",
                f"train.seed={spec.seeds[0]}",
                f"logging.wandb_group={_quote(spec.name)}", f"logging.wandb_job_type={_quote(arm)}"]
        try:
            arm_cfgs[arm] = load_config(full)
        except ConfigError as exc:
            lines += [f"{reg.source}: arm {arm!r}: {line}" for line in exc.lines]
    if not lines and spec.aa_arm is not None:
        base_kind, aa_kind = arm_name(arm_cfgs[spec.baseline]), arm_name(arm_cfgs[spec.aa_arm])
        if base_kind != aa_kind:
            lines.append(f"{reg.source}: field 'aa_arm': {spec.aa_arm!r} selects {aa_kind} but the baseline "
                         f"{spec.baseline!r} selects {base_kind}; an A/A arm is the baseline again")
    if lines:
        raise ComparisonError(lines)
    pairs: list[Pair] = []
    for seed in spec.seeds:
        for arm, base_cfg in arm_cfgs.items():
            cfg = copy.deepcopy(base_cfg)
            cfg.train.seed = seed
            cfg.run.name = run_name(arm, seed)
            pairs.append(Pair(arm, seed, cfg, comp_dir / cfg.run.name))
    return pairs


def pair_state(pair: Pair) -> tuple[str, str]:
    """``(state, why)`` with state one of ``new``, ``complete``, ``resume`` or ``restart``.

    Complete = the final metrics row is at train.steps with a finite bpb and the log has its ``done`` line
    (a kill between the final eval and ``done`` resumes: the final checkpoint makes that a no-op run).
    """
    if not pair.run_dir.exists():
        return "new", "not started"
    rows = read_metrics(pair.files.metrics)
    last = rows[-1]["step"] if rows else None
    if final_row(rows, pair.steps) is not None and read_run(pair.run_dir).finished:
        return "complete", f"finished at step {pair.steps}"
    if list_checkpoints(pair.files.checkpoints):
        return "resume", f"interrupted (last eval at step {last}); resuming from its checkpoint"
    return "restart", f"interrupted (last eval at step {last}) without a checkpoint; restarting it"


def _stamp(reg: Registered, overrides: list[str]) -> dict[str, Any]:
    return {
        "name": reg.spec.name,
        "source": reg.source,
        "sha256": reg.sha256,
        "overrides": list(overrides),
        "hash": registration_hash(reg, overrides),
        "created": datetime.now().isoformat(timespec="seconds"),
        "registered": reg.text,
    }


def _check_registration(comp_dir: Path, reg: Registered, overrides: list[str], restart: bool,
                        console: Console) -> dict[str, Any]:
    """Bind the comparison directory to this registration, or refuse. Returns the stamp in force."""
    stamp_path = ComparisonFiles(comp_dir).registration
    new = _stamp(reg, overrides)
    if comp_dir.exists() and restart:
        console.print(f"[yellow]--restart:[/] discarding {comp_dir}")
        shutil.rmtree(comp_dir)
    if stamp_path.is_file():
        old = json.loads(stamp_path.read_text())
        if old.get("hash") == new["hash"]:
            return old
        lines = [f"{comp_dir} was started under another registration; refusing to mix results."]
        if old.get("sha256") != new["sha256"]:
            lines.append(f"the registered file {reg.source} changed since the first run "
                         f"(sha256 {str(old.get('sha256'))[:12]} -> {new['sha256'][:12]})")
        if old.get("overrides") != new["overrides"]:
            lines.append(f"the CLI overrides changed: {old.get('overrides')} -> {new['overrides']}")
        lines.append("rerun with the original file and overrides to continue, or pass --restart to discard "
                     f"the runs in {comp_dir} and start over")
        raise ComparisonError(lines)
    if comp_dir.exists() and any(comp_dir.iterdir()):
        raise ComparisonError([f"{comp_dir} holds files but no {STAMP_NAME}: it is not a comparison this "
                               "tool started; pass --restart to discard it, or choose another --root"])
    comp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp_path, json.dumps(new, indent=2) + "\n")
    return new


_STYLE = {"pending": "dim", "running": "bold cyan", "resuming": "bold cyan", "done": "green",
          "kept": "green", "failed": "bold red", "interrupted": "yellow"}


def progress_table(name: str, pairs: list[Pair]) -> Table:
    """Pairs as a table: one row per arm, one column per seed, each cell the pair's status."""
    seeds = sorted({p.seed for p in pairs})
    table = Table(title=f"ab {name}", title_justify="left")
    table.add_column("arm")
    for s in seeds:
        table.add_column(f"seed {s}")
    arms = list(dict.fromkeys(p.arm for p in pairs))
    cell = {(p.arm, p.seed): p for p in pairs}
    for arm in arms:
        row = [arm]
        for s in seeds:
            p = cell.get((arm, s))
            row.append("" if p is None else f"[{_STYLE.get(p.status, '')}]{p.status}[/]")
        table.add_row(*row)
    return table


# Exceptions that mean "the user stopped it": they end the comparison (rerun resumes), whereas any other
# error fails only its pair.
STOP = (KeyboardInterrupt, Interrupted)


def _default_train_fn() -> TrainFn:
    from dormouse.train import train

    return train


def _run_pair(pair: Pair, train_fn: TrainFn, console: Console) -> None:
    """Bring one pair to completion: keep, resume or (re)start it. Sets ``pair.status`` and ``pair.note``."""
    state, why = pair_state(pair)
    if state == "complete":
        pair.status, pair.note = "kept", why
        return
    if state == "resume":
        pair.status = "resuming"
        console.print(f"[cyan]{pair.name}[/]: {why}")
        cfg = copy.deepcopy(pair.cfg)
        cfg.train.resume = "auto"
        try:
            train_fn(cfg)
        except STOP:
            raise
        except Exception as exc:  # a checkpoint that cannot be resumed: start the pair over
            console.print(f"[yellow]{pair.name}[/]: resume failed ({type(exc).__name__}: {exc}); "
                          "restarting it")
            state = "restart"
    if state in ("new", "restart"):
        if state == "restart" and pair.status != "resuming":
            console.print(f"[cyan]{pair.name}[/]: {why}")
        if pair.run_dir.exists():
            shutil.rmtree(pair.run_dir)  # the runner owns this directory; a fresh run needs it empty
        pair.status = "running"
        cfg = copy.deepcopy(pair.cfg)
        cfg.train.resume = "never"
        train_fn(cfg)
    state, why = pair_state(pair)
    if state == "complete":
        pair.status, pair.note = "done", why
    else:
        rows = read_metrics(pair.files.metrics)
        last = rows[-1] if rows else {}
        pair.status = "failed"
        pair.note = (f"the run returned without its final eval (last eval at step {last.get('step')}, "
                     f"bpb={last.get('bpb')}; train.steps={pair.steps})")


def run_comparison(
    name: str,
    overrides: list[str],
    *,
    restart: bool = False,
    root: Path = Path("runs/ab"),
    console: Console | None = None,
    train_fn: TrainFn | None = None,
    registry: Path | None = None,
) -> Path:
    """Run (or continue) registered comparison ``name`` and write its results; returns the comparison dir.

    ``overrides`` are Hydra overrides applied to every run after the registered ones (they are part of the
    registration hash). ``registry`` is a directory of NAME.yaml files (default: the installed
    ``dormouse.conf/ab``). ``train_fn(cfg)`` defaults to :func:`dormouse.train.train`.

    Raises :class:`ComparisonError` (with ``.lines``) for a bad registration, bad overrides or a changed
    registration; these are raised before any run. A failed pair does not raise: it is marked in the
    report (its arm is ``invalid``) and retried by the next invocation. A user interrupt (Ctrl-C, or
    ``dormouse.train.Interrupted``) propagates after the progress table is printed.
    """
    console = console or Console()
    overrides = list(overrides)
    reg = load_spec(name, registry)
    check_cli_overrides(reg, overrides)
    comp_dir = (Path(root) / reg.spec.name).resolve()
    pairs = plan_pairs(reg, overrides, comp_dir)
    stamp = _check_registration(comp_dir, reg, overrides, restart, console)
    train_fn = train_fn or _default_train_fn()

    for pair in pairs:
        if pair_state(pair)[0] == "complete":
            pair.status = "kept"
    errors: dict[tuple[str, int], str] = {}
    for pair in pairs:
        if pair.status == "kept":
            continue
        console.print(progress_table(reg.spec.name, pairs))
        try:
            _run_pair(pair, train_fn, console)
        except STOP:
            pair.status = "interrupted"
            console.print(progress_table(reg.spec.name, pairs))
            console.print(f"[yellow]interrupted[/]: rerun `dormouse ab {reg.spec.name}` with the same "
                          "overrides "
                          "to continue")
            raise
        except Exception as exc:  # one failed run must not lose the others: record it and go on
            pair.status = "failed"
            pair.note = f"{type(exc).__name__}: {exc}"
            pair.run_dir.mkdir(parents=True, exist_ok=True)
            pair.files.ab_error.write_text(traceback.format_exc())
        if pair.status == "failed":
            errors[(pair.arm, pair.seed)] = pair.note
            console.print(f"[bold red]{pair.name} failed[/]: {pair.note}")
    console.print(progress_table(reg.spec.name, pairs))

    records = [load_record(p.arm, p.seed, p.run_dir, arm_name(p.cfg), p.steps, errors.get((p.arm, p.seed)))
               for p in pairs]
    stamp_public = {k: v for k, v in stamp.items() if k != "registered"}
    results = analyze(reg.spec, records, overrides=overrides, registration=stamp_public)
    write_outputs(comp_dir, results, records)
    console.print(verdict_table(results))
    console.print(f"report: {ComparisonFiles(comp_dir).report}")
    return comp_dir


def verdict_table(results: dict[str, Any]) -> Table:
    """The verdicts as a rich table (the report's first table, abridged)."""
    table = Table(title=f"ab {results['name']}: δ = {results['delta']:.4f} bpb ({results['delta_source']})",
                  title_justify="left")
    for c in ("arm", "bpb mean", "Δ mean", "95 % t-interval", "Holm p", "verdict", "kept", "reason"):
        table.add_column(c, overflow="fold")  # a narrow terminal wraps a value; it never cuts it to "…"
    for name, a in results["arms"].items():
        iv = a["t_interval"]
        table.add_row(
            name + (" (A/A)" if a["role"] == "aa" else ""),
            "—" if a["bpb_mean"] is None else f"{a['bpb_mean']:.4f}",
            "—" if a["diff_mean"] is None else f"{a['diff_mean']:+.4f}",
            "—" if a["role"] == "baseline" else "undefined" if iv is None
            else f"[{iv[0]:+.4f}, {iv[1]:+.4f}]",
            "—" if a.get("p_holm") is None else f"{a['p_holm']:.3g}",
            f"[{_VERDICT_STYLE.get(a['verdict'], '')}]{a['verdict']}[/]",
            a.get("kept") or "—",
            Text(a.get("reason") or "—"),
        )
    return table


_VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "tie": "yellow", "invalid": "bold red",
                  "insufficient": "yellow", "baseline": "dim"}


def ab_command(
    name: str,
    overrides: list[str],
    *,
    restart: bool = False,
    root: Path = Path("runs/ab"),
    console: Console | None = None,
    err_console: Console | None = None,
    train_fn: TrainFn | None = None,
    registry: Path | None = None,
) -> int:
    """The whole CLI command: returns the exit code. 0 = every pair finished (whatever the verdicts);
    1 = some pair failed (the report says which; rerun to retry); 2 = refused before any run;
    130/143 = interrupted (Ctrl-C / SIGTERM; rerun to resume)."""
    console = console or Console()
    err = err_console or Console(stderr=True, highlight=False)
    try:
        comp_dir = run_comparison(name, overrides, restart=restart, root=root, console=console,
                                  train_fn=train_fn, registry=registry)
    except (ComparisonError, ConfigError) as exc:
        for line in exc.lines:
            err.print(f"[bold red]error:[/] {line}", soft_wrap=True)
        return 2
    except STOP as exc:
        return int(getattr(exc, "exit_code", 130))
    results = json.loads(ComparisonFiles(comp_dir).results.read_text())
    return 0 if results["complete"] else 1
