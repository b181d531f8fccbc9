"""Typed configuration: dataclasses registered with Hydra's ConfigStore, composition, validation.

``conf/`` (the package ``dormouse.conf``) holds defaults and presets; these dataclasses are the schema, composed
in struct mode so Hydra refuses unknown keys. :func:`validate` runs each section's ``problems()`` and returns one
line per bad field; it is pure (no file, environment or device), the machine's checks are
:mod:`dormouse.train.preflight`'s.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math
import os
from dataclasses import dataclass, field, make_dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path, PurePath
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

# The arm registry owns the arm names, their order and their switches; re-exported for the modules that
# import them from the config. The schema is built from the arms' specs, not their classes: no torch.
from dormouse.arms.registry import ARMS, arm_switch, model_arm, selected_arms  # noqa: F401
from dormouse.arms.specs import arm_specs
from dormouse.errors import DormouseError
from dormouse.ops.mup import PARAMETRIZATIONS

KERNEL_CHOICES = ("auto", "triton", "torch")
DTYPES = ("auto", "fp32", "bf16")  # train.dtype's values (dormouse.train.device.compute_dtype reads them)
COMPILE_SCOPES = ("regional", "whole")  # train.compile_scope's values (dormouse.train.loop reads them)
DEVICES = "auto, cpu, cuda or cuda:N"  # train.device's forms
WANDB_MODES = ("disabled", "offline", "online")
WANDB_TAG_MAX = 64  # wandb's own limit on a tag's length


def invalid(key: str, given: Any, allowed: str) -> str:
    """The one form of a bad value's line: the field, what was given, what is allowed."""
    return f"{key}={given!r} is invalid: {allowed}"


@dataclass
class ModelBase:
    """The model's own options; ``ModelConfig`` adds each arm's switch and options (:func:`schema`)."""

    d_model: int = 128
    n_heads: int = 4
    max_iter: int = 3  # iterations of the shared block; unrolled depth L = 2 * max_iter sublayers
    mlp_hidden: int | None = None  # SwiGLU hidden width; null = 8/3 * d_model rounded up to a multiple of 32
    random_depth: bool = False  # each training step runs depth k ~ U{1..max_iter}, keyed on (seed, step)
    tie_head: bool = True
    rope_base: float = 10000.0
    kernel: str = "auto"  # the arm's fused read, where it has one (AttnRes): "auto" | "triton" | "torch"
    parametrization: str = "standard"  # "standard" | "mup": init and lr per weight role (dormouse/ops/mup.py)
    mup_base_width: int = 64  # µP's base width: at d_model = this (and the base head dim) µP is "standard"
    mup_base_head_dim: int = 16  # µP's attention scale 1/d_head equals 1/sqrt(d_head) at this head dimension

    def problems(self) -> list[str]:
        """The model's values, the arm switches and every arm's options."""
        lines = _arm_problems(self)
        for key in ("max_iter", "d_model", "n_heads"):
            if getattr(self, key) < 1:
                lines.append(invalid(f"model.{key}", getattr(self, key), "must be >= 1"))
        if self.n_heads >= 1 and self.d_model % self.n_heads != 0:
            lines.append(f"model.n_heads={self.n_heads} does not divide model.d_model={self.d_model}: "
                         "choose n_heads that divides d_model")
        elif self.n_heads >= 1 and (self.d_model // self.n_heads) % 2 != 0:
            lines.append(f"model.d_model/model.n_heads={self.d_model // self.n_heads} is odd: RoPE needs an even "
                         "head dimension")
        if self.mlp_hidden is not None and self.mlp_hidden < 1:
            lines.append(invalid("model.mlp_hidden", self.mlp_hidden, "must be >= 1 or null"))
        if self.parametrization not in PARAMETRIZATIONS:
            lines.append(invalid("model.parametrization", self.parametrization,
                                 "one of " + ", ".join(PARAMETRIZATIONS)))
        for key in ("mup_base_width", "mup_base_head_dim"):
            if getattr(self, key) < 1:
                lines.append(invalid(f"model.{key}", getattr(self, key), "must be >= 1"))
        if self.kernel not in KERNEL_CHOICES:
            lines.append(invalid("model.kernel", self.kernel, "one of " + ", ".join(KERNEL_CHOICES)))
        if not (math.isfinite(self.rope_base) and self.rope_base > 0):
            lines.append(invalid("model.rope_base", self.rope_base, "must be a finite number > 0"))
        return lines


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
    hf_streaming: bool = False  # refused: the corpus is held in memory (dormouse.data.read_corpus)
    seq_len: int = 128
    val_fraction: float = 0.05  # the tail of the corpus, never trained on
    # how much of the val split the fixed eval set reads (whole windows); null = min(65536, the val split)
    eval_bytes: int | None = None

    def problems(self) -> list[str]:
        """The data options' values (what the files hold is the preflight's)."""
        lines = []
        if self.seq_len < 1:
            lines.append(invalid("data.seq_len", self.seq_len, "must be >= 1"))
        if not 0.0 < self.val_fraction < 1.0:
            lines.append(invalid("data.val_fraction", self.val_fraction, "must be in (0, 1)"))
        if self.eval_bytes is not None and self.eval_bytes < 1:
            lines.append(invalid("data.eval_bytes", self.eval_bytes, "must be >= 1"))
        if self.path is not None and self.hf_dataset is not None:
            lines.append("data.path and data.hf_dataset are both set: choose one source")
        if self.hf_streaming:
            lines.append("data.hf_streaming=true is not supported: dormouse holds the whole corpus in memory as "
                         "bytes; take a slice (data.hf_split='train[:100000]') or save a subset with "
                         "Dataset.save_to_disk and point data.path at that folder")
        return lines


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
    # evaluate after each step passing a multiple of it, and the last (dormouse.train.schedule.is_eval_step); a
    # fractional value (a registered FLOP or token budget sets one) keeps every arm's evals at the same fractions
    eval_every: int | float = 600
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    # compute dtype (dormouse.train.device.compute_dtype): "auto" = bf16 autocast on CUDA, fp32 on CPU; "fp32";
    # "bf16" = bf16 autocast on either (on CPU it is CPU autocast, the tests' stand-in for CUDA's)
    dtype: str = "auto"
    seed: int = 1337
    compile: bool = False  # torch.compile the training forward (eval and sampling stay eager)
    # what train.compile compiles: "regional" = the sublayers and the final norm, each once, reused by every
    # iteration (LoopedByteLM.compile_regions); "whole" = the whole forward unrolled as one graph (compile_whole)
    compile_scope: str = "regional"
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

    def problems(self, world_size: int = 1) -> list[str]:
        """The training options' problems for ``world_size`` ranks (passed in, to stay pure)."""
        lines = []
        for key in ("steps", "batch_size", "eval_every"):
            if getattr(self, key) <= 0:
                lines.append(invalid(f"train.{key}", getattr(self, key), "must be > 0"))
        if not (math.isfinite(self.lr) and self.lr > 0):
            lines.append(invalid("train.lr", self.lr, "must be a finite number > 0"))
        if self.warmup < 0:
            lines.append(invalid("train.warmup", self.warmup, "must be >= 0"))
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            lines.append(invalid("train.min_lr_ratio", self.min_lr_ratio, "must be in [0, 1]"))
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            lines.append(invalid("train.weight_decay", self.weight_decay, "must be a finite number >= 0"))
        if not (math.isfinite(self.grad_clip) and self.grad_clip >= 0):
            lines.append(invalid("train.grad_clip", self.grad_clip, "must be a finite number >= 0 (0 disables "
                                 "clipping)"))
        for key in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, key) < 1.0:
                lines.append(invalid(f"train.{key}", getattr(self, key), "must be in [0, 1)"))
        if self.ckpt_every < 0:
            lines.append(invalid("train.ckpt_every", self.ckpt_every, "must be >= 0 (0 = final checkpoint only)"))
        if self.keep_ckpts < 1:
            lines.append(invalid("train.keep_ckpts", self.keep_ckpts, "must be >= 1"))
        for key, allowed in (("readout", ("all", "last")), ("nonfinite", ("stop", "skip")), ("dtype", DTYPES),
                             ("compile_scope", COMPILE_SCOPES)):
            if getattr(self, key) not in allowed:
                lines.append(invalid(f"train.{key}", getattr(self, key), "one of " + ", ".join(allowed)))
        return lines + _batch_split_problems(self, world_size) + _device_form_problems(str(self.device), world_size)


def _batch_split_problems(t: Any, world_size: int) -> list[str]:
    """``train.batch_size`` must split evenly over ranks and then into ``train.grad_accum`` micro-batches."""
    if t.batch_size > 0 and t.batch_size % world_size:
        return [f"train.batch_size={t.batch_size} does not divide by the {world_size} ranks: it is the global "
                f"batch, split evenly across ranks; choose a multiple of {world_size}"]
    if t.grad_accum < 1:
        return [invalid("train.grad_accum", t.grad_accum, "must be >= 1 (1 = no accumulation)")]
    if t.batch_size > 0 and (t.batch_size // world_size) % t.grad_accum:
        return [f"train.grad_accum={t.grad_accum} does not divide each rank's batch of "
                f"{t.batch_size // world_size} (train.batch_size={t.batch_size} over {world_size} rank(s)): the "
                "micro-batches must be equal for one step to equal a full-batch step; choose a divisor"]
    return []


def _device_form_problems(device: str, world_size: int) -> list[str]:
    """``train.device`` is one of its forms; a fixed ``cuda:N`` cannot serve several ranks."""
    if device in ("auto", "cpu"):
        return []
    if device != "cuda" and not device.startswith("cuda:"):
        return [invalid("train.device", device, DEVICES)]
    index = device.partition(":")[2]
    if index and not index.isdigit():
        return [invalid("train.device", device, DEVICES)]
    if index and world_size > 1:
        return [f"train.device={device!r} under torchrun: each rank takes cuda:LOCAL_RANK; use train.device=cuda "
                "(or auto)"]
    return []


def wandb_on(logging: Any) -> bool:
    """Whether a logging section (typed or as composed) sends anything to wandb."""
    return str(logging.wandb) != "disabled"


@dataclass
class LoggingConfig:
    wandb: str = "disabled"  # "disabled" | "offline" | "online"
    wandb_entity: str | None = None  # the team or user the run belongs to; null = the account's default
    wandb_project: str = "dormouse"
    wandb_group: str | None = None  # `dormouse ab` sets it: a comparison is a group, its runs the runs
    wandb_tags: list[str] = field(default_factory=list)  # e.g. logging.wandb_tags=[baseline,lr-sweep]
    wandb_job_type: str | None = None
    progress: str = "auto"  # "auto" (a rich bar on a terminal) | "on" | "off"

    def problems(self) -> list[str]:
        """The logging options' values. Whether wandb online has credentials, the preflight says."""
        lines = []
        if self.wandb not in WANDB_MODES:
            lines.append(invalid("logging.wandb", self.wandb, "one of " + ", ".join(WANDB_MODES)))
        # wandb refuses a longer tag at init, after the run began: refused here, before
        if not all(0 < len(str(tag)) <= WANDB_TAG_MAX for tag in self.wandb_tags):
            lines.append(invalid("logging.wandb_tags", list(self.wandb_tags),
                                 f"each tag a non-empty string of at most {WANDB_TAG_MAX} characters"))
        if self.progress not in ("auto", "on", "off"):
            lines.append(invalid("logging.progress", self.progress, "one of auto, on, off"))
        return lines


@dataclass
class RunConfig:
    name: str | None = None  # null = "<arm>-<start time>" (dormouse.train.start.default_run_name)
    dir: str = "runs"

    def problems(self) -> list[str]:
        """A run name is a folder under run.dir, never its root or outside it (path parts only)."""
        name = self.name
        if name is None:
            return []
        parts = PurePath(str(name)).parts
        if not parts or PurePath(str(name)).is_absolute() or ".." in parts or "\0" in str(name):
            return [invalid("run.name", name, "a folder name inside run.dir (no '..', not absolute, not empty)")]
        return []


SECTIONS: tuple[tuple[str, type], ...] = (("data", DataConfig), ("train", TrainConfig), ("logging", LoggingConfig),
                                         ("run", RunConfig))


def schema() -> type:
    """``DormouseConfig`` with ``ModelConfig`` built from the registered arms' specs, in registry order."""
    return _schema(tuple(arm_specs().values()))


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


# Composed configs by what decides them (see compose_config); a dict keeps insertion order, so the oldest goes first.
_COMPOSED: dict[tuple, DictConfig] = {}
_COMPOSED_MAX = 512


def compose_config(overrides: list[str] | None = None, config_name: str = "config") -> DictConfig:
    """Compose ``conf/config.yaml`` with overrides in struct mode; Hydra's errors become ConfigError.

    A composition is a pure function of the overrides, the user's preset files, the arm registry (the schema)
    and the files of ``conf/``: one process composes each set once (a comparison composes every arm at each
    plan, ~0.15 s each with Hydra) and hands out copies, so no caller's edit reaches another's config."""
    from dormouse.config.overrides import check_overrides

    asked = list(overrides or [])
    overrides, user_presets, preset_texts = _user_preset_files(asked)
    key = (config_name, tuple(asked), tuple(preset_texts), schema(), _conf_files_signature())
    if key in _COMPOSED:
        return copy.deepcopy(_COMPOSED[key])
    register_configs()
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
    if len(_COMPOSED) >= _COMPOSED_MAX:
        del _COMPOSED[next(iter(_COMPOSED))]
    _COMPOSED[key] = copy.deepcopy(cfg)
    return cfg


def _conf_files_signature() -> tuple[tuple[str, int, int], ...]:
    """Each file of the ``dormouse.conf`` package by path, modification time and size: an edited preset or
    default composes again."""
    import dormouse.conf

    return files_signature([Path(d) for d in dormouse.conf.__path__])


def files_signature(roots: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of every file under ``roots``, sorted."""
    out = []
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                st = os.stat(os.path.join(folder, name))
                out.append((os.path.join(folder, name), st.st_mtime_ns, st.st_size))
    return tuple(sorted(out))


def is_preset_file(value: str) -> bool:
    """``preset=VALUE`` names a user's own preset file (a path), not one of conf/preset/*.yaml."""
    return value.endswith((".yaml", ".yml")) or "/" in value or os.sep in value


def _user_preset_files(overrides: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Store ``preset=./my.yaml`` files as ``preset`` group options; the rewritten overrides, the names and each
    file's values as YAML (what the composition read)."""
    out, stored, texts = [], [], []
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
        texts.append(OmegaConf.to_yaml(node))
    return out, stored, texts


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


def validate(cfg: DictConfig, world_size: int = 1) -> list[str]:
    """Every problem with ``cfg``'s values for ``world_size`` ranks, one line each; pure."""
    return [*ModelBase.problems(cfg.model), *DataConfig.problems(cfg.data),
            *TrainConfig.problems(cfg.train, world_size), *RunConfig.problems(cfg.run),
            *LoggingConfig.problems(cfg.logging)]


def _arm_problems(m: Any) -> list[str]:
    """The arm switches (at most one on) and every registered arm's own checks of its options."""
    from dormouse.arms.registry import default_arm

    lines: list[str] = []
    classes = arm_specs()
    chosen = selected_arms(m)
    if len(chosen) > 1:
        switches = [f"model.{cls.switch()}" for cls in classes.values() if cls.switch()]
        lines.append(
            f"{' and '.join(f'model.{arm_switch(a)}=true' for a in chosen)}: the arms are mutually exclusive; "
            f"set at most one of {', '.join(switches)} (all false = {default_arm()})"
        )
    for name, cls in classes.items():
        # an option whose default fails the arm's own check is the plugin's defect, not the user's value
        lines += option_default_problems(cls) or cls.config_problems(
            m, selected=name in chosen or (not chosen and cls.default))
    return lines


@functools.cache
def option_default_problems(cls: type) -> tuple[str, ...]:
    """One line per problem a plugin arm's own check finds in its options' defaults (the default model config,
    the arm selected or not), naming the plugin and the option: refused when the plugin loads, as a value no
    user typed. None for a built-in arm (tests/config checks theirs)."""
    from dormouse.arms.plugins import plugin_of_arm
    from dormouse.arms.registry import BUILTIN_ARMS, source_file

    if cls.name in BUILTIN_ARMS or not cls.options:
        return ()
    defaults = OmegaConf.structured(fields_of(schema())["model"])
    found = dict.fromkeys([*cls.config_problems(defaults, selected=False),
                           *cls.config_problems(defaults, selected=True)])
    plugin = plugin_of_arm(cls.name)
    module, file = (plugin.module, plugin.file) if plugin else (cls.__module__, source_file(cls))
    keys = [f"model.{cls.name}.{f.name}" for f in dataclass_fields(cls.options)]
    return tuple(f"the default of plugin {module}'s option "
                 f"{' / '.join(k for k in keys if k in line) or ' / '.join(keys)} is invalid ({line}): change the "
                 f"default in {file}" for line in found)


def load_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose and validate; ConfigError with every bad field. A resume's defaults are applied later."""
    cfg = compose_config(overrides)
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg
