"""Typed configuration: dataclasses registered with Hydra's ConfigStore, composition, validation.

The YAML files in ``conf/`` (installed as the package ``dormouse.conf``) set the defaults and presets;
the dataclasses below are the schema. Composition runs in struct mode, so an unknown key or a ``+new=key``
override is refused by Hydra itself. :func:`validate` then checks every value *before any work*: it returns
one line per problem, naming the field, what was given and what is allowed.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import dataclass, field, make_dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

# The arm registry owns the arm names, their order and their switches; re-exported for the modules that
# import them from the config.
from dormouse.arms.registry import ARMS, arm_switch, model_arm, selected_arms  # noqa: F401
from dormouse.errors import DormouseError


@dataclass
class ModelBase:
    """The model's own options. The schema's ``ModelConfig`` adds, from the arm registry, each non-default
    arm's switch ``use_<name>`` (at most one true; none = the default arm) and each arm's options dataclass
    at ``model.<name>`` (:func:`schema`)."""

    d_model: int = 128
    n_heads: int = 4
    max_iter: int = 3  # iterations of the shared block; unrolled depth L = 2 * max_iter sublayers
    mlp_hidden: int | None = None  # SwiGLU hidden width; null = 8/3 * d_model rounded up to a multiple of 32
    random_depth: bool = False  # each training step runs depth k ~ U{1..max_iter}, keyed on (seed, step)
    tie_head: bool = True
    rope_base: float = 10000.0
    kernel: str = "auto"  # the arm's fused read, where it has one (AttnRes): "auto" | "triton" | "torch"


@dataclass
class DataConfig:
    path: str | None = None  # null = the embedded Shakespeare corpus; else a local file or folder
    hf_dataset: str | None = None  # a Hugging Face dataset name, loaded through `datasets`
    hf_config: str | None = None  # the dataset's configuration, e.g. wikitext-103-raw-v1
    hf_split: str = "train"
    # the val split: "auto" = the dataset's own `validation` split when it has one, else the tail of the
    # train stream (data.val_fraction); "tail" = always the tail; or a split's name (it must exist)
    hf_val_split: str = "auto"
    hf_text_field: str = "text"
    hf_streaming: bool = False  # refused: the corpus is held in memory (dormouse.data.load_corpus)
    seq_len: int = 128
    val_fraction: float = 0.05  # the tail of the corpus, never trained on
    # how much of the val split the fixed eval set reads (whole windows); null = min(65536, the val split)
    eval_bytes: int | None = None


DTYPES = ("auto", "fp32", "bf16")  # train.dtype's values (dormouse.train.loop.compute_autocast reads them)


@dataclass
class TrainConfig:
    steps: int = 2400
    batch_size: int = 32  # global batch (split across ranks under torchrun)
    # micro-batches per step: each rank's share of batch_size in grad_accum equal parts, their gradients
    # summed with the loss scaled by 1/grad_accum, so one step is one full-batch step (dormouse.train.loop)
    grad_accum: int = 1
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # 0 disables clipping
    beta1: float = 0.9
    beta2: float = 0.95
    eval_every: int = 600
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    # compute dtype (dormouse.train.loop.compute_autocast): "auto" = bf16 autocast on CUDA, fp32 on CPU; "fp32";
    # "bf16" = bf16 autocast on either (on CPU it is CPU autocast, the tests' stand-in for CUDA's)
    dtype: str = "auto"
    seed: int = 1337
    compile: bool = False  # torch.compile the whole training forward, fullgraph (LoopedByteLM.compile_whole)
    readout: str = "all"  # "all": mean CE over every iteration's readout; "last": the final one only
    ckpt_every: int = 0  # 0 = only the final checkpoint
    keep_ckpts: int = 2
    keep_best: bool = False  # also keep checkpoints/best.pt: the lowest eval bpb so far (dormouse.train.loop)
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
    wandb_entity: str | None = None  # the team or user the run belongs to; null = the account's default
    wandb_project: str = "dormouse"
    wandb_group: str | None = None  # `dormouse ab` sets it: a comparison is a group, its pairs the runs
    wandb_tags: list[str] = field(default_factory=list)  # e.g. logging.wandb_tags=[baseline,lr-sweep]
    wandb_job_type: str | None = None
    progress: str = "auto"  # "auto" (a rich bar on a terminal) | "on" | "off"


@dataclass
class RunConfig:
    name: str | None = None  # null = "<arm>-<start time>" (dormouse.train.start.default_run_name)
    dir: str = "runs"


SECTIONS: tuple[tuple[str, type], ...] = (("data", DataConfig), ("train", TrainConfig), ("logging", LoggingConfig),
                                         ("run", RunConfig))


def schema() -> type:
    """The whole schema, ``DormouseConfig``, with ``ModelConfig`` built from the registered arms: each
    non-default arm's switch ``use_<name>: bool = False`` and each arm's ``options`` at ``model.<name>``,
    in registry order (so an arm defined anywhere, e.g. in a test, gets its switch without an edit here)."""
    from dormouse.arms.registry import arm_classes

    return _schema(tuple(arm_classes().values()))


@functools.cache
def _schema(classes: tuple[type, ...]) -> type:
    extra: list[tuple[str, type, Any]] = [(cls.switch(), bool, False) for cls in classes if cls.switch()]
    extra += [(cls.name, cls.options, field(default_factory=cls.options)) for cls in classes if cls.options]
    model = make_dataclass("ModelConfig", extra, bases=(ModelBase,))
    model.__module__ = __name__
    sections = [("model", model, field(default_factory=model))]
    sections += [(name, cls, field(default_factory=cls)) for name, cls in SECTIONS]
    root = make_dataclass("DormouseConfig", sections)
    root.__module__ = __name__
    return root


def __getattr__(name: str) -> Any:
    """``DormouseConfig`` and ``ModelConfig``: the schema as the registry makes it now (:func:`schema`)."""
    if name == "DormouseConfig":
        return schema()
    if name == "ModelConfig":
        return fields_of(schema())["model"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fields_of(cls: type) -> dict[str, type]:
    """A dataclass's field types by name (resolved)."""
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclass_fields(cls)}


def register_configs() -> None:
    """Register the schema; ``conf/config.yaml`` extends it with ``defaults: [dormouse_schema, ...]``."""
    ConfigStore.instance().store(name="dormouse_schema", node=schema())


class ConfigError(DormouseError, ValueError, exit_code=2):
    """A configuration that cannot run. ``lines`` holds one message per bad field."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def compose_config(overrides: list[str] | None = None, config_name: str = "config") -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides (``key=value``), in struct mode.

    Hydra's own errors (unknown key, bad type, missing preset) are re-raised as :class:`ConfigError`
    carrying the useful text, which Hydra keeps in ``__cause__``.
    """
    from dormouse.config.overrides import check_overrides

    register_configs()
    overrides, user_presets = _user_preset_files(list(overrides or []))
    problems = check_overrides(overrides, schema(), {"preset": user_presets})  # dormouse's words, before Hydra's
    if problems:
        raise ConfigError(problems)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="dormouse.conf", version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides)
        # A root-level key that is not in the schema slips past Hydra's struct check: merge onto the
        # schema so it is refused as well.
        cfg = OmegaConf.merge(OmegaConf.structured(schema()), cfg)
    except Exception as exc:  # Hydra wraps OmegaConf errors; show the cause, not the wrapper
        raise ConfigError([_hydra_error_text(exc)]) from exc
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, True)
    return cfg


def is_preset_file(value: str) -> bool:
    """``preset=VALUE`` names a user's own preset file (a path), not one of conf/preset/*.yaml."""
    return value.endswith((".yaml", ".yml")) or "/" in value or os.sep in value


def _user_preset_files(overrides: list[str]) -> tuple[list[str], list[str]]:
    """``preset=./my.yaml``: the file is stored in Hydra's ConfigStore as an option of the ``preset`` group
    (package ``_global_``, like conf/preset/*.yaml, whose header it may omit) and the override names that
    option, so Hydra composes it exactly as a shipped preset: schema, then the preset, then the other
    overrides. Returns the rewritten overrides and the stored options' names."""
    out, stored = [], []
    for text in overrides:
        key, sep, value = text.partition("=")
        value = value.strip().strip("'\"")
        if key.strip() != "preset" or not sep or not is_preset_file(value):
            out.append(text)
            continue
        path = Path(os.path.expanduser(value))
        if not path.is_file():
            raise ConfigError([f"preset={value}: no such file; give a YAML file of config values (like "
                               "conf/preset/tiny.yaml) or a shipped preset's name"])
        try:
            node = OmegaConf.load(path)
        except Exception as exc:  # yaml's errors, OSError
            raise ConfigError([f"preset={value}: not readable as YAML ({' '.join(str(exc).split())[:200]})"]) from exc
        if not isinstance(node, DictConfig):
            raise ConfigError([f"preset={value}: a preset file is a mapping of config values (model: ..., "
                               "train: ...), not a list or a scalar"])
        name = "file_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        ConfigStore.instance().store(group="preset", name=name, node=node, package="_global_")
        out.append(f"preset={name}")
        stored.append(name)
    return out, stored


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


def arm_name(cfg: Any) -> str:
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

    lines += _arm_problems(m)
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
    if m.kernel not in KERNEL_CHOICES:
        _bad(lines, "model.kernel", m.kernel, "one of " + ", ".join(KERNEL_CHOICES))
    if not (math.isfinite(m.rope_base) and m.rope_base > 0):
        _bad(lines, "model.rope_base", m.rope_base, "must be a finite number > 0")

    if d.seq_len < 1:
        _bad(lines, "data.seq_len", d.seq_len, "must be >= 1")
    if not 0.0 < d.val_fraction < 1.0:
        _bad(lines, "data.val_fraction", d.val_fraction, "must be in (0, 1)")
    if d.eval_bytes is not None and d.eval_bytes < 1:
        _bad(lines, "data.eval_bytes", d.eval_bytes, "must be >= 1")
    if d.path is not None and d.hf_dataset is not None:
        lines.append("data.path and data.hf_dataset are both set: choose one source")
    if d.hf_streaming:
        lines.append("data.hf_streaming=true is not supported: dormouse holds the whole corpus in memory as "
                     "bytes; take a slice (data.hf_split='train[:100000]') or save a subset with "
                     "Dataset.save_to_disk and point data.path at that folder")
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
    if t.dtype not in DTYPES:
        _bad(lines, "train.dtype", t.dtype, "one of " + ", ".join(DTYPES))
    if t.resume not in ("never", "auto") and not Path(str(t.resume)).exists():
        _bad(lines, "train.resume", t.resume, "never, auto, or the path of an existing checkpoint")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # set by torchrun
    if t.batch_size > 0 and t.batch_size % world_size:
        lines.append(f"train.batch_size={t.batch_size} does not divide by the {world_size} ranks: it is the "
                     f"global batch, split evenly across ranks; choose a multiple of {world_size}")
    elif t.grad_accum < 1:
        _bad(lines, "train.grad_accum", t.grad_accum, "must be >= 1 (1 = no accumulation)")
    elif t.batch_size > 0 and (t.batch_size // world_size) % t.grad_accum:
        lines.append(f"train.grad_accum={t.grad_accum} does not divide each rank's batch of "
                     f"{t.batch_size // world_size} (train.batch_size={t.batch_size} over {world_size} rank(s)): "
                     "the micro-batches must be equal for one step to equal a full-batch step; choose a "
                     "divisor")
    _check_device(lines, str(t.device))
    if not lines:  # the read path on the device the run will use: only for an otherwise runnable config
        _check_kernel(lines, m, str(t.device))

    # A run name is a folder under run.dir (sub-folders allowed), never the root itself nor outside it.
    name = cfg.run.name
    if name is not None and (not Path(str(name)).parts or Path(str(name)).is_absolute()
                             or ".." in Path(str(name)).parts or "\0" in str(name)):
        _bad(lines, "run.name", name, "a folder name inside run.dir (no '..', not absolute, not empty)")
    if lg.wandb not in ("disabled", "offline", "online"):
        _bad(lines, "logging.wandb", lg.wandb, "one of disabled, offline, online")
    for tag in lg.wandb_tags:
        if not 0 < len(str(tag)) <= WANDB_TAG_MAX:  # wandb refuses longer tags at init, after the run began
            _bad(lines, "logging.wandb_tags", list(lg.wandb_tags),
                 f"each tag a non-empty string of at most {WANDB_TAG_MAX} characters")
            break
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


def _arm_problems(m: Any) -> list[str]:
    """The arm switches (at most one on) and every registered arm's own checks of its options."""
    from dormouse.arms.registry import arm_classes, default_arm

    lines: list[str] = []
    classes = arm_classes()
    chosen = selected_arms(m)
    if len(chosen) > 1:
        switches = [f"model.{cls.switch()}" for cls in classes.values() if cls.switch()]
        lines.append(
            f"{' and '.join(f'model.{arm_switch(a)}=true' for a in chosen)}: the arms are mutually exclusive; "
            f"set at most one of {', '.join(switches)} (all false = {default_arm()})"
        )
    for name, cls in classes.items():
        lines += cls.config_problems(m, selected=name in chosen or (not chosen and cls.default))
    return lines


KERNEL_CHOICES = ("auto", "triton", "torch")
WANDB_TAG_MAX = 64  # wandb's own limit on a tag's length


def _check_kernel(lines: list[str], m: Any, device: str) -> None:
    """``model.kernel`` must be honoured by the selected arm on the device the run will use, or be refused now
    (the decision itself is the arm's: ResidualArm.choose_kernel)."""
    import torch

    from dormouse.arms.registry import arm_class, arm_classes

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    arm = arm_class(model_arm(m))
    try:
        path, _ = arm.choose_kernel(m, torch.device(device))
    except ValueError as exc:  # a combination the read path refuses
        lines.append(str(exc))
        return
    except RuntimeError as exc:  # the path cannot run on this device
        lines.append(f"model.kernel={str(m.kernel)!r} cannot run on train.device={device!r}: {exc}")
        return
    if path == "none" and m.kernel == "triton":
        fused = [cls for cls in arm_classes().values()
                 if cls.choose_kernel.__func__ is not arm.choose_kernel.__func__ and cls.switch()]
        on = " or ".join(f"model.{cls.switch()}=true" for cls in fused)
        lines.append(f"model.kernel=triton but {' and '.join(f'model.{c.switch()}=false' for c in fused)}: the "
                     f"fused kernel is the read of {', '.join(c.name for c in fused)}; set {on} or leave "
                     "model.kernel=auto")


def load_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose and validate; raises :class:`ConfigError` with every bad field. Reads no run directory: a
    resume's defaults are applied where a run starts (:func:`dormouse.train.start.load_run_config`)."""
    cfg = compose_config(overrides)
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg
