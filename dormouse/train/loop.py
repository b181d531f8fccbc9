"""The training loop, short and explicit in the spirit of nanoGPT: per step, depth and batch from (seed, step),
forward, mean cross-entropy over the readouts, backward, clip, AdamW with warmup + cosine; on the eval cadence
the fixed eval set at every depth, one row to the :class:`~dormouse.train.metrics.Metrics` sinks. All per-step
state is one :class:`~dormouse.train.state.LoopState` in the checkpoint, so a CPU resume is bit-identical."""

from __future__ import annotations

import json
import math
import os
import secrets
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from dormouse.arms.probes import learned_values
from dormouse.config.eval_schedule import is_eval_step
from dormouse.config.schema import arm_name
from dormouse.data import bits_per_byte, keyed_seed
from dormouse.errors import Interrupted, RunDirRefused, StartRefused, TrainError
from dormouse.model.looped import LoopedByteLM
from dormouse.run.checkpoint import (
    CheckpointError,
    atomic_save,
    atomic_write_text,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from dormouse.run.files import LOG, METRICS, RunFiles
from dormouse.run.loglines import (
    WINDOW_COLUMNS,
    format_done_line,
    format_header,
    format_interrupted_line,
    format_metrics_row,
    format_params,
    format_repair_line,
    format_resume_line,
    read_metrics,
)
from dormouse.train.batches import ByteCorpus, eval_windows, load_corpus, train_batch
from dormouse.train.device import autocast_context, compute_dtype, resolve_device
from dormouse.train.dist_info import DistInfo, dist_info_from_env
from dormouse.train.distributed import (
    barrier,
    broadcast_flag,
    broadcast_object,
    init_distributed,
    shutdown_distributed,
)
from dormouse.train.metrics import (
    JsonlSink,
    Metrics,
    TerminalSink,
    TrainLogSink,
    WandbSink,
    cut_torn_tail,
    settle_metrics,
    wandb_dir,
)
from dormouse.train.preflight import WANDB_REFUSAL, KernelChoice, check_environment, config_warnings, start_refusals
from dormouse.train.progress_line import PlainProgress
from dormouse.train.schedule import lr_at
from dormouse.train.start import (
    DISK_FULL,
    default_run_name,
    hold_run,
    prepare_run_dir,
    provenance,
    resume_command,
    write_failure,
)
from dormouse.train.state import LOOP_KEY, LoopState, WindowTotals, loop_part
from dormouse.train.step_notice import first_step_line, memory_warning


@dataclass
class TrainResult:
    run_dir: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # this process's per-step training losses
    wall_s: float = 0.0
    params: int = 0
    arm_params: int = 0
    peak_mem_bytes: int = 0
    kernel: str = "none"  # the AttnRes read path that ran: torch | triton | none (another arm)
    device: str = "cpu"


def depth_for_step(seed: int, step: int, max_iter: int, random_depth: bool) -> int:
    """Random depth k ~ U{1..max_iter} from a generator keyed on (seed, step); else max_iter."""
    if not random_depth:
        return max_iter
    gen = torch.Generator().manual_seed(keyed_seed("dormouse.depth", seed, step))
    return int(torch.randint(1, max_iter + 1, (1,), generator=gen).item())


def readout_loss(logits: list[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats/byte) over the given readouts."""
    losses = [F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), targets.reshape(-1)) for lg in logits]
    return torch.stack(losses).mean()


@torch.no_grad()
def evaluate(model: LoopedByteLM, x: torch.Tensor, y: torch.Tensor, batch_size: int,
             device: torch.device, autocast: Any) -> dict[str, float]:
    """bpb at every depth 1..max_iter over the whole fixed eval set (every target byte once)."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(model.max_iter, dtype=torch.float64)
    count = 0
    with model.counters.paused():
        for i in range(0, x.shape[0], batch_size):
            xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
            with autocast():
                logits = model(xb)
            for k, lg in enumerate(logits):
                ce = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), yb.reshape(-1), reduction="sum")
                totals[k] += ce.double().cpu()
            count += yb.numel()
    model.train(was_training)
    out = {f"bpb@{k + 1}": bits_per_byte(float(totals[k]) / count) for k in range(model.max_iter)}
    out["bpb"] = out[f"bpb@{model.max_iter}"]
    return out


# SIGUSR2 is a cluster's "preempted, or near the time limit" (SLURM's --signal, submitit's default): the same
# graceful stop, so a cluster job requeues from a checkpoint at the step it reached (dormouse/ab/launchers/cluster.py).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR2") if hasattr(signal, name))


class _SignalFlag:
    """SIGINT/SIGTERM/SIGUSR2 set a flag; the loop checkpoints after the step and exits 128 + signal."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalFlag:
        if hasattr(signal, "SIGTERM") and _in_main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class _Progress:
    """A rich bar on a terminal, a plain line now and then off one, nothing with ``logging.progress=off``."""

    def __init__(self, mode: str, total: int, start: int, enabled: bool) -> None:
        self.bar = None
        self.plain = PlainProgress(total, start) if enabled and mode == "auto" and not sys.stdout.isatty() else None
        if enabled and (mode == "on" or (mode == "auto" and sys.stdout.isatty())):
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("step {task.completed}/{task.total}"), BarColumn(),
                                TextColumn("{task.fields[info]}"), TimeRemainingColumn())
            self.bar.start()
            self.task = self.bar.add_task("train", total=total, completed=start, info="")

    def update(self, step: int, loss: float, tok_s: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=step, info=f"loss {loss:.3f} {tok_s:,.0f} tok/s")
        elif self.plain is not None and (line := self.plain.line(step, loss, tok_s)) is not None:
            print(line, flush=True)

    def print(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _wandb_run(cfg: DictConfig, files: RunFiles, resumed: bool) -> WandbSink | None:
    """The wandb sink (or None); its id is kept in the run directory so a resume continues the wandb run."""
    mode = str(cfg.logging.wandb)
    if mode == "disabled":
        return None
    if mode == "online" and not os.environ.get("WANDB_API_KEY") and not (Path.home() / ".netrc").exists():
        raise TrainError(WANDB_REFUSAL)  # refused by train() before the run began; credentials gone since
    import wandb  # lazy: wandb is heavy and usually disabled

    run_id = files.wandb_id.read_text().strip() if resumed and files.wandb_id.exists() else ""
    if not run_id:
        run_id = secrets.token_hex(6)  # wandb ids are [a-z0-9]; 48 random bits never collide in a project
        atomic_write_text(files.wandb_id, run_id + "\n")
    lg = cfg.logging
    run = wandb.init(mode=mode, entity=lg.wandb_entity, project=lg.wandb_project, group=lg.wandb_group,
                     job_type=lg.wandb_job_type, tags=[str(tag) for tag in lg.wandb_tags],
                     name=str(cfg.run.name), dir=wandb_dir(files.dir), id=run_id, resume="allow",
                     config=OmegaConf.to_container(cfg, resolve=True), settings=wandb.Settings(silent=True))
    return WandbSink(run, image=wandb.Image)


def _run_config(cfg: DictConfig, run_name: str) -> DictConfig:
    """The config the run trains with and records: resolved, ``run.name`` filled in, struct mode."""
    container = OmegaConf.to_container(cfg, resolve=True)
    container["run"]["name"] = run_name
    out = OmegaConf.create(container)
    OmegaConf.set_struct(out, True)
    return out


def _report_kernel(cfg: DictConfig, kernel: KernelChoice, info: DistInfo) -> str:
    """The read path the preflight decided, with the reason when ``auto`` chose it."""
    if str(cfg.model.kernel) == "auto" and kernel.path != "none" and info.is_main:
        print(f"kernel: model.kernel=auto -> {kernel.path} ({kernel.why})", flush=True)
    return kernel.path


def train(cfg: DictConfig, *, stop_at_step: int | None = None) -> TrainResult:
    """Train per ``cfg`` (already validated). ``stop_at_step`` behaves like an interrupt there (tests)."""
    info = dist_info_from_env()
    device = resolve_device(str(cfg.train.device), info)
    # What the machine refuses (a missing file, no CUDA, a kernel the device cannot run), as `validate` does;
    # the kernel is decided there, once.
    environment = check_environment(cfg, device)
    if environment.problems or environment.kernel is None:
        raise StartRefused("; ".join(environment.problems))
    kernel = _report_kernel(cfg, environment.kernel, info)
    corpus = load_corpus(cfg.data)  # bad data fails here, before the model is built
    init_distributed(info, device)
    for line in config_warnings(cfg) if info.is_main else []:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    finished = False  # every rank returned from the loop: they can meet at a barrier before teardown
    try:
        # What `validate` refuses, `train` refuses before it creates anything (dormouse.train.preflight).
        refusals = broadcast_object(start_refusals(cfg, device, info.world_size) if info.is_main else None, info)
        if refusals:
            raise StartRefused("; ".join(refusals))
        name = str(cfg.run.name) if cfg.run.name is not None else default_run_name(cfg)
        # Every rank writes to the directory rank 0 named; one process at a time writes a run (its lock).
        run_cfg = _run_config(cfg, broadcast_object(name, info))
        try:
            with hold_run(run_cfg, info):
                result = _train(run_cfg, corpus, device, kernel, info, stop_at_step)
                finished = True
            return result
        except OSError as exc:  # a write failed (a full disk): one line, true about what hold_run left
            raise write_failure(exc, run_cfg) from exc
        except CheckpointError as exc:  # a checkpoint's write on a full disk: the same line
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in DISK_FULL:
                raise write_failure(cause, run_cfg) from exc
            raise
    finally:
        shutdown_distributed(info, barrier=finished)


@dataclass
class _Run:
    """What stays fixed from a run's first step to its last; the changing state is a :class:`LoopState`."""

    cfg: DictConfig
    info: DistInfo
    device: torch.device
    kernel: str
    corpus: ByteCorpus
    files: RunFiles
    model: LoopedByteLM
    train_model: torch.nn.Module  # the model, or its DDP wrapper
    optimizer: torch.optim.Optimizer
    counts: dict[str, int]
    data_seed: int
    eval_set: tuple[torch.Tensor, torch.Tensor]  # the fixed eval windows (inputs, targets)
    progress: _Progress | None = None  # while the loop runs
    metrics: Metrics = field(default_factory=Metrics)  # the eval rows and their sinks (rank 0 writes)
    start_time: float = 0.0

    def autocast(self) -> Any:
        """The compute dtype ``train.dtype`` names on this device (:func:`compute_dtype`)."""
        return autocast_context(compute_dtype(str(self.cfg.train.dtype), self.device), self.device)

    @property
    def dtype(self) -> str:
        return compute_dtype(str(self.cfg.train.dtype), self.device)

    def show(self, line: str) -> None:
        """Print ``line`` on the terminal, above the progress bar when there is one."""
        if self.progress is not None:
            self.progress.print(line)
        else:
            print(line, flush=True)

    def append_log(self, line: str) -> None:
        """Append one line to train.log (rank 0 only); the eval lines go through the metrics sinks."""
        with self.files.log.open("a") as f:
            f.write(line + "\n")

    def nonfinite_error(self, what: str, step: int, fix: str) -> TrainError:
        last = list_checkpoints(self.files.checkpoints)
        return TrainError(f"non-finite {what} at step {step}; last good checkpoint: "
                          f"{last[-1] if last else 'none'}; {fix}", diverged=True)

    def result(self, loop: LoopState, losses: list[float], wall_s: float) -> TrainResult:
        return TrainResult(self.files.dir, self.metrics.rows, losses, wall_s, **self.counts,
                           peak_mem_bytes=peak_memory(self.device), kernel=self.kernel, device=str(self.device))


def _train(cfg: DictConfig, corpus: ByteCorpus, device: torch.device, kernel: str, info: DistInfo,
           stop_at_step: int | None) -> TrainResult:
    t = cfg.train
    if device.type == "cuda":  # runs of an A/B run share a process: each reports its own peak
        torch.cuda.reset_peak_memory_stats(device)
    model = LoopedByteLM(cfg.model, seed=int(t.seed), kernel=kernel).to(device)
    optimizer = torch.optim.AdamW(model.param_groups(float(t.weight_decay)), lr=float(t.lr),
                                  betas=(float(t.beta1), float(t.beta2)), fused=device.type == "cuda")
    eval_set = eval_windows(corpus.val, seq_len=int(cfg.data.seq_len), eval_bytes=cfg.data.eval_bytes)
    run = _Run(cfg, info, device, kernel, corpus, RunFiles(Path(cfg.run.dir) / str(cfg.run.name)), model,
               model, optimizer, model.param_counts(), int(t.seed if t.data_seed is None else t.data_seed),
               eval_set)
    state, source = _resume_point(run)
    loop = LoopState()
    model.counters.to(device).reset()  # the counters live beside the model: in-graph adds, read at eval lines
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loop.load_state_dict(loop_part(state), model.counters, carries_sums=info.is_main)
        if loop.step >= t.steps:  # nothing left to train
            if info.is_main and final_row_lost(run, loop, source):
                return rebuild_final_row(run, loop, source)
            if info.is_main:  # report, write nothing
                print(f"run {run.files.dir} is already complete at step {loop.step} (train.steps={t.steps}); "
                      "nothing to resume", flush=True)
            return TrainResult(run.files.dir, _history(run, loop.step, source), [], 0.0, **run.counts,
                               kernel=kernel, device=str(device))
    if t.compile:  # the training forward compiled (train.compile_scope); eval stays eager
        run.train_model = model.compile_regions() if t.compile_scope == "regional" else model.compile_whole()
    if info.enabled:
        # Every parameter gets a gradient at every depth and readout choice: the per-slot arm parameters
        # are rows of one tensor each, so DDP's unused-parameter search is not needed.
        run.train_model = torch.nn.parallel.DistributedDataParallel(
            run.train_model, device_ids=[device.index] if device.type == "cuda" else None)
    if info.is_main:
        _open_run_dir(run, loop, source)
        warning = memory_warning(cfg, device, info.world_size)
        if warning is not None:
            print(f"warning: {warning}", file=sys.stderr, flush=True)
    return _loop(run, loop, stop_at_step)


def _resume_point(run: _Run) -> tuple[dict[str, Any] | None, Path | None]:
    """The checkpoint to resume from, if any; rank 0 decides for every rank."""
    state, source, refusal = None, None, None
    if run.info.is_main:
        try:
            _, state, source = prepare_run_dir(run.cfg)
        except (TrainError, CheckpointError) as exc:
            if not run.info.enabled:
                raise
            refusal = str(exc)
    if run.info.enabled:
        refusal, chosen = broadcast_object((refusal, None if source is None else str(source)), run.info)
        if refusal is not None:
            raise RunDirRefused(refusal)
        if not run.info.is_main and chosen is not None:
            source, state = Path(chosen), load_checkpoint(Path(chosen))
    return state, source


def _open_run_dir(run: _Run, loop: LoopState, resumed_from: Path | None, *, atomic_rows: bool = False) -> None:
    """Rank 0: write config.yaml and provenance.json, start or continue train.log; a resume first settles the
    append-only files, logging each ``repair``. ``atomic_rows``: each row rewrites metrics.jsonl whole."""
    files, cfg = run.files, run.cfg
    try:
        files.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(files.config, OmegaConf.to_yaml(cfg))
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise  # not a bad run.dir: train() says it in one line
        raise RunDirRefused(f"cannot write the run directory {files.dir}: {exc.strerror or exc}; choose a "
                            "writable run.dir") from exc
    prov = provenance(cfg, run.device, run.dtype, run.kernel, run.corpus, run.counts, run.info)
    atomic_write_text(files.provenance, json.dumps(prov, indent=2) + "\n")
    repairs = []
    if resumed_from is not None:
        if torn := cut_torn_tail(files.log):
            repairs.append(format_repair_line(LOG, torn))
        settled = settle_metrics(files.metrics, loop.step)
        if settled.changed:
            repairs.append(format_repair_line(METRICS, settled.torn_bytes, settled.dropped_rows))
    with files.log.open("a") as log:
        if resumed_from is None or not files.log.stat().st_size:
            log.write("\n".join(format_header(prov)) + "\n")
        if resumed_from is not None:
            log.write("".join(line + "\n" for line in [format_resume_line(loop.step, resumed_from), *repairs]))
    history = _history(run, loop.step, resumed_from) if resumed_from is not None else []
    if resumed_from is not None and not files.metrics.exists():  # resumed into a new directory: carry the history
        atomic_write_text(files.metrics, "".join(format_metrics_row(row) for row in history))
    # Printed on a terminal and in a pipe alike: before the first eval line this is all there is to read.
    print(f"run {files.dir}  arm={arm_name(cfg)} {format_params(run.counts)} device={run.device} kernel={run.kernel} "
          f"steps={cfg.train.steps} eval_every={cfg.train.eval_every}"
          + (f"  (resumed at step {loop.step} from {resumed_from})" if resumed_from else ""), flush=True)
    wandb = _wandb_run(cfg, files, resumed=resumed_from is not None)
    run.metrics = Metrics([TerminalSink(run.show), TrainLogSink(files.log), JsonlSink(files.metrics, atomic_rows),
                           *([wandb] if wandb is not None else [])], history)


def _history(run: _Run, step: int, source: Path | None) -> list[dict[str, Any]]:
    """The metrics rows up to ``step`` of the run the resumed checkpoint belongs to."""
    path = run.files.metrics
    owner = RunFiles.of_checkpoint(source) if source is not None else None
    if not path.exists() and owner is not None:
        path = owner.metrics
    return [row for row in read_metrics(path) if int(row["step"]) <= step]


def final_row_lost(run: _Run, loop: LoopState, source: Path | None) -> bool:
    """A run resumed at its last step whose metrics.jsonl lacks that step's row (its last line torn or cut off
    after the final checkpoint was written)."""
    return loop.step == run.cfg.train.steps and all(int(row["step"]) != loop.step
                                                     for row in _history(run, loop.step, source))


def rebuild_final_row(run: _Run, loop: LoopState, source: Path | None) -> TrainResult:
    """Rank 0: write a finished run's lost final row again from its final checkpoint, as a resume settles the files
    first (the torn line cut, a ``repair`` logged); then the done line, so the run reads finished."""
    measured = loop.last_eval
    if measured is None:
        raise RunDirRefused(f"cannot rebuild the final eval row of step {loop.step} missing from {run.files.metrics}: "
                            f"{source} does not hold that eval's training-window fields (loss, counters, cost); its "
                            f"train.log eval line shows them rounded; to train the run again, pass "
                            "train.overwrite=true train.resume=never")
    print(f"run {run.files.dir}: metrics.jsonl lacks its final eval row (step {loop.step}); re-evaluating {source}",
          flush=True)
    _open_run_dir(run, loop, source, atomic_rows=True)
    # Recomputed from the checkpoint: bpb, bpb@k and the learned probes (its weights on the fixed eval set, in the
    # same batches on the same device and threads: the same floats summed in the same order, the same bits), and
    # step, tokens, skipped, lr, arm, kernel, params (its loop state and config). The window's means and counters
    # (loss, depth, tok/s, <arm>_ran/_asked, window_steps, depth_sum) and the cost (time_s, peak_mem_bytes) were
    # measured while training, so they come from the checkpoint's record of that eval: the row is the original's.
    row = _metrics_row(run, loop, WindowTotals(0.0, run.model.counters.snapshot()))
    row.update(measured)  # the row's own keys: each keeps its place
    run.metrics.log(row)
    wall = float(measured["time_s"])  # the done line's wall_s, as dormouse ab's job writes a missing one
    _end_run(run, loop.step, wall)
    return run.result(loop, [], wall)


def _end_run(run: _Run, step: int, wall: float) -> None:
    """Rank 0: the done line, the arm's plots from the final row, the sinks closed."""
    run.append_log(format_done_line(step, wall))
    # What the arm learned, drawn from the final eval's probes (matplotlib: imported on rank 0 only).
    from dormouse.arms.plots import write_probe_plots

    run.metrics.images(write_probe_plots(run.files.dir, run.metrics.rows[-1],
                                         label=f"{run.cfg.run.name}, step {step}"), step)
    run.metrics.close()


def _loop(run: _Run, loop: LoopState, stop_at_step: int | None) -> TrainResult:
    """Step until ``train.steps``, evaluating and checkpointing on cadence and at the end; a signal stops it."""
    t, info = run.cfg.train, run.info
    losses: list[float] = []
    run.start_time = time.time()
    run.progress = _Progress(str(run.cfg.logging.progress), int(t.steps), loop.step, info.is_main)
    try:
        with _SignalFlag() as signals:
            while loop.step < t.steps:
                # a compiled run's first step is mostly compilation: its pace is said after the second
                first = time.perf_counter() if len(losses) < (2 if t.compile else 1) else None
                loss = train_step(run, loop)
                if first is not None and info.is_main:  # a step that cannot fit in time is not silent
                    run.show(first_step_line(time.perf_counter() - first, loop.step, t.eval_every,
                                             int(t.steps), compiling=bool(t.compile) and not losses,
                                             label="second step" if losses else "first step"))
                losses.append(loss)
                run.progress.update(loop.step, loss, loop.window.tokens / max(loop.window.time, 1e-9))
                run.metrics.train_loss(loop.step, loss)
                last_step = loop.step == t.steps
                if last_step or is_eval_step(loop.step, t.eval_every):
                    eval_and_log(run, loop)
                    if t.keep_best:
                        write_best_checkpoint(run, loop)
                asked_to_stop = signals.signum is not None or (stop_at_step is not None and loop.step >= stop_at_step)
                stopping = broadcast_flag(asked_to_stop, info, run.device) and not last_step
                if last_step or stopping or (t.ckpt_every and loop.step % t.ckpt_every == 0):
                    checkpoint = write_checkpoint(run, loop)
                if stopping:
                    return _stop(run, loop, losses, checkpoint, signals.signum)
    finally:
        run.progress.close()
    wall = time.time() - run.start_time
    if info.is_main:
        _end_run(run, loop.step, wall)
    barrier(info)
    return run.result(loop, losses, wall)


def train_step(run: _Run, loop: LoopState) -> float:
    """One training step; returns this rank's loss. A non-finite loss stops or skips (``train.nonfinite``)."""
    cfg, t, info = run.cfg, run.cfg.train, run.info
    t0 = time.perf_counter()
    depth = depth_for_step(int(t.seed), loop.step, run.model.max_iter, bool(cfg.model.random_depth))
    x, y = train_batch(run.corpus.train, seq_len=int(cfg.data.seq_len), batch_size=int(t.batch_size),
                       seed=run.data_seed, step=loop.step, rank=info.rank, world_size=info.world_size)
    x, y = x.to(run.device), y.to(run.device)
    for group in run.optimizer.param_groups:  # µP scales some groups' rates (model.param_groups); 1 otherwise
        group["lr"] = lr_at(loop.step, cfg) * group.get("lr_scale", 1.0)
    accum = int(t.grad_accum)
    loss_value = accumulate_gradients(run.train_model, x, y, depth=depth, readouts=str(t.readout),
                                      accum=accum, autocast=run.autocast,
                                      nonfinite=lambda v: broadcast_flag(not math.isfinite(v), info, run.device))
    loop.window.add_forward(depth, passes=accum)
    what = "loss" if not math.isfinite(loss_value) else None
    if what is None:
        # A finite loss can still give an inf/NaN gradient that would poison the weights; the gradients
        # are all-reduced, so every rank sees the same norm.
        grad_norm = torch.nn.utils.clip_grad_norm_(
            run.model.parameters(), float(t.grad_clip) if t.grad_clip > 0 else math.inf)
        what = None if math.isfinite(float(grad_norm)) else "gradient norm"
    if what is not None and t.nonfinite == "stop":
        raise run.nonfinite_error(f"{what} (loss {loss_value})", loop.step,
                                  "lower train.lr or set train.nonfinite=skip to skip such batches")
    if what is None:
        run.optimizer.step()
        loop.window.add_update(loss_value, depth)
    else:
        loop.skipped += 1
    run.optimizer.zero_grad(set_to_none=True)
    loop.step += 1
    loop.tokens += x.numel() * info.world_size
    loop.window.tokens += x.numel() * info.world_size
    loop.window.time += time.perf_counter() - t0
    return loss_value


def accumulate_gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, depth: int, readouts: str,
                         accum: int, autocast: Any, nonfinite: Any = None) -> float:
    """Forward and backward ``x, y`` as ``accum`` micro-batches, each loss scaled by ``1/accum`` so the summed gradients
    are the full batch's; returns the loss. DDP all-reduces once, on the last micro-batch."""
    is_bad = nonfinite or (lambda v: not math.isfinite(v))
    total = 0.0
    for i, (xb, yb) in enumerate(zip(x.chunk(accum), y.chunk(accum), strict=True)):
        sync = i == accum - 1 or not hasattr(model, "no_sync")
        with nullcontext() if sync else model.no_sync(), autocast():
            logits = model(xb, depth=depth, readouts=readouts)
        loss = readout_loss(logits, yb) / accum
        value = float(loss.detach())
        if is_bad(value):
            return value * accum
        with nullcontext() if sync else model.no_sync():
            loss.backward()
        total += value
    return total


def eval_and_log(run: _Run, loop: LoopState) -> None:
    """Close the eval window: evaluate at every depth, hand the row to the sinks, open a new window."""
    totals = loop.window.summed(run.model.counters, run.info, run.device)
    bad_eval = False
    if run.info.is_main:
        row = _metrics_row(run, loop, totals)
        run.metrics.log(row)
        loop.last_eval = {key: row[key] for key in (*MEASURED, *totals.counters)}
        bad_eval = not math.isfinite(row["bpb"])
    run.model.counters.reset()
    loop.window.reset()
    if broadcast_flag(bad_eval, run.info, run.device) and run.cfg.train.nonfinite == "stop":
        raise run.nonfinite_error("eval bpb", loop.step, "lower train.lr")


# An eval row's fields measured while training, not recomputable from a checkpoint: the window's means, what
# the schedule asked, and the cost (with the counters, LoopState.last_eval).
MEASURED = ("loss", "tok/s", "depth", "time_s", "peak_mem_bytes", *WINDOW_COLUMNS)


def _metrics_row(run: _Run, loop: LoopState, totals: WindowTotals) -> dict[str, Any]:
    """One metrics.jsonl row: the window's means, the eval set's bpb at every depth, the counters, the cost."""
    window, world = loop.window, run.info.world_size
    # A window whose every step was skipped has no loss and no depth: NaN, not 0.
    row: dict[str, Any] = {"step": loop.step, "tokens": loop.tokens,
                           "loss": totals.loss_sum / world / window.steps if window.steps else float("nan")}
    row.update(evaluate(run.model, *run.eval_set, int(run.cfg.train.batch_size), run.device, run.autocast))
    row.update({"lr": lr_at(max(0, loop.step - 1), run.cfg),
                "tok/s": window.tokens / max(window.time, 1e-9),
                "depth": window.depth_sum / window.steps if window.steps else float("nan"),
                "arm": arm_name(run.cfg)})
    row.update(totals.counters)
    # What the arm learned, on the same fixed eval set (no randomness); its one-number summary goes on the
    # eval line, the per-slot / per-read values into metrics.jsonl.
    learned = learned_values(run.model, run.eval_set[0], int(run.cfg.train.batch_size))
    row["learned_name"], row["learned"] = learned.summary()
    row.update({"kernel": run.kernel, "skipped": loop.skipped, "time_s": time.time() - run.start_time,
                "peak_mem_bytes": peak_memory(run.device), "params": run.counts["params"],
                # the schedule's side of the counter check: every rank drew the same depths
                "window_steps": window.forwards, "depth_sum": window.forward_depth_sum * world})
    row.update(learned.to_row())
    return row


def _checkpoint_state(run: _Run, loop: LoopState) -> dict[str, Any] | None:
    """Model, optimizer, loop state and config; a collective (rank 0 gets it, others None)."""
    totals = loop.window.summed(run.model.counters, run.info, run.device)
    if not run.info.is_main:
        return None
    # The loop's state under one key (dormouse.train.state: the layout); the metrics rows are metrics.jsonl's.
    return {"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
            LOOP_KEY: loop.state_dict(totals), "config": OmegaConf.to_container(run.cfg, resolve=True)}


def write_checkpoint(run: _Run, loop: LoopState) -> Path | None:
    """Save the step's checkpoint (a collective; rank 0 writes and returns the path)."""
    state = _checkpoint_state(run, loop)
    if state is None:
        return None
    return save_checkpoint(state, run.files.checkpoints, loop.step, int(run.cfg.train.keep_ckpts))


def write_best_checkpoint(run: _Run, loop: LoopState) -> None:
    """``train.keep_best``: write ``checkpoints/best.pt`` when this eval beats every earlier one; for reading only, as
    a verdict reads final evals (a best-of-many look is biased)."""
    state = _checkpoint_state(run, loop)
    if state is None:
        return
    *earlier, row = run.metrics.rows
    if math.isfinite(row["bpb"]) and all(row["bpb"] < float(r["bpb"]) for r in earlier):
        atomic_save(state, run.files.best_checkpoint)


def _stop(run: _Run, loop: LoopState, losses: list[float], checkpoint: Path | None,
          signum: int | None) -> TrainResult:
    """An interrupt, after its checkpoint: say how to resume; ``stop_at_step`` (tests) returns normally."""
    msg = f"interrupted at step {loop.step}; checkpoint {checkpoint}; resume with: {resume_command(run.cfg)}"
    if run.info.is_main:
        run.show(msg)
        run.append_log(format_interrupted_line(loop.step))
    if signum is None:
        return run.result(loop, losses, time.time() - run.start_time)
    raise Interrupted(128 + int(signum), msg)


def peak_memory(device: torch.device) -> int:
    """Peak allocated bytes on CUDA; the process's max RSS on CPU (a coarser, still comparable figure)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError):
        return 0


__all__ = ["TrainError", "TrainResult", "Interrupted", "train", "lr_at", "depth_for_step", "evaluate",
           "CheckpointError"]
