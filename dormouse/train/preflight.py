"""``dormouse validate``: a dry run of everything ``dormouse train`` would refuse before step 0, using the same
functions ``train`` calls so the two cannot disagree: :func:`check_environment` (files, CUDA, the arm's
kernel), the data (:func:`dormouse.train.batches.load_corpus`), the run directory in dry-run mode and its lock, and
:func:`start_refusals`. :func:`config_warnings` flag what runs but is probably unmeant. Nothing is created."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig

from dormouse.arms import builtin  # noqa: F401  (the arm classes whose kernel choice is checked)
from dormouse.arms.registry import arm_class, arm_classes
from dormouse.config.schema import arm_name, invalid
from dormouse.data import DataError, resolve_eval_bytes
from dormouse.errors import TrainError
from dormouse.run.checkpoint import CheckpointError
from dormouse.run.files import RunFiles
from dormouse.train.batches import load_corpus
from dormouse.train.device import resolve_device
from dormouse.train.dist_info import dist_info_from_env
from dormouse.train.start import default_run_name, prepare_run_dir, run_in_use
from dormouse.train.state import checkpoint_step
from dormouse.train.step_notice import device_memory, memory_refusal, size, step_memory


@dataclass
class Preflight:
    problems: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # what each passing check saw
    warnings: list[str] = field(default_factory=list)  # config_warnings: runs, but probably not as meant


@dataclass(frozen=True)
class KernelChoice:
    """The read path the selected arm takes on the run's device, and why (the arm's ``choose_kernel``)."""

    path: str  # "triton" | "torch" | "none" (an arm without a fused read)
    why: str


@dataclass
class Environment:
    """The machine's refusals of a valid config, and the read path decided when there are none."""

    problems: list[str] = field(default_factory=list)
    kernel: KernelChoice | None = None


def check_environment(cfg: DictConfig, device: torch.device) -> Environment:
    """The machine's checks on ``device``: named files, CUDA, and the arm's kernel (decided here, once)."""
    problems = _missing_files(cfg) + _missing_cuda(str(cfg.train.device))
    if problems:
        return Environment(problems)
    return _decide_kernel(cfg, device)


def environment_problems(cfg: DictConfig) -> list[str]:
    """:func:`check_environment`'s refusals on the device this process would run ``cfg`` on (a sweep's plan)."""
    return check_environment(cfg, resolve_device(str(cfg.train.device), dist_info_from_env())).problems


def _missing_files(cfg: DictConfig) -> list[str]:
    """The files the config names that must exist: the data and a resume's checkpoint."""
    d, t = cfg.data, cfg.train
    lines = []
    if d.path is not None and not Path(os.path.expanduser(str(d.path))).exists():
        lines.append(invalid("data.path", d.path, "no such file or folder; give an existing file or folder of text"))
    if str(t.resume) not in ("never", "auto") and not Path(str(t.resume)).exists():
        lines.append(invalid("train.resume", t.resume, "never, auto, or the path of an existing checkpoint"))
    return lines


def _missing_cuda(device: str) -> list[str]:
    """CUDA present for ``train.device=cuda[:N]``, and device N visible (its form was validated)."""
    if device != "cuda" and not device.startswith("cuda:"):
        return []
    if not torch.cuda.is_available():
        return [f"train.device={device!r} was asked for but CUDA is not available on this machine "
                f"(torch {torch.__version__}, cuda build: {torch.version.cuda}); use train.device=cpu or auto"]
    index = device.partition(":")[2]
    if index and int(index) >= torch.cuda.device_count():
        return [f"train.device={device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible"]
    return []


def _decide_kernel(cfg: DictConfig, device: torch.device) -> Environment:
    """The selected arm's read path on ``device`` (``choose_kernel``), or the refusal of ``model.kernel``."""
    m = cfg.model
    arm = arm_class(arm_name(cfg))
    shown = device.type if str(cfg.train.device) == "auto" else str(cfg.train.device)
    try:
        path, why = arm.choose_kernel(m, device)
    except ValueError as exc:  # a combination the read path refuses
        return Environment([str(exc)])
    except RuntimeError as exc:  # the path cannot run on this device
        return Environment([f"model.kernel={str(m.kernel)!r} cannot run on train.device={shown!r}: {exc}"])
    if path == "none" and m.kernel == "triton":
        fused = [cls for cls in arm_classes().values()
                 if cls.choose_kernel.__func__ is not arm.choose_kernel.__func__ and cls.switch()]
        on = " or ".join(f"model.{cls.switch()}=true" for cls in fused)
        return Environment([f"model.kernel=triton but {' and '.join(f'model.{c.switch()}=false' for c in fused)}: "
                            f"the fused kernel is the read of {', '.join(c.name for c in fused)}; set {on} or "
                            "leave model.kernel=auto"])
    return Environment(kernel=KernelChoice(path, why))


def config_warnings(cfg: DictConfig) -> list[str]:
    """What a valid config runs but probably does not mean, one line each (printed, never refused)."""
    out = []
    t = cfg.train
    if int(t.warmup) >= int(t.steps):
        out.append(f"train.warmup={t.warmup} >= train.steps={t.steps}: the whole run is warmup (the learning "
                   "rate climbs to train.lr at best and never decays); lower train.warmup (nanoGPT uses ~1-5 % "
                   "of the steps)")
    return out


def _writable_ancestor(path: Path) -> str | None:
    """Why ``path`` cannot be created, or None: its nearest existing ancestor must be a writable folder."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def _wandb_credentials() -> bool:
    return bool(os.environ.get("WANDB_API_KEY")) or (Path.home() / ".netrc").exists()


WANDB_REFUSAL = ("logging.wandb=online needs credentials (WANDB_API_KEY or `wandb login`); use "
                 "logging.wandb=offline to log locally")


def start_refusals(cfg: DictConfig, device: torch.device, world_size: int = 1) -> list[str]:
    """What ``train`` refuses before creating anything (wandb credentials, memory); ``validate`` shares it."""
    out = []
    if str(cfg.logging.wandb) == "online" and not _wandb_credentials():
        out.append(WANDB_REFUSAL)
    memory = memory_refusal(cfg, device, world_size)
    if memory is not None:
        out.append(memory)
    return out


def preflight(cfg: DictConfig) -> Preflight:
    """Every refusal ``train`` would make before step 0, for a config that passed validation."""
    info = dist_info_from_env()
    device = resolve_device(str(cfg.train.device), info)
    environment = check_environment(cfg, device)
    if environment.problems:  # reported alone, as train refuses them: before the data and the run directory
        return Preflight(problems=environment.problems)
    out = Preflight(warnings=config_warnings(cfg))
    try:
        corpus = load_corpus(cfg.data)
        out.found.append(f"data: {corpus.source}: train {corpus.train.numel():,} bytes, "
                         f"val {corpus.val.numel():,} bytes (eval reads "
                         f"{resolve_eval_bytes(cfg.data.eval_bytes, corpus.val.numel()):,})")
    except DataError as exc:
        out.problems.append(str(exc))
    _check_run_dir(cfg, out)
    out.problems += start_refusals(cfg, device, info.world_size)
    if memory_refusal(cfg, device, info.world_size) is None:
        have = device_memory(device)
        out.found.append(f"memory: one training step needs about {size(step_memory(cfg, info.world_size).total)}"
                         + (f" of the {size(have)} {device.type} has" if have else f" on {device.type}"))
    return out


def _check_run_dir(cfg: DictConfig, out: Preflight) -> None:
    """The run directory ``train`` would create or resume: in use, refused, or creatable (into ``out``)."""
    if cfg.run.name is None:
        run_dir = Path(str(cfg.run.dir)) / default_run_name(cfg, started="<start time>")
        why_not = _writable_ancestor(Path(str(cfg.run.dir)))
        if why_not is None:
            out.found.append(f"run directory: {run_dir} (new; run.name is null)")
    else:
        run_dir = Path(str(cfg.run.dir)) / str(cfg.run.name)
        why_not = _writable_ancestor(run_dir)
        in_use = run_in_use(RunFiles(run_dir))
        if in_use is not None:
            out.problems.append(in_use)
        try:
            run_dir, state, source = prepare_run_dir(cfg, dry_run=True)
            if state is not None:
                out.found.append(f"run directory: {run_dir} (resume at step {checkpoint_step(state)} from {source})")
            elif RunFiles(run_dir).holds_run():
                out.found.append(f"run directory: {run_dir} (holds a run: train.overwrite=true replaces it)")
            elif why_not is None:
                out.found.append(f"run directory: {run_dir} (new)")
        except (TrainError, CheckpointError) as exc:
            out.problems.append(str(exc))
    if why_not is not None:
        out.problems.append(f"run.dir={cfg.run.dir!r}: cannot create {run_dir}: {why_not}; choose a writable "
                            "run.dir")
