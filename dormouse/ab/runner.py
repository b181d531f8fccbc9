"""``dormouse ab NAME [OVERRIDES...]``: run a registered comparison look by look, then report.

The flow (docs/ab-protocol.md):

1. Build the comparison's one plan (:func:`dormouse.ab.plan.build_plan`): load and check the registered
   file, compose and validate every pair's config, and build the launcher the request asks for
   (:mod:`dormouse.ab.launch`, :mod:`dormouse.ab.cluster`). Anything wrong is refused here, before any run;
   a problem every arm shares (a bad CLI override) is said once. Protocol-1 registrations are read only.
2. Take the comparison's lock (:mod:`dormouse.ab.lock`): a second ``dormouse ab`` on the same directory is
   refused with the holder's pid and host; a dead holder's lock is taken over, with a message.
3. Check the registration stamp in ``<root>/<name>/registration.json``: the hash of the registered file
   plus the CLI overrides. A comparison is continued only under the registration it started with;
   ``restart=True`` discards its runs and starts over. Then check the code: every pair already started
   must have been computed by code with this checkout's fingerprint (:mod:`dormouse.ab.fingerprint`).
4. Save the design card (``design.json``) if it is missing.
5. Look by look (:mod:`dormouse.ab.looks`): hand the pairs the next look needs to the launcher,
   replicate-major: one after another in this process, ``--jobs N`` at once in worker processes, or as
   submitit jobs. Each runs :func:`dormouse.ab.pairjob.run_pair`: a complete pair is kept; an interrupted
   pair resumes from its newest checkpoint (``train.resume=auto``) or, without one, is restarted from
   scratch; a run whose final eval is on disk is never retrained, and one whose checkpoints all fail to
   load is moved aside, not deleted (issue 31). Then the look decides what it can; decided arms stop.
6. Analyse and write ``results.json``, ``report.md`` and the plots (:mod:`dormouse.ab.report`), with how
   each pair ran (threads, launcher, code) from its attempt records.

``--plan`` and ``--status`` (:mod:`dormouse.ab.status`) only read; ``--design`` writes only ``design.json``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dormouse.ab import fingerprint, tune
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
from dormouse.ab.looks import progress, read_pair
from dormouse.ab.pairjob import (
    Pair,
    PairTask,
    finish_complete_runs,
    pair_state,
    read_launch_record,
    recorded_fingerprints,
    run_pair,
)
from dormouse.ab.plan import ComparisonPlan, build_plan, check_cli_overrides
from dormouse.ab.registry import (
    PROTOCOL,
    ABSpecError,
    ComparisonError,
    Registered,
)
from dormouse.ab.report import analyze, verdict_rows, write_outputs
from dormouse.ab.status import comparison_status, render_looks, render_plan, render_status
from dormouse.config.schema import ConfigError
from dormouse.errors import Interrupted, print_error
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import AB_ROOT, DESIGN, LAUNCH, LOCK, REGISTRATION, ComparisonFiles

__all__ = ["ComparisonError", "ABSpecError", "Pair", "plan_pairs", "pair_state", "run_comparison",
           "ab_command", "STAMP_NAME", "LaunchRequest", "check_cli_overrides"]

STAMP_NAME = REGISTRATION
TrainFn = Callable[[DictConfig], Any]


def registration_hash(reg: Registered, overrides: list[str]) -> str:
    """What a comparison is bound to: the registered file's exact bytes and the CLI overrides, in order."""
    blob = json.dumps({"file_sha256": reg.sha256, "overrides": list(overrides)}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def plan_pairs(reg: Registered, overrides: list[str], comp_dir: Path) -> list[Pair]:
    """Every confirmatory pair of a registration composed and validated (protocol 1 too: scripts/rerun_pair.py
    re-runs a published pair); ``comp_dir`` is where the pairs would be written. See
    :func:`dormouse.ab.plan.build_plan`. With a tune stage the pairs carry the lrs recorded in ``comp_dir``'s
    ``tune.json`` (or its ``results.json``); with neither, the composed default (``plan.lr_pending``)."""
    plan = build_plan(reg, overrides, Path(comp_dir).parent)
    chosen = tune.recorded_choice(Path(comp_dir))
    if plan.tune_pairs and chosen is not None:
        plan.choose_lrs(chosen)
    if plan.comp_dir != Path(comp_dir).resolve():  # a directory not named after the comparison
        for p in plan.pairs:
            p.run_dir = Path(comp_dir).resolve() / p.name
            p.cfg.run.dir = str(Path(comp_dir).resolve())
    return plan.pairs


def _refuse_protocol_1(reg: Registered) -> None:
    if reg.protocol != PROTOCOL:
        raise ComparisonError([
            f"{reg.source} is a protocol-{reg.protocol} registration, kept read only so its published result "
            "stays checkable: its margin 2·sd(A/A) does not shrink with seeds, so an effect below it could never "
            f"be called better. Register a protocol-{PROTOCOL} comparison (sesoi, looks, seed streams: "
            "docs/ab-protocol.md) to run it"])


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


def _discard(comp_dir: Path, name: str, console: Console) -> None:
    """--restart: empty the comparison directory (but the lock this process holds), refusing while a pair
    is still being trained by another process."""
    busy = [p.name[: -len(".lock")] for p in ComparisonFiles(comp_dir).pair_locks.glob("*.lock") if is_locked(p)]
    if busy:
        raise ComparisonError([f"--restart: pair(s) {', '.join(busy)} are still being trained by another "
                               f"process (see `dormouse ab {name} --status`); stop them first"])
    console.print(f"[yellow]--restart:[/] discarding {comp_dir}")
    for entry in comp_dir.iterdir():
        if entry.name == LOCK:  # this process holds it
            continue
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _check_registration(comp_dir: Path, reg: Registered, overrides: list[str], restart: bool,
                        console: Console) -> dict[str, Any]:
    """Bind the comparison directory to this registration, or refuse. Returns the stamp in force."""
    stamp_path = ComparisonFiles(comp_dir).registration
    new = _stamp(reg, overrides)
    if comp_dir.exists() and restart:
        _discard(comp_dir, reg.spec.name, console)
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
    if comp_dir.exists() and any(e.name not in (LOCK, DESIGN) for e in comp_dir.iterdir()):
        raise ComparisonError([f"{comp_dir} holds files but no {STAMP_NAME}: it is not a comparison this "
                               "tool started; pass --restart to discard it, or choose another --root"])
    comp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp_path, json.dumps(new, indent=2) + "\n")
    return new


def check_same_code(plan: ComparisonPlan, code: fingerprint.Fingerprint) -> None:
    """Refuse to add runs computed by other code than the comparison's runs so far (issue 22): every pair
    that ever started records the fingerprint of the code it ran on (dormouse/ab/pairjob.py)."""
    differing: dict[str, tuple[str, list[str]]] = {}  # pair -> (its commit, what differs)
    for pair in plan.all_pairs:
        if not pair.run_dir.exists():
            continue
        for rec in recorded_fingerprints(plan.comp_dir, pair.name) or [None]:
            old = fingerprint.Fingerprint.from_dict(rec) if rec else None
            if old is None:
                differing[pair.name] = ("unknown", ["it recorded no code fingerprint (no attempt record)"])
            elif old.sha256 != code.sha256:
                differing[pair.name] = (old.commit, [f"commit {old.commit} -> {code.commit}",
                                                     *fingerprint.differences(old, code)])
    if not differing:
        return
    names = list(differing)
    commit, what = differing[names[0]]
    raise ComparisonError([
        f"{plan.comp_dir}: {len(names)} pair(s) ({', '.join(names[:4])}{' …' if len(names) > 4 else ''}) were "
        f"computed by other code than this checkout (fingerprint {code.sha256[:12]}, commit {code.commit}); a "
        "comparison runs on one version of the code that computes it, so no run is added",
        f"what differs for {names[0]}: " + "; ".join(what),
        f"to continue, run it from the code those runs used (commit {commit}, e.g. `git worktree add /tmp/ab "
        f"{commit.split('+')[0]}`, with the same uncommitted edits if it was dirty); to start over on this "
        "code, pass --restart (it discards the comparison's runs)"])


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
    root: Path = AB_ROOT,
    console: Console | None = None,
    train_fn: TrainFn | None = None,
    registry: Path | None = None,
    launch: LaunchRequest | None = None,
) -> Path:
    """Run (or continue) registered comparison ``name`` look by look and write its results; returns the
    comparison dir.

    ``overrides`` are Hydra overrides applied to every run after the registered ones (they are part of the
    registration hash). ``registry`` is a directory of NAME.yaml files (default: the installed
    ``dormouse.conf/ab``). ``train_fn(cfg)`` defaults to :func:`dormouse.train.loop.train` (anything but an
    importable function needs the sequential launcher). ``launch`` says how the pairs run (default: one
    after another in this process).

    Raises :class:`ComparisonError` (with ``.lines``) for a bad registration, bad overrides, a changed
    registration, runs computed by other code, or a launch that cannot be honoured, and :class:`LockHeld`
    when another live process runs this comparison; all before any run. A failed pair does not raise: its
    arm is ``invalid`` in the report (and stays in the family) and the next invocation retries it. A stop by
    signal (Ctrl-C, SIGTERM) raises :class:`dormouse.errors.Interrupted` once the running pairs have
    checkpointed.
    """
    console = console or Console()
    launch = launch or LaunchRequest()
    plan = build_plan(name, overrides, root, registry)
    _refuse_protocol_1(plan.reg)
    design_problems(plan)
    try:
        launcher = make_launcher(launch, plan.all_pairs, plan.comp_dir, plan.name)
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    code = fingerprint.compute()
    with comparison_lock(plan.comp_dir) as lock:
        if lock.stale_message():
            console.print(f"[yellow]note:[/] {lock.stale_message()}")
        stamp = _check_registration(plan.comp_dir, plan.reg, plan.overrides, restart, console)
        check_same_code(plan, code)
        for line in finish_complete_runs(plan.all_pairs, plan.comp_dir):  # issue 31: a finished run is kept
            console.print(f"[yellow]note:[/] {line}")
        card = ensure_design_card(plan, console)
        errors = _run_looks(plan, launcher, train_fn or _default_train_fn(), code.sha256, console)
        state = progress(plan, lambda p: read_pair(p, errors.get(p.name)), failed=set(errors))
        if state.tune is not None:
            tune.record(plan, state.tune)
        stamp_public = {k: v for k, v in stamp.items() if k != "registered"}
        results, records = analyze(plan, state, lambda p: read_pair(p, errors.get(p.name)),
                                   registration=stamp_public, design_card=card)
        used = [p for p in plan.pairs if p.replicate <= state.used.get(p.arm, 0)]
        results["launch"] = {"this_invocation": launcher.settings(),
                             "pairs": {p.name: _pair_launch(plan.comp_dir, p.name) for p in used}}
        write_outputs(plan.comp_dir, results, records)
    console.print(verdict_table(results))
    console.print(f"report: {plan.files.report}")
    return plan.comp_dir


def _run_looks(plan: ComparisonPlan, launcher: Launcher, train_fn: TrainFn, code: str,
               console: Console) -> dict[str, str]:
    """Run the pairs each look needs until every arm is decided or the maximum is reached (a look's
    decisions come from :func:`dormouse.ab.looks.progress`, replayed from disk after every batch, so a
    resumed comparison continues its schedule). Returns this invocation's failed pairs: name -> why."""
    errors: dict[str, str] = {}
    while True:
        state = progress(plan, lambda p: read_pair(p, errors.get(p.name)), failed=set(errors))
        if state.tune is not None:
            tune.record(plan, state.tune)  # the choice, once made, before any confirmatory pair runs
        if state.finished:
            return errors
        index, todo = int(state.next_look or 0), state.pending
        arms = list(dict.fromkeys(p.arm for p in todo))
        if plan.lr_pending and any(p in plan.pairs for p in todo):  # a confirmatory pair at an unchosen lr
            raise ComparisonError([f"ab {plan.name}: confirmatory pairs scheduled before the tune stage chose"])
        for pair in todo:
            st, why = pair_state(pair)
            if st in ("resume", "restart"):
                console.print(f"[cyan]{pair.name}[/]: {why}")
        workers = not isinstance(launcher, InProcessLauncher)
        tasks = [Job(p.name, run_pair, (PairTask(p, plan.comp_dir, train_fn, launcher.name, output_to_file=workers,
                                                 fingerprint=code),)) for p in todo]
        stage = (f"the tune stage (arms {', '.join(arms)} × lrs {', '.join(f'{x:g}' for x in plan.spec.tune.lrs)})"
                 if plan.lr_pending else f"look {index + 1} of {len(plan.looks)} ({plan.looks[index]} replicates "
                 f"per arm; arms {', '.join(arms)})")
        console.print(f"ab {plan.name}: {stage}: {len(tasks)} pairs to run ({_launch_lines(launcher)})"
                      + (f"; workers' output in {plan.comp_dir / LAUNCH}" if workers else ""))
        with PairBoard(plan.name, todo, console) as board:
            outcomes = launcher.run(tasks, board.start, board.finish)
        errors.update({o.key: o.note for o in outcomes if o.status != DONE})
        if launcher.stopped_by is not None:
            console.print(f"[yellow]interrupted[/]: rerun `dormouse ab {plan.name}` with the same overrides "
                          "to continue (finished pairs are kept, interrupted ones resume from their checkpoints)")
            raise Interrupted(launcher.stopped_by, "the comparison was interrupted")
        for pair in todo:  # never loop on a pair that came back done but is not complete on disk
            if pair.name not in errors and pair_state(pair)[0] != "complete":
                errors[pair.name] = "the launcher returned without the pair's final eval"


def design_problems(plan: ComparisonPlan) -> None:
    """The registered design must be one the sequential rule accepts (dormouse.ab.sequential)."""
    problems = plan.design().problems()
    if problems:
        raise ComparisonError([f"{plan.reg.source}: the registered design: {p}" for p in problems])


def design_card_for(plan: ComparisonPlan) -> Any:
    """The design card of the registered design, simulated from the registered pilot spread."""
    from dormouse.ab.sequential import design_card

    spec = plan.spec
    return design_card(plan.design(), float(spec.pilot_sd), float(spec.expected_effect))


def ensure_design_card(plan: ComparisonPlan, console: Console) -> dict[str, Any]:
    """The comparison's saved design card (``design.json``) for this registration, computed and saved if
    missing or made for another registration. Returns ``{"registration_hash", "card", "text"}``."""
    path = plan.files.design
    want = registration_hash(plan.reg, plan.overrides)
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("registration_hash") == want:
            return saved
    console.print(f"ab {plan.name}: simulating the design card (the registered looks, arms and rule)")
    return save_design_card(plan, design_card_for(plan))


def save_design_card(plan: ComparisonPlan, card: Any) -> dict[str, Any]:
    saved = {"registration_hash": registration_hash(plan.reg, plan.overrides), "card": card.to_dict(),
             "text": card.to_text()}
    plan.comp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(plan.files.design, json.dumps(saved, indent=2, allow_nan=False) + "\n")
    return saved


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
    """``--plan``: compose and check everything a run would, print the plan and its looks, write nothing."""
    plan = build_plan(name, overrides, root, registry)
    if plan.reg.protocol == PROTOCOL:
        design_problems(plan)
    try:
        settings = _launch_settings(launch, plan.pairs)
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    render_plan(plan, launch=settings,
                registration=_registration_state(plan.comp_dir, plan.reg, plan.overrides), console=console)
    if plan.tune_pairs:
        outcome = tune.settle(plan, read_pair, set())
        console.print(tune_cost_line(plan), soft_wrap=True, highlight=False, markup=False)
        for line in tune.plan_lines(plan, outcome):
            console.print(line, soft_wrap=True, highlight=False, markup=False)


def design_command(name: str, overrides: list[str], *, root: Path, registry: Path | None,
                   console: Console) -> None:
    """``--design``: simulate the registered design, print its card and save it with the comparison (unless
    the comparison directory holds another registration's runs). Trains nothing."""
    plan = build_plan(name, overrides, root, registry)
    _refuse_protocol_1(plan.reg)
    design_problems(plan)
    card = design_card_for(plan)
    console.print(card.to_text(), soft_wrap=True, highlight=False, markup=False)
    if plan.tune_pairs:
        console.print(tune_cost_line(plan), soft_wrap=True, highlight=False, markup=False)
    stamp = plan.files.registration
    if stamp.is_file() and json.loads(stamp.read_text()).get("hash") != registration_hash(plan.reg, plan.overrides):
        console.print(f"not saved: {plan.comp_dir} holds a comparison started under another registration")
        return
    save_design_card(plan, card)
    console.print(f"saved: {plan.files.design} (the report shows it)")


def tune_cost_line(plan: ComparisonPlan) -> str:
    """What the tune stage adds to the card's cost (the card counts confirmatory replicates only)."""
    from dormouse.ab.status import pair_cost
    from dormouse.run.loglines import human

    costs = [pair_cost(p.cfg) for p in plan.tune_pairs]
    confirmatory = [pair_cost(p.cfg) for p in plan.pairs]
    return (f"tune stage (runs first, not in the card above): {len(costs)} pairs ({len(plan.tuned_arms)} arms × "
            f"{len(plan.spec.tune.lrs)} lrs × {plan.spec.tune.replicates} replicate(s)), "
            f"{human(sum(c['tokens'] for c in costs))} tokens, {human(sum(c['flops'] for c in costs))} training "
            f"FLOPs; the confirmatory pairs at the maximum: {len(confirmatory)} pairs, "
            f"{human(sum(c['flops'] for c in confirmatory))} FLOPs")


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
    """``--status``: where a comparison stands, pair by pair and look by look (read-only; safe while it
    runs). Exit 0; 2 if never started."""
    reg = load_spec_for_status(name, registry)
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
    plan = build_plan(reg, list(stamp.get("overrides", [])), root)
    status = comparison_status(plan)
    render_status(plan, status, console)
    if plan.reg.protocol == PROTOCOL:
        failed = {r["pair"] for r in status["pairs"] if r["state"] == "failed"}
        state = progress(plan, read_pair, failed=failed)
        for line in tune.plan_lines(plan, state.tune):
            console.print(line, soft_wrap=True, highlight=False, markup=False)
        render_looks(plan, state, console)
    return 0


def load_spec_for_status(name: str, registry: Path | None) -> Registered:
    from dormouse.ab.registry import load_spec

    return load_spec(name, registry)


def verdict_table(results: dict[str, Any]) -> Table:
    """The verdicts as a rich table (the report's first table, abridged), each with its sentence."""
    table = Table(title=f"ab {results['name']}: SESOI ±{results['sesoi']:g} bpb, α {results['alpha']:g} over "
                  f"{results['n_arms']} arm(s), looks {results['looks']}", title_justify="left")
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


_VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "tie": "yellow", "invalid": "bold red",
                  "undecided": "yellow", "baseline": "dim", "aa": "dim"}


def _default_train_fn() -> TrainFn:
    from dormouse.train.loop import train

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
    root: Path = AB_ROOT,
    console: Console | None = None,
    err_console: Console | None = None,
    train_fn: TrainFn | None = None,
    registry: Path | None = None,
    launch: LaunchRequest | None = None,
    plan: bool = False,
    status: bool = False,
    design: bool = False,
) -> int:
    """The whole CLI command: returns the exit code. 0 = every pair the schedule needed finished (whatever
    the verdicts); 1 = some pair failed (the report says which; rerun to retry); 2 = refused before any run
    (a bad request, runs computed by other code, or another live process holds the comparison); 130/143 =
    interrupted (Ctrl-C / SIGTERM; rerun to resume). ``plan`` and ``status`` only read (exit 0; ``status``
    exits 2 if never started); ``design`` prints the design card and saves it (exit 0)."""
    # In a file or a pipe rich assumes 80 columns and would wrap every table cell: give it room.
    console = console or Console(width=None if sys.stdout.isatty() else 200)
    err = err_console or Console(stderr=True, highlight=False)
    launch = launch or LaunchRequest()
    try:
        if sum((plan, status, design)) > 1:
            raise ComparisonError(["--plan, --status and --design are different questions: ask one at a time"])
        if design:
            design_command(name, overrides, root=root, registry=registry, console=console)
            return 0
        if status:
            return status_command(name, root=root, registry=registry, console=console)
        if plan:
            plan_command(name, overrides, root=root, registry=registry, launch=launch, console=console)
            return 0
        comp_dir = run_comparison(name, overrides, restart=restart, root=root, console=console,
                                  train_fn=train_fn, registry=registry, launch=launch)
    except (ComparisonError, ConfigError, LaunchError) as exc:
        for line in exc.lines:
            print_error(err, line)
        return 2
    except LockHeld as exc:
        print_error(err, str(exc))
        return 2
    except Interrupted as exc:
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    results = json.loads(ComparisonFiles(comp_dir).results.read_text())
    return 0 if results["complete"] else 1
