"""The training loop: short and explicit, in the spirit of nanoGPT.

``train(cfg)`` does, in order: validate the data, build the model, prepare the run directory (or resume
it), then for each step: draw the depth and the batch (both pure functions of (seed, step), so a resumed
run and every arm of a comparison replay them), forward, mean cross-entropy over the readouts, backward,
clip, AdamW with warmup + cosine; every ``train.eval_every`` steps and at the end, evaluate the fixed eval
set at every depth and write the eval line (terminal + ``train.log``) and one ``metrics.jsonl`` row.

Nothing the loop needs to continue lives outside the checkpoint: the data order and depth sequence are
keyed on the step, the learning rate is a function of the step, and the open probe-counter window and
loss accumulators are saved with the model and optimizer. A resumed run is therefore bit-identical on CPU.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from dormouse.attnres import resolve_kernel
from dormouse.checkpoint import (
    CheckpointError,
    atomic_write_text,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from dormouse.config import arm_name
from dormouse.data import ByteCorpus, bits_per_byte, eval_windows, keyed_seed, load_corpus, train_batch
from dormouse.distributed import (
    DistInfo,
    all_reduce_sum,
    barrier,
    broadcast_flag,
    broadcast_object,
    dist_info_from_env,
    init_distributed,
    shutdown_distributed,
)
from dormouse.errors import Interrupted, TrainError
from dormouse.evalline import format_eval_line
from dormouse.model import LoopedByteLM
from dormouse.probes import PROBES
from dormouse.rundir import prepare_run_dir, provenance


@dataclass
class TrainResult:
    run_dir: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # this process's per-step training losses
    wall_s: float = 0.0
    params: int = 0
    arm_params: int = 0
    peak_mem_bytes: int = 0
    kernel: str = "torch"
    device: str = "cpu"


def resolve_device(requested: str, info: DistInfo) -> torch.device:
    """``auto`` = CUDA when present, else CPU. An impossible request was refused by validation."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and info.enabled:
        requested = f"cuda:{info.local_rank}"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise TrainError(f"train.device={requested!r} was asked for but CUDA is not available; use cpu")
    return torch.device(requested)


def lr_at(step: int, cfg: DictConfig) -> float:
    """Linear warmup over ``warmup`` steps, then cosine from lr to lr * min_lr_ratio at ``steps``."""
    t = cfg.train
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def depth_for_step(seed: int, step: int, max_iter: int, random_depth: bool) -> int:
    """Random depth k ~ U{1..max_iter} from a generator keyed on (seed, step); else max_iter."""
    if not random_depth:
        return max_iter
    gen = torch.Generator().manual_seed(keyed_seed("dormouse.depth", seed, step))
    return int(torch.randint(1, max_iter + 1, (1,), generator=gen).item())


def _auto_reason(kernel: str, device: torch.device, cfg: DictConfig) -> str:
    """Why ``model.kernel=auto`` took the path it took (the brief: an auto choice says which and why)."""
    if kernel == "triton":
        return "CUDA device and the fused Triton kernel is available"
    if cfg.model.attnres.query == "input":
        return "model.attnres.query=input gives per-token queries; the fused kernel reads with one [d] query"
    if device.type != "cuda":
        return f"device {device} is not CUDA"
    try:
        import dormouse_kernels

        return str(dormouse_kernels.triton_unavailable_reason(device))
    except ImportError as exc:
        return f"dormouse_kernels does not import: {exc}"


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
    with PROBES.paused():
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


class _SignalFlag:
    """SIGINT/SIGTERM set a flag; the loop finishes its step, checkpoints and exits 130/143."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalFlag:
        if hasattr(signal, "SIGTERM") and _in_main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
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
    """A rich progress bar on a terminal (step, loss, tok/s, ETA); nothing otherwise."""

    def __init__(self, mode: str, total: int, start: int, enabled: bool) -> None:
        self.bar = None
        if enabled and (mode == "on" or (mode == "auto" and sys.stdout.isatty())):
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("step {task.completed}/{task.total}"), BarColumn(),
                                TextColumn("{task.fields[info]}"), TimeRemainingColumn())
            self.bar.start()
            self.task = self.bar.add_task("train", total=total, completed=start, info="")

    def update(self, step: int, loss: float, tok_s: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=step, info=f"loss {loss:.3f} {tok_s:,.0f} tok/s")

    def print(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _wandb_run(cfg: DictConfig, run_dir: Path, enabled: bool) -> Any:
    mode = str(cfg.logging.wandb)
    if mode == "disabled" or not enabled:
        return None
    if mode == "online" and not os.environ.get("WANDB_API_KEY") and not (Path.home() / ".netrc").exists():
        raise TrainError("logging.wandb=online needs credentials (WANDB_API_KEY or `wandb login`); "
                         "use logging.wandb=offline to log locally")
    import wandb  # lazy: wandb is heavy and usually disabled

    return wandb.init(mode=mode, project=cfg.logging.wandb_project, group=cfg.logging.wandb_group,
                      job_type=cfg.logging.wandb_job_type, name=str(cfg.run.name), dir=str(run_dir),
                      config=OmegaConf.to_container(cfg, resolve=True), settings=wandb.Settings(silent=True))


def train(cfg: DictConfig, *, stop_at_step: int | None = None) -> TrainResult:
    """Train per ``cfg`` (already validated). ``stop_at_step`` behaves like an interrupt there (tests)."""
    info = dist_info_from_env()
    device = resolve_device(str(cfg.train.device), info)
    if info.enabled and cfg.train.batch_size % info.world_size:
        raise TrainError(f"train.batch_size={cfg.train.batch_size} does not divide by the "
                         f"{info.world_size} ranks; choose a multiple of {info.world_size}")
    corpus = load_corpus(cfg.data)  # bad data fails here, before the model is built
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    OmegaConf.set_struct(cfg, True)
    if cfg.run.name is None:
        with_open = OmegaConf.to_container(cfg)
        with_open["run"]["name"] = f"{arm_name(cfg)}-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
        cfg = OmegaConf.create(with_open)
        OmegaConf.set_struct(cfg, True)
    kernel = "none"
    if cfg.model.use_attnres:
        # An input-dependent query is per token; the fused kernel reads with one [d] query, so `auto`
        # resolves to torch there (and `triton` was refused by validation).
        requested = "torch" if cfg.model.attnres.query == "input" else str(cfg.model.kernel)
        kernel = resolve_kernel(requested, device)
        if str(cfg.model.kernel) == "auto" and info.is_main:
            print(f"kernel: model.kernel=auto -> {kernel} ({_auto_reason(kernel, device, cfg)})", flush=True)

    init_distributed(info, device)
    try:
        if info.enabled and cfg.run.name is not None:  # every rank writes to the directory rank 0 named
            with_open = OmegaConf.to_container(cfg)
            with_open["run"]["name"] = broadcast_object(str(cfg.run.name), info)
            cfg = OmegaConf.create(with_open)
            OmegaConf.set_struct(cfg, True)
        return _train(cfg, corpus, device, kernel, info, stop_at_step)
    finally:
        shutdown_distributed(info)


def _train(cfg: DictConfig, corpus: ByteCorpus, device: torch.device, kernel: str, info: DistInfo,
           stop_at_step: int | None) -> TrainResult:
    t = cfg.train
    main = info.is_main
    if device.type == "cuda":  # pairs of an A/B run share a process: each reports its own peak
        torch.cuda.reset_peak_memory_stats(device)
    model = LoopedByteLM(cfg.model, seed=int(t.seed), kernel=kernel).to(device)
    counts = model.param_counts()
    optimizer = torch.optim.AdamW(model.param_groups(float(t.weight_decay)), lr=float(t.lr),
                                  betas=(float(t.beta1), float(t.beta2)), fused=device.type == "cuda")
    use_bf16 = device.type == "cuda"
    dtype = "bf16-autocast" if use_bf16 else "fp32"

    def autocast() -> Any:
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else nullcontext()

    run_dir, state, source = Path(cfg.run.dir) / cfg.run.name, None, None
    refusal: str | None = None
    if main:
        try:
            run_dir, state, source = prepare_run_dir(cfg)
        except (TrainError, CheckpointError) as exc:
            if not info.enabled:
                raise
            refusal = str(exc)
    if info.enabled:  # rank 0 decides; every rank refuses together or resumes from the same checkpoint
        refusal, chosen = broadcast_object((refusal, None if source is None else str(source)), info)
        if refusal is not None:
            raise TrainError(refusal)
        if not main and chosen is not None:
            source, state = Path(chosen), load_checkpoint(Path(chosen))
    step, tokens, window = 0, 0, {"loss_sum": 0.0, "steps": 0, "tokens": 0, "depth_sum": 0.0, "time": 0.0}
    skipped = 0
    metrics: list[dict[str, Any]] = []
    PROBES.reset()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, tokens, skipped = int(state["step"]), int(state["tokens"]), int(state["skipped"])
        window = dict(state["window"])
        PROBES.load(state["probes"])
        if not main:  # the checkpoint holds the open window's sums over all ranks; rank 0 carries them
            window["loss_sum"] = 0.0
            PROBES.reset()
        torch.set_rng_state(state["rng_cpu"])
        metrics = [dict(r) for r in state["metrics"]]
    if state is not None and step >= t.steps:  # nothing left to do: report, write nothing
        if main:
            print(f"run {run_dir} is already complete at step {step} (train.steps={t.steps}); nothing to resume",
                  flush=True)
        return TrainResult(run_dir, metrics, [], 0.0, **counts, kernel=kernel, device=str(device))
    if cfg.train.compile:
        model.compile_sublayers()
    train_model: torch.nn.Module = model
    if info.enabled:
        # Every parameter gets a gradient at every depth and readout choice: the per-slot arm parameters
        # are rows of one tensor each, so DDP's unused-parameter search is not needed.
        train_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)

    x_eval, y_eval = eval_windows(corpus.val, seq_len=int(cfg.data.seq_len), eval_bytes=int(cfg.data.eval_bytes))
    log_path, metrics_path = run_dir / "train.log", run_dir / "metrics.jsonl"
    wandb_run = None
    if main:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg))
        except OSError as exc:
            raise TrainError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}; choose a "
                             "writable run.dir (and check the disk has space)") from exc
        prov = provenance(cfg, device, dtype, kernel, corpus, counts, info)
        atomic_write_text(run_dir / "provenance.json", json.dumps(prov, indent=2) + "\n")
        header = [f"# {k}: {v}" for k, v in prov.items()]
        with log_path.open("a") as log:
            if state is None or not log_path.stat().st_size:
                log.write("\n".join(header) + "\n")
            if state is not None:
                log.write(f"resume step={step} from={source}\n")
        if state is not None and not metrics_path.exists():  # resumed into a new directory: carry the history
            metrics_path.write_text("".join(json.dumps(row) + "\n" for row in metrics))
        print(f"run {run_dir}  arm={arm_name(cfg)} params={counts['params']:,} "
              f"arm_params={counts['arm_params']:,} device={device} kernel={kernel}"
              + (f"  (resumed at step {step} from {source})" if state else ""), flush=True)
        wandb_run = _wandb_run(cfg, run_dir, main)

    def checkpoint_state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "tokens": tokens, "skipped": skipped, "window": dict(window), "probes": PROBES.snapshot(),
                "rng_cpu": torch.get_rng_state(), "metrics": metrics,
                "config": OmegaConf.to_container(cfg, resolve=True)}

    def write_checkpoint() -> Path | None:
        # The open window's loss sum and counters are per rank: save their sums over ranks (a collective,
        # so every rank calls this at the same steps); rank 0 carries them after a resume.
        counters = PROBES.snapshot()
        sums = all_reduce_sum([window["loss_sum"], *counters.values()], info, device)
        if not main:
            return None
        state = checkpoint_state()
        state["window"]["loss_sum"] = sums[0]
        state["probes"] = {k: int(v) for k, v in zip(counters, sums[1:])}
        return save_checkpoint(state, run_dir / "checkpoints", step, int(t.keep_ckpts))

    def eval_and_log() -> None:
        nonlocal window
        counters = PROBES.snapshot()
        sums = all_reduce_sum([window["loss_sum"], *counters.values()], info, device)
        loss_sum, counter_vals = sums[0], [int(v) for v in sums[1:]]
        counters = dict(zip(counters.keys(), counter_vals))
        if main:
            # A window whose every step was skipped has no loss and no depth: NaN, not 0.
            row: dict[str, Any] = {"step": step, "tokens": tokens,
                                   "loss": loss_sum / info.world_size / window["steps"] if window["steps"]
                                   else float("nan")}
            row.update(evaluate(model, x_eval, y_eval, int(t.batch_size), device, autocast))
            row.update({"lr": lr_at(max(0, step - 1), cfg),
                        "tok/s": window["tokens"] / max(window["time"], 1e-9),
                        "depth": window["depth_sum"] / window["steps"] if window["steps"] else float("nan"),
                        "arm": arm_name(cfg)})
            row.update(counters)
            row.update({"kernel": kernel, "skipped": skipped, "time_s": time.time() - start_time,
                        "peak_mem_bytes": peak_memory(device), "params": counts["params"]})
            metrics.append(row)
            line = format_eval_line(row, model.max_iter)
            progress.print(line)
            with log_path.open("a") as log:
                log.write(line + "\n")
            with metrics_path.open("a") as mf:
                mf.write(json.dumps(row) + "\n")
            if wandb_run is not None:
                wandb_run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)
        PROBES.reset()
        window = {"loss_sum": 0.0, "steps": 0, "tokens": 0, "depth_sum": 0.0, "time": 0.0}
        bad_eval = main and not math.isfinite(metrics[-1]["bpb"])
        if broadcast_flag(bad_eval, info, device) and t.nonfinite == "stop":
            last = list_checkpoints(run_dir / "checkpoints")
            raise TrainError(f"non-finite eval bpb at step {step}; last good checkpoint: "
                             f"{last[-1] if last else 'none'}; lower train.lr")

    start_time = time.time()
    losses: list[float] = []
    progress = _Progress(str(cfg.logging.progress), int(t.steps), step, main)
    data_seed = int(t.seed if t.data_seed is None else t.data_seed)
    try:
        with _SignalFlag() as signals:
            while step < t.steps:
                t0 = time.perf_counter()
                depth = depth_for_step(int(t.seed), step, model.max_iter, bool(cfg.model.random_depth))
                x, y = train_batch(corpus.train, seq_len=int(cfg.data.seq_len), batch_size=int(t.batch_size),
                                   seed=data_seed, step=step, rank=info.rank, world_size=info.world_size)
                x, y = x.to(device), y.to(device)
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, cfg)
                with autocast():
                    logits = train_model(x, depth=depth, readouts=str(t.readout))
                loss = readout_loss(logits, y)
                loss_value = float(loss.detach())
                what = "loss" if broadcast_flag(not math.isfinite(loss_value), info, device) else None
                if what is None:
                    loss.backward()
                    # A finite loss can still give an inf/NaN gradient that would poison the weights; the
                    # gradients are all-reduced, so every rank sees the same norm.
                    grad_norm = torch.nn.utils.clip_grad_norm_(
                        model.parameters(), float(t.grad_clip) if t.grad_clip > 0 else math.inf)
                    what = None if math.isfinite(float(grad_norm)) else "gradient norm"
                if what is not None:
                    if t.nonfinite == "stop":
                        last = list_checkpoints(run_dir / "checkpoints")
                        raise TrainError(f"non-finite {what} (loss {loss_value}) at step {step}; last good "
                                         f"checkpoint: {last[-1] if last else 'none'}; lower train.lr or set "
                                         "train.nonfinite=skip to skip such batches")
                    skipped += 1
                    optimizer.zero_grad(set_to_none=True)
                else:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    window["loss_sum"] += loss_value
                    window["steps"] += 1
                    window["depth_sum"] += depth
                step += 1
                tokens += x.numel() * info.world_size
                window["tokens"] += x.numel() * info.world_size
                window["time"] += time.perf_counter() - t0
                losses.append(loss_value)
                progress.update(step, loss_value, window["tokens"] / max(window["time"], 1e-9))
                if step % t.eval_every == 0 or step == t.steps:
                    eval_and_log()
                if t.ckpt_every and step % t.ckpt_every == 0 and step < t.steps:
                    write_checkpoint()
                stop_now = signals.signum is not None or (stop_at_step is not None and step >= stop_at_step)
                if broadcast_flag(stop_now, info, device) and step < t.steps:
                    path = write_checkpoint()
                    code = 143 if signals.signum == signal.SIGTERM else 130
                    msg = (f"interrupted at step {step}; checkpoint {path}; resume with: dormouse train "
                           f"<same overrides> run.name={cfg.run.name} train.resume=auto")
                    if main:
                        progress.print(msg)
                        with log_path.open("a") as log:
                            log.write(f"interrupted step={step}\n")
                    if signals.signum is None:  # stop_at_step: the test hook returns normally
                        return TrainResult(run_dir, metrics, losses, time.time() - start_time, **counts,
                                           peak_mem_bytes=peak_memory(device), kernel=kernel, device=str(device))
                    raise Interrupted(code, msg)
    finally:
        progress.close()
    write_checkpoint()
    wall = time.time() - start_time
    if main:
        with log_path.open("a") as log:
            log.write(f"done step={step} wall_s={wall:.1f}\n")
        if wandb_run is not None:
            wandb_run.finish()
    barrier(info)
    return TrainResult(run_dir, metrics, losses, wall, **counts, peak_mem_bytes=peak_memory(device),
                       kernel=kernel, device=str(device))


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
