"""Typed configuration: dataclasses registered with Hydra's ConfigStore, composition, validation.

The YAML files in ``conf/`` (installed as the package ``dormouse.conf``) set the defaults and presets;
the dataclasses below are the schema. Composition runs in struct mode, so an unknown key or a ``+new=key``
override is refused by Hydra itself. :func:`validate` then checks every value *before any work*: it returns
one line per problem, naming the field, what was given and what is allowed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

# The arm registry: every residual arm's name, simplest first. The order is the eval line's counter order
# and the order in which an A/B tie keeps the simpler mechanism (docs/ab-protocol.md). The first arm is the
# default; every other arm NAME is selected by the boolean switch ``model.use_NAME`` of ModelConfig, and
# ``dormouse.arms`` holds one ResidualArm subclass whose ``name`` is NAME. Adding an arm: its class in
# arms.py, its name here, its switch in ModelConfig (tests/test_arms.py checks the three agree).
ARMS = ("rezero", "gr", "attnres")


def arm_switch(arm: str) -> str:
    """The ModelConfig field that selects ``arm`` (none for the default arm, ARMS[0])."""
    return f"use_{arm}"


@dataclass
class AttnResConfig:
    """Attention Residuals options (docs/attnres.md). Only read when ``model.use_attnres`` is true."""

    block_size: int | None = None  # null = Full AttnRes; else S sublayers per block (Eq. 5-6)
    form: str = "paper"  # "paper" (Eq. 2: q . RMSNorm(k)) or "sqrt_d" (ablation: L2 key / sqrt(d))
    eps: float = 1e-6  # RMSNorm epsilon of the keys
    gain: bool = True  # learned RMSNorm gain on the keys (initialised to ones)
    query: str = "static"  # "static" pseudo-query w_l, or "input": w_l + U_l RMSNorm(v_last)


@dataclass
class ModelConfig:
    d_model: int = 128
    n_heads: int = 4
    max_iter: int = 3  # iterations of the shared block; unrolled depth L = 2 * max_iter sublayers
    mlp_hidden: int | None = None  # SwiGLU hidden width; null = 8/3 * d_model rounded up to a multiple of 32
    use_attnres: bool = False  # the arm switches (see ARMS); at most one is true, none = ReZero
    use_gr: bool = False
    random_depth: bool = False  # each training step runs depth k ~ U{1..max_iter}, keyed on (seed, step)
    tie_head: bool = True
    rope_base: float = 10000.0
    kernel: str = "auto"  # AttnRes read: "auto" | "triton" | "torch"
    attnres: AttnResConfig = field(default_factory=AttnResConfig)


@dataclass
class DataConfig:
    path: str | None = None  # null = the embedded Shakespeare corpus; else a local file or folder
    hf_dataset: str | None = None  # a Hugging Face dataset name, loaded through `datasets`
    hf_split: str = "train"
    hf_text_field: str = "text"
    seq_len: int = 128
    val_fraction: float = 0.05  # the tail of the corpus, never trained on
    # how much of the val split the fixed eval set reads (whole windows); null = min(65536, the val split)
    eval_bytes: int | None = None


@dataclass
class TrainConfig:
    steps: int = 2400
    batch_size: int = 32  # global batch (split across ranks under torchrun)
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # 0 disables clipping
    beta1: float = 0.9
    beta2: float = 0.95
    eval_every: int = 600
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    seed: int = 1337
    compile: bool = False  # torch.compile the whole training forward, fullgraph (LoopedByteLM.compile_whole)
    readout: str = "all"  # "all": mean CE over every iteration's readout; "last": the final one only
    ckpt_every: int = 0  # 0 = only the final checkpoint
    keep_ckpts: int = 2
    resume: str = "never"  # "never" | "auto" | a checkpoint path
    overwrite: bool = False  # allow starting a new run in a directory that holds another run
    nonfinite: str = "stop"  # "stop" | "skip": what a NaN/inf loss does
    # Data-order stream; null = seed. Every arm of a comparison shares it, except the registered A/A arm,
    # which changes it. (There is no separate arm-parameter stream: every arm's own init is deterministic
    # by its paper -- zeros, ones, -2 -- so such a stream would change nothing and calibrate no noise.)
    data_seed: int | None = None


@dataclass
class LoggingConfig:
    wandb: str = "disabled"  # "disabled" | "offline" | "online"
    wandb_project: str = "dormouse"
    wandb_group: str | None = None
    wandb_job_type: str | None = None
    progress: str = "auto"  # "auto" (a rich bar on a terminal) | "on" | "off"


@dataclass
class RunConfig:
    name: str | None = None  # null = "<arm>-<start time>" (dormouse.rundir.default_run_name)
    dir: str = "runs"


@dataclass
class DormouseConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    run: RunConfig = field(default_factory=RunConfig)


def register_configs() -> None:
    """Register the schema; ``conf/config.yaml`` extends it with ``defaults: [dormouse_schema, ...]``."""
    ConfigStore.instance().store(name="dormouse_schema", node=DormouseConfig)


class ConfigError(ValueError):
    """A configuration that cannot run. ``lines`` holds one message per bad field."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def compose_config(overrides: list[str] | None = None, config_name: str = "config") -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides (``key=value``), in struct mode.

    Hydra's own errors (unknown key, bad type, missing preset) are re-raised as :class:`ConfigError`
    carrying the useful text, which Hydra keeps in ``__cause__``.
    """
    from dormouse.overrides import check_overrides

    overrides = list(overrides or [])
    problems = check_overrides(overrides, DormouseConfig)  # in dormouse's words, before Hydra's own
    if problems:
        raise ConfigError(problems)
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="dormouse.conf", version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides)
        # A root-level key that is not in the schema slips past Hydra's struct check: merge onto the
        # schema so it is refused as well.
        cfg = OmegaConf.merge(OmegaConf.structured(DormouseConfig), cfg)
    except Exception as exc:  # Hydra wraps OmegaConf errors; show the cause, not the wrapper
        raise ConfigError([_hydra_error_text(exc)]) from exc
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, True)
    return cfg


def _hydra_error_text(exc: BaseException) -> str:
    parts = [f"{type(exc).__name__}: {exc}".strip()]
    cause = exc.__cause__ or exc.__context__
    seen = {id(exc)}
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        text = str(cause).strip()
        if text and text not in parts[-1]:
            parts.append(text)
        cause = cause.__cause__ or cause.__context__
    return "config: " + " | ".join(p.replace("\n", " ") for p in parts)


def selected_arms(model_cfg: Any) -> list[str]:
    """The non-default arms whose switches are on (validation allows at most one)."""
    return [arm for arm in ARMS[1:] if getattr(model_cfg, arm_switch(arm))]


def model_arm(model_cfg: Any) -> str:
    """The arm a model config selects: the one whose switch is on, else the default arm (ReZero)."""
    chosen = selected_arms(model_cfg)
    return chosen[0] if chosen else ARMS[0]


def arm_name(cfg: DictConfig | DormouseConfig) -> str:
    """The arm a whole config selects (:func:`model_arm` of ``cfg.model``)."""
    return model_arm(cfg.model)


def _bad(lines: list[str], key: str, given: Any, allowed: str) -> None:
    lines.append(f"{key}={given!r} is invalid: {allowed}")


def validate(cfg: DictConfig) -> list[str]:
    """Every problem with ``cfg``, one line each (field, given value, what is allowed). Empty = runnable.

    Pure: creates nothing, touches no device beyond asking whether CUDA exists.
    """
    lines: list[str] = []
    m, d, t, lg = cfg.model, cfg.data, cfg.train, cfg.logging

    chosen = selected_arms(m)
    if len(chosen) > 1:
        switches = [f"model.{arm_switch(a)}" for a in ARMS[1:]]
        lines.append(
            f"{' and '.join(f'model.{arm_switch(a)}=true' for a in chosen)}: the arms are mutually exclusive; "
            f"set at most one of {', '.join(switches)} (all false = {ARMS[0]})"
        )
    if m.max_iter < 1:
        _bad(lines, "model.max_iter", m.max_iter, "must be >= 1")
    if m.d_model < 1:
        _bad(lines, "model.d_model", m.d_model, "must be >= 1")
    if m.n_heads < 1:
        _bad(lines, "model.n_heads", m.n_heads, "must be >= 1")
    elif m.d_model % m.n_heads != 0:
        lines.append(
            f"model.n_heads={m.n_heads} does not divide model.d_model={m.d_model}: "
            "choose n_heads that divides d_model"
        )
    elif (m.d_model // m.n_heads) % 2 != 0:
        lines.append(
            f"model.d_model/model.n_heads={m.d_model // m.n_heads} is odd: RoPE needs an even head dimension"
        )
    if m.mlp_hidden is not None and m.mlp_hidden < 1:
        _bad(lines, "model.mlp_hidden", m.mlp_hidden, "must be >= 1 or null")
    if m.kernel not in ("auto", "triton", "torch"):
        _bad(lines, "model.kernel", m.kernel, "one of auto, triton, torch")
    elif m.kernel == "triton" and not m.use_attnres:
        lines.append("model.kernel=triton but model.use_attnres=false: the fused kernel is the AttnRes read; "
                     "set model.use_attnres=true or leave model.kernel=auto")
    if not (math.isfinite(m.rope_base) and m.rope_base > 0):
        _bad(lines, "model.rope_base", m.rope_base, "must be a finite number > 0")

    a = m.attnres
    if a.form not in ("paper", "sqrt_d"):
        _bad(lines, "model.attnres.form", a.form, "one of paper, sqrt_d")
    if a.query not in ("static", "input"):
        _bad(lines, "model.attnres.query", a.query, "one of static, input")
    if not (math.isfinite(a.eps) and a.eps >= 0):
        _bad(lines, "model.attnres.eps", a.eps, "must be a finite number >= 0")
    if m.use_attnres and a.query == "input" and m.kernel == "triton":
        lines.append(
            "model.kernel=triton with model.attnres.query=input: the fused kernel takes one static [d] "
            "pseudo-query per read, not a per-token one; use model.kernel=torch (or auto) or query=static"
        )
    if a.block_size is not None:
        if a.block_size < 1:
            _bad(lines, "model.attnres.block_size", a.block_size, "must be >= 1 or null (Full AttnRes)")
        if not m.use_attnres:
            lines.append(
                f"model.attnres.block_size={a.block_size} is set but model.use_attnres=false: "
                "set model.use_attnres=true or leave block_size null"
            )
        if a.query == "input":
            lines.append(
                f"model.attnres.query=input with model.attnres.block_size={a.block_size}: the Block "
                "two-phase schedule needs input-independent queries; use query=static or block_size=null"
            )

    if d.seq_len < 1:
        _bad(lines, "data.seq_len", d.seq_len, "must be >= 1")
    if not 0.0 < d.val_fraction < 1.0:
        _bad(lines, "data.val_fraction", d.val_fraction, "must be in (0, 1)")
    if d.eval_bytes is not None and d.eval_bytes < 1:
        _bad(lines, "data.eval_bytes", d.eval_bytes, "must be >= 1")
    if d.path is not None and d.hf_dataset is not None:
        lines.append("data.path and data.hf_dataset are both set: choose one source")
    if d.path is not None and not Path(os.path.expanduser(str(d.path))).exists():
        _bad(lines, "data.path", d.path, "no such file or folder; give an existing file or folder of text")

    for key in ("steps", "batch_size", "eval_every"):
        if t[key] <= 0:
            _bad(lines, f"train.{key}", t[key], "must be > 0")
    if not (math.isfinite(t.lr) and t.lr > 0):
        _bad(lines, "train.lr", t.lr, "must be a finite number > 0")
    if t.warmup < 0:
        _bad(lines, "train.warmup", t.warmup, "must be >= 0")
    if not 0.0 <= t.min_lr_ratio <= 1.0:
        _bad(lines, "train.min_lr_ratio", t.min_lr_ratio, "must be in [0, 1]")
    if not (math.isfinite(t.weight_decay) and t.weight_decay >= 0):
        _bad(lines, "train.weight_decay", t.weight_decay, "must be a finite number >= 0")
    if not (math.isfinite(t.grad_clip) and t.grad_clip >= 0):
        _bad(lines, "train.grad_clip", t.grad_clip, "must be a finite number >= 0 (0 disables clipping)")
    for key in ("beta1", "beta2"):
        if not 0.0 <= t[key] < 1.0:
            _bad(lines, f"train.{key}", t[key], "must be in [0, 1)")
    if t.ckpt_every < 0:
        _bad(lines, "train.ckpt_every", t.ckpt_every, "must be >= 0 (0 = final checkpoint only)")
    if t.keep_ckpts < 1:
        _bad(lines, "train.keep_ckpts", t.keep_ckpts, "must be >= 1")
    if t.readout not in ("all", "last"):
        _bad(lines, "train.readout", t.readout, "one of all, last")
    if t.nonfinite not in ("stop", "skip"):
        _bad(lines, "train.nonfinite", t.nonfinite, "one of stop, skip")
    if t.resume not in ("never", "auto") and not Path(str(t.resume)).exists():
        _bad(lines, "train.resume", t.resume, "never, auto, or the path of an existing checkpoint")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # set by torchrun
    if t.batch_size > 0 and t.batch_size % world_size:
        lines.append(f"train.batch_size={t.batch_size} does not divide by the {world_size} ranks: it is the "
                     f"global batch, split evenly across ranks; choose a multiple of {world_size}")
    _check_device(lines, str(t.device))
    if m.use_attnres and m.kernel == "triton" and not lines:
        _check_triton(lines, str(t.device))

    # A run name is a folder under run.dir (sub-folders allowed), never the root itself nor outside it.
    name = cfg.run.name
    if name is not None and (not Path(str(name)).parts or Path(str(name)).is_absolute()
                             or ".." in Path(str(name)).parts or "\0" in str(name)):
        _bad(lines, "run.name", name, "a folder name inside run.dir (no '..', not absolute, not empty)")
    if lg.wandb not in ("disabled", "offline", "online"):
        _bad(lines, "logging.wandb", lg.wandb, "one of disabled, offline, online")
    if lg.progress not in ("auto", "on", "off"):
        _bad(lines, "logging.progress", lg.progress, "one of auto, on, off")
    return lines


def _check_device(lines: list[str], device: str) -> None:
    import torch

    if device in ("auto", "cpu"):
        return
    if device == "cuda" or device.startswith("cuda:"):
        index = device.partition(":")[2]
        if index and not index.isdigit():
            _bad(lines, "train.device", device, "auto, cpu, cuda or cuda:N")
            return
        if not torch.cuda.is_available():
            lines.append(
                f"train.device={device!r} was asked for but CUDA is not available on this machine "
                f"(torch {torch.__version__}, cuda build: {torch.version.cuda}); use train.device=cpu or auto"
            )
        elif index and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            lines.append(f"train.device={device!r} under torchrun: each rank takes cuda:LOCAL_RANK; "
                         "use train.device=cuda (or auto)")
        elif index and int(index) >= torch.cuda.device_count():
            lines.append(
                f"train.device={device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
        return
    _bad(lines, "train.device", device, "auto, cpu, cuda or cuda:N")


def _check_triton(lines: list[str], device: str) -> None:
    """``model.kernel=triton`` must be runnable on the device the run will use, or be refused now."""
    import torch

    from dormouse.attnres import resolve_kernel

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        resolve_kernel("triton", torch.device(device))
    except RuntimeError as exc:
        lines.append(f"model.kernel='triton' cannot run on train.device={device!r}: {exc}")


def load_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose and validate; raises :class:`ConfigError` with every bad field."""
    cfg = compose_config(overrides)
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg
