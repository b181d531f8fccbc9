"""``dormouse ab NAME [OVERRIDES...]``: run every (arm, seed) pair of a registered comparison, then report.

The flow (docs/ab-protocol.md):

1. Load and check the registered file (:mod:`dormouse.ab.registry`), then compose and validate every
   pair's config, and build the launcher the request asks for (:mod:`dormouse.ab.launch`,
   :mod:`dormouse.ab.cluster`). Anything wrong is refused here, before any run; a problem every arm
   shares (a bad CLI override) is said once.
2. Take the comparison's lock (:mod:`dormouse.ab.lock`): a second ``dormouse ab`` on the same directory is
   refused with the holder's pid and host; a dead holder's lock is taken over, with a message.
3. Check the registration stamp in ``<root>/<name>/registration.json``: the hash of the registered file
   plus the CLI overrides. A comparison is continued only under the registration it started with;
   ``restart=True`` discards its runs and starts over.
4. Hand every unfinished pair to the launcher, seed-major (all arms of seed 1 first, so paired results
   exist early): one after another in this process, ``--jobs N`` at once in worker processes, or as
   submitit jobs. Each runs :func:`dormouse.ab.pairjob.run_pair`: a pair whose final metrics row is at
   ``train.steps`` with a finite bpb and whose log has its ``done`` line is kept; an interrupted pair
   resumes from its newest checkpoint (``train.resume=auto``) or, without one (or if the resume fails),
   is restarted from scratch. :class:`dormouse.ab.live.PairBoard` shows the progress.
5. Analyse and write ``results.json``, ``report.md`` and the plots (:mod:`dormouse.ab.report`), with how
   each pair ran (threads, launcher) from its attempt records.

``--plan`` and ``--status`` (:mod:`dormouse.ab.status`) only read.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dormouse.ab.launch import (
    DONE,
    InProcessLauncher,
    Job,
    Launcher,
    LaunchError,
    ProcessLauncher,
    Slot,
    plan_slots,
)
from dormouse.ab.live import PairBoard
from dormouse.ab.lock import LockHeld, comparison_lock, is_locked
from dormouse.ab.pairjob import Pair, PairTask, pair_state, read_launch_record, run_pair
from dormouse.ab.records import load_record
from dormouse.ab.registry import (
    RUNNER_KEYS,
    ABSpecError,
    ComparisonError,
    Registered,
    load_spec,
    override_key,
)
from dormouse.ab.report import analyze, write_outputs
from dormouse.ab.status import comparison_status, render_plan, render_status
from dormouse.checkpoint import atomic_write_text
from dormouse.config import ConfigError, arm_name, load_config
from dormouse.errors import Interrupted
from dormouse.runfiles import LAUNCH, LOCK, REGISTRATION, ComparisonFiles, run_name

__all__ = ["ComparisonError", "ABSpecError", "Pair", "plan_pairs", "pair_state", "run_comparison",
           "ab_command", "STAMP_NAME", "LaunchRequest"]

STAMP_NAME = REGISTRATION
TrainFn = Callable[[DictConfig], Any]
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_./-]+$")


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
    one line per problem, before anything runs: a problem of one arm names the arm, a problem every arm
    shares (a bad CLI or fixed override) is said once for the comparison.

    Each arm is composed once (Hydra composition is the slow part); its seeds differ only in
    ``train.seed`` and ``run.name``, which are set on copies.
    """
    spec = reg.spec
    lines: list[str] = []
    arm_lines: dict[str, list[str]] = {}
    arm_cfgs: dict[str, DictConfig] = {}
    for arm, arm_overrides in spec.arms.items():
        full = [*spec.fixed, *arm_overrides, *overrides,
                f"run.dir={_quote(str(comp_dir))}", f"run.name={run_name(arm, spec.seeds[0])}",
                f"train.seed={spec.seeds[0]}",
                f"logging.wandb_group={_quote(spec.name)}", f"logging.wandb_job_type={_quote(arm)}"]
        try:
            arm_cfgs[arm] = load_config(full)
        except ConfigError as exc:
            arm_lines[arm] = list(exc.lines)
    # A problem every arm has (a bad CLI or fixed override) is the comparison's: say it once.
    shared = [ln for ln in dict.fromkeys(ln for lns in arm_lines.values() for ln in lns)
              if len(arm_lines) == len(spec.arms) and all(ln in lns for lns in arm_lines.values())]
    lines += [f"{reg.source}: every arm: {ln}" for ln in shared]
    lines += [f"{reg.source}: arm {arm!r}: {ln}" for arm, lns in arm_lines.items() for ln in lns if ln not in shared]
    if not lines and spec.aa_arm is not None:
        base_kind, aa_kind = arm_name(arm_cfgs[spec.baseline]), arm_name(arm_cfgs[spec.aa_arm])
        if base_kind != aa_kind:
            lines.append(f"{reg.source}: field 'aa_arm': {spec.aa_arm!r} selects {aa_kind} but the baseline "
                         f"{spec.baseline!r} selects {base_kind}; an A/A arm is the baseline again")
    if not lines:
        lines += _data_problems(reg, arm_cfgs)
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


def _data_problems(reg: Registered, arm_cfgs: dict[str, DictConfig]) -> list[str]:
    """Load each distinct data config once, before any run: a registered comparison runs the eval set it
    registered or nothing (``data.eval_bytes`` larger than the val split is refused here, naming it)."""
    from dormouse.data import DataError, load_corpus

    lines: list[str] = []
    seen: dict[str, str | None] = {}
    for arm, cfg in arm_cfgs.items():
        key = json.dumps(OmegaConf.to_container(cfg.data, resolve=True), sort_keys=True)
        if key not in seen:
            try:
                load_corpus(cfg.data)
                seen[key] = None
            except DataError as exc:
                seen[key] = str(exc)
        if seen[key] is not None:
            lines.append(f"{reg.source}: arm {arm!r}: {seen[key]}")
    return lines


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
        busy = [p.name[: -len(".lock")] for p in ComparisonFiles(comp_dir).pair_locks.glob("*.lock")
                if is_locked(p)]
        if busy:
            raise ComparisonError([f"--restart: pair(s) {', '.join(busy)} are still being trained by another "
                                   f"process (see `dormouse ab {reg.spec.name} --status`); stop them first"])
        console.print(f"[yellow]--restart:[/] discarding {comp_dir}")
        for entry in comp_dir.iterdir():
            if entry.name == LOCK:  # this process holds it
                continue
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
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
    if comp_dir.exists() and any(e.name != LOCK for e in comp_dir.iterdir()):
        raise ComparisonError([f"{comp_dir} holds files but no {STAMP_NAME}: it is not a comparison this "
                               "tool started; pass --restart to discard it, or choose another --root"])
    comp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp_path, json.dumps(new, indent=2) + "\n")
    return new


@dataclass
class LaunchRequest:
    """How to run the pairs: ``jobs`` at once on this machine (each ``threads`` CPU threads, one GPU each
    on CUDA), or ``launcher`` = ``slurm`` (``conf/launcher/slurm.yaml``) with ``launcher_overrides``
    (``KEY=VALUE``, the ``launcher.`` prefix stripped)."""

    jobs: int = 1
    threads: int | None = None
    launcher: str = "local"
    launcher_overrides: list[str] = field(default_factory=list)


def _uses_cuda(pairs: list[Pair]) -> bool:
    import torch

    devices = {str(p.cfg.train.device) for p in pairs}
    return any(d.startswith("cuda") for d in devices) or ("auto" in devices and torch.cuda.is_available())


def make_launcher(request: LaunchRequest, pairs: list[Pair], comp_dir: Path, name: str) -> Launcher:
    """The launcher a request asks for; :class:`LaunchError` (before any run) when it cannot be honoured."""
    if request.launcher == "local":
        if request.launcher_overrides:
            raise LaunchError([f"launcher overrides {request.launcher_overrides} need --launcher slurm"])
        cuda = _uses_cuda(pairs)
        if request.jobs == 1:
            slot = plan_slots(1, cuda=False, threads=request.threads)[0]
            return InProcessLauncher(slot if request.threads is not None else Slot())
        return ProcessLauncher(plan_slots(request.jobs, cuda=cuda, threads=request.threads))
    if request.jobs != 1 or request.threads is not None:
        raise LaunchError([f"--jobs/--threads are for the local launcher; with --launcher {request.launcher} "
                           "set launcher.array_parallelism and launcher.cpus_per_task instead"])
    from dormouse.ab.cluster import SubmititLauncher, default_folder, load_launcher_config

    config = load_launcher_config(request.launcher, request.launcher_overrides)
    return SubmititLauncher(config, default_folder(comp_dir, config), f"ab-{name}")


def _launch_lines(launcher: Launcher) -> str:
    return ", ".join(f"{k}={v}" for k, v in launcher.settings().items() if v is not None)


def run_comparison(
    name: str,
    overrides: list[str],
    *,
    restart: bool = False,
    root: Path = Path("runs/ab"),
    console: Console | None = None,
    train_fn: TrainFn | None = None,
    registry: Path | None = None,
    launch: LaunchRequest | None = None,
) -> Path:
    """Run (or continue) registered comparison ``name`` and write its results; returns the comparison dir.

    ``overrides`` are Hydra overrides applied to every run after the registered ones (they are part of the
    registration hash). ``registry`` is a directory of NAME.yaml files (default: the installed
    ``dormouse.conf/ab``). ``train_fn(cfg)`` defaults to :func:`dormouse.train.train` (anything but an
    importable function needs the sequential launcher). ``launch`` says how the pairs run (default: one
    after another in this process).

    Raises :class:`ComparisonError` (with ``.lines``) for a bad registration, bad overrides, a changed
    registration or a launch that cannot be honoured, and :class:`LockHeld` when another live process
    runs this comparison; all before any run. A failed pair does not raise: it is marked in the report
    (its arm is ``invalid``) and retried by the next invocation. A stop by signal (Ctrl-C, SIGTERM)
    raises :class:`dormouse.errors.Interrupted` once the running pairs have checkpointed.
    """
    console = console or Console()
    overrides = list(overrides)
    launch = launch or LaunchRequest()
    reg = load_spec(name, registry)
    check_cli_overrides(reg, overrides)
    comp_dir = (Path(root) / reg.spec.name).resolve()
    pairs = plan_pairs(reg, overrides, comp_dir)
    try:
        launcher = make_launcher(launch, pairs, comp_dir, reg.spec.name)
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    with comparison_lock(comp_dir) as lock:
        if lock.stale_message():
            console.print(f"[yellow]note:[/] {lock.stale_message()}")
        stamp = _check_registration(comp_dir, reg, overrides, restart, console)
        train_fn = train_fn or _default_train_fn()
        tasks: list[Job] = []
        for pair in pairs:
            state, why = pair_state(pair)
            if state == "complete":
                pair.status = "kept"
                continue
            if state in ("resume", "restart"):
                console.print(f"[cyan]{pair.name}[/]: {why}")
            task = PairTask(pair, comp_dir, train_fn, launcher.name,
                            output_to_file=not isinstance(launcher, InProcessLauncher))
            tasks.append(Job(pair.name, run_pair, (task,)))
        console.print(f"ab {reg.spec.name}: {len(tasks)} of {len(pairs)} pairs to run ({_launch_lines(launcher)})"
                      + (f"; workers' output in {comp_dir / LAUNCH}" if tasks and not isinstance(
                          launcher, InProcessLauncher) else ""))
        with PairBoard(reg.spec.name, pairs, console) as board:
            outcomes = launcher.run(tasks, board.start, board.finish)
        errors = {(p.arm, p.seed): o.note for o in outcomes if o.status != DONE
                  for p in pairs if p.name == o.key}
        if launcher.stopped_by is not None:
            console.print(f"[yellow]interrupted[/]: rerun `dormouse ab {reg.spec.name}` with the same overrides "
                          "to continue (finished pairs are kept, interrupted ones resume from their checkpoints)")
            raise Interrupted(launcher.stopped_by, "the comparison was interrupted")

        records = [load_record(p.arm, p.seed, p.run_dir, arm_name(p.cfg), p.steps, errors.get((p.arm, p.seed)))
                   for p in pairs]
        stamp_public = {k: v for k, v in stamp.items() if k != "registered"}
        results = analyze(reg.spec, records, overrides=overrides, registration=stamp_public)
        results["launch"] = {"this_invocation": launcher.settings(),
                             "pairs": {p.name: _pair_launch(comp_dir, p.name) for p in pairs}}
        write_outputs(comp_dir, results, records)
    console.print(verdict_table(results))
    console.print(f"report: {ComparisonFiles(comp_dir).report}")
    return comp_dir


def _pair_launch(comp_dir: Path, pair: str) -> dict[str, Any]:
    """How a pair ran, from its attempt records: the thread counts, launchers and hosts of its attempts."""
    attempts = read_launch_record(comp_dir, pair).get("attempts", [])
    return {"attempts": len(attempts),
            "threads": sorted({a["threads"] for a in attempts if a.get("threads") is not None}),
            "launchers": sorted({a["launcher"] for a in attempts if a.get("launcher")}),
            "hosts": sorted({a["host"] for a in attempts if a.get("host")}),
            "cuda_visible_devices": sorted({str(a["cuda_visible_devices"]) for a in attempts
                                            if a.get("cuda_visible_devices") is not None})}


def plan_command(name: str, overrides: list[str], *, root: Path, registry: Path | None, launch: LaunchRequest,
                 console: Console) -> None:
    """``--plan``: compose and check everything a run would, print the plan, write nothing."""
    reg = load_spec(name, registry)
    check_cli_overrides(reg, overrides)
    comp_dir = (Path(root) / reg.spec.name).resolve()
    pairs = plan_pairs(reg, overrides, comp_dir)
    try:
        settings = _launch_settings(launch, pairs)
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    render_plan(reg.spec.name, pairs, comp_dir, fixed=list(reg.spec.fixed), cli=overrides,
                arm_overrides=dict(reg.spec.arms), launch=settings,
                registration=_registration_state(comp_dir, reg, overrides), console=console)


def _launch_settings(launch: LaunchRequest, pairs: list[Pair]) -> dict[str, Any]:
    """What a launcher would be, without creating one (no executor, no SLURM contact)."""
    if launch.launcher == "local":
        if launch.launcher_overrides:
            raise LaunchError([f"launcher overrides {launch.launcher_overrides} need --launcher slurm"])
        cuda = _uses_cuda(pairs)
        slots = plan_slots(launch.jobs, cuda=cuda, threads=launch.threads)
        return {"launcher": "sequential" if launch.jobs == 1 else "local-processes", "jobs": launch.jobs,
                "threads_per_pair": slots[0].threads if launch.jobs > 1 or launch.threads else "torch default",
                "cuda_devices": [s.cuda_devices for s in slots] if cuda else None}
    from dormouse.ab.cluster import load_launcher_config

    c = load_launcher_config(launch.launcher, launch.launcher_overrides)
    return {"launcher": launch.launcher, "jobs": c.array_parallelism, "cluster": c.cluster,
            "partition": c.partition, "time_min": c.time_min, "gpus_per_pair": c.gpus_per_pair,
            "cpus_per_task": c.cpus_per_task}


def _registration_state(comp_dir: Path, reg: Registered, overrides: list[str]) -> str:
    stamp_path = ComparisonFiles(comp_dir).registration
    if not stamp_path.is_file():
        return "new comparison (nothing run yet)"
    old = json.loads(stamp_path.read_text())
    if old.get("hash") == registration_hash(reg, overrides):
        return f"continues {comp_dir} (same registered file and CLI overrides)"
    return (f"DIFFERS from the one {comp_dir} was started with: a run would be refused (pass the original "
            "overrides, or --restart to discard the runs)")


def status_command(name: str, *, root: Path, registry: Path | None, console: Console) -> int:
    """``--status``: where a comparison stands (read-only; safe while it runs). Exit 0; 2 if never started."""
    reg = load_spec(name, registry)
    comp_dir = (Path(root) / reg.spec.name).resolve()
    stamp_path = ComparisonFiles(comp_dir).registration
    if not stamp_path.is_file():
        console.print(f"ab {reg.spec.name}: not started ({stamp_path} does not exist); "
                      f"`dormouse ab {reg.spec.name} --plan` shows what it would run")
        return 2
    stamp = json.loads(stamp_path.read_text())
    if stamp.get("sha256") != reg.sha256:
        console.print(f"[yellow]note:[/] {reg.source} changed since the comparison started; the pairs below "
                      "follow the file as it is now")
    pairs = plan_pairs(reg, list(stamp.get("overrides", [])), comp_dir)
    render_status(reg.spec.name, comp_dir, comparison_status(pairs, comp_dir), console)
    return 0


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
                  "undecided": "yellow", "baseline": "dim"}


def _default_train_fn() -> TrainFn:
    from dormouse.train import train

    return train


def split_overrides(args: list[str]) -> tuple[list[str], list[str]]:
    """``launcher.KEY=VALUE`` arguments (the launcher's, prefix stripped) apart from the Hydra overrides."""
    launcher = [a[len("launcher."):] for a in args if a.startswith("launcher.")]
    return [a for a in args if not a.startswith("launcher.")], launcher


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
    launch: LaunchRequest | None = None,
    plan: bool = False,
    status: bool = False,
) -> int:
    """The whole CLI command: returns the exit code. 0 = every pair finished (whatever the verdicts);
    1 = some pair failed (the report says which; rerun to retry); 2 = refused before any run (a bad
    request, or another live process holds the comparison); 130/143 = interrupted (Ctrl-C / SIGTERM;
    rerun to resume). ``plan`` and ``status`` only read (exit 0; ``status`` exits 2 if never started)."""
    # In a file or a pipe rich assumes 80 columns and would wrap every table cell: give it room.
    console = console or Console(width=None if sys.stdout.isatty() else 200)
    err = err_console or Console(stderr=True, highlight=False)
    launch = launch or LaunchRequest()
    try:
        if plan and status:
            raise ComparisonError(["--plan and --status are two different questions: ask one at a time"])
        if status:
            return status_command(name, root=root, registry=registry, console=console)
        if plan:
            plan_command(name, overrides, root=root, registry=registry, launch=launch, console=console)
            return 0
        comp_dir = run_comparison(name, overrides, restart=restart, root=root, console=console,
                                  train_fn=train_fn, registry=registry, launch=launch)
    except (ComparisonError, ConfigError, LaunchError) as exc:
        for line in exc.lines:
            err.print(f"[bold red]error:[/] {line}", soft_wrap=True)
        return 2
    except LockHeld as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        return 2
    except Interrupted as exc:
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    results = json.loads(ComparisonFiles(comp_dir).results.read_text())
    return 0 if results["complete"] else 1
