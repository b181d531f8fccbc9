"""Registered comparisons: ``conf/ab/NAME.yaml`` (installed as ``dormouse.conf`` / ``ab``).

Registering a comparison before running it is the point of the protocol (docs/ab-protocol.md): arms, seeds,
the minimum effect and everything held fixed are written down first, so nothing can be tuned after the
results are seen. The file is schema-checked with the typed dataclass :class:`ComparisonSpec` through
``OmegaConf.structured`` and then validated; a bad file is refused before any run, with the field named.

Schema (every key; unknown keys are refused)::

    name: residual                 # must equal the file name
    description: "..."             # free text, copied into the report
    metric: bpb                    # the only metric: final eval bpb at the final depth
    baseline: rezero               # an arm name
    aa_arm: rezero_aa              # optional: the baseline again with another data-order stream (noise)
    min_effect: 0.01               # registered minimum effect δ, in bpb
    seeds: [1, 2, 3]               # train.seed of each pair; every arm runs every seed
    fixed: [preset=9m, ...]        # overrides applied to every run (before the arm's own)
    arms:                          # arm name -> its overrides (the baseline's list is usually empty)
      rezero: []
      gr: [model.use_gr=true]
    extension: "..."               # the rule, fixed in advance, for adding seeds after a first look
    extension_comparison: name_ext # optional: the registered comparison that rule runs (the report names
                                   # `dormouse ab name_ext` for an undecided arm); it must differ from this
                                   # one only in name, description, seeds (a superset) and extension fields
"""

from __future__ import annotations

import hashlib
import importlib.resources
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

REGISTRY_PACKAGE = "dormouse.conf"
REGISTRY_DIR = "ab"

# Keys the runner sets for every pair; a registered file or CLI override that sets them would break the
# pairing (seed), the directory layout (run.*), resumption (train.resume) or the wandb grouping.
RUNNER_KEYS = (
    "run.dir",
    "run.name",
    "train.seed",
    "train.resume",
    "train.overwrite",
    "logging.wandb_group",
    "logging.wandb_job_type",
)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class ComparisonSpec:
    """The typed schema of a registered comparison (see the module docstring)."""

    name: str = MISSING
    description: str = ""
    metric: str = "bpb"
    baseline: str = MISSING
    aa_arm: str | None = None
    min_effect: float = MISSING
    seeds: list[int] = MISSING
    fixed: list[str] = field(default_factory=list)
    arms: dict[str, list[str]] = MISSING
    extension: str = ""
    extension_comparison: str | None = None


# Fields an extension comparison may change (seeds only grow); everything else is what was registered.
EXTENSION_MAY_DIFFER = ("name", "description", "seeds", "extension", "extension_comparison")


class ComparisonError(ValueError):
    """A comparison that cannot run or continue. ``lines`` holds one message per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


class ABSpecError(ComparisonError):
    """A registered comparison file that is missing, malformed or inconsistent (the field is named)."""


@dataclass
class Registered:
    """A loaded registered comparison: the typed spec, its file's text and where it came from."""

    spec: ComparisonSpec
    text: str
    source: str  # a path or "dormouse.conf/ab/NAME.yaml"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def override_key(override: str) -> str:
    """The config key an override sets: ``'model.use_gr=true'`` -> ``'model.use_gr'``."""
    return override.partition("=")[0].lstrip("+~")


def list_comparisons(registry: Path | None = None) -> list[str]:
    """Names of the registered comparisons (the YAML files in the registry directory)."""
    root = registry if registry is not None else importlib.resources.files(REGISTRY_PACKAGE) / REGISTRY_DIR
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def _read_text(name: str, registry: Path | None) -> tuple[str, str]:
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():  # a file outside the registry
        return Path(name).read_text(encoding="utf-8"), str(Path(name))
    if not _SAFE_NAME.match(name):
        raise ABSpecError([f"comparison name {name!r} is not a plain name (letters, digits, _ . -)"])
    if registry is not None:
        path = Path(registry) / f"{name}.yaml"
        source = str(path)
        exists = path.is_file()
    else:
        path = importlib.resources.files(REGISTRY_PACKAGE) / REGISTRY_DIR / f"{name}.yaml"
        source = f"{REGISTRY_PACKAGE}/{REGISTRY_DIR}/{name}.yaml"
        exists = path.is_file()
    if not exists:
        known = ", ".join(list_comparisons(registry)) or "none"
        raise ABSpecError([f"no registered comparison {name!r} ({source} does not exist); "
                           f"registered: {known}"])
    return path.read_text(encoding="utf-8"), source


def parse_spec(text: str, source: str) -> ComparisonSpec:
    """Schema-check YAML text against :class:`ComparisonSpec`; :class:`ABSpecError` names the field."""
    try:
        raw = OmegaConf.create(text)
    except Exception as exc:
        raise ABSpecError([f"{source}: not valid YAML: {exc}"]) from exc
    if not OmegaConf.is_dict(raw):
        raise ABSpecError([f"{source}: expected a mapping of the fields {', '.join(_fields())}"])
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(ComparisonSpec), raw)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        raise ABSpecError([f"{source}: field '{key}': {msg} (fields: {', '.join(_fields())})"]) from exc
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ABSpecError([f"{source}: field '{k}' is required" for k in missing])
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def _fields() -> list[str]:
    return list(ComparisonSpec.__dataclass_fields__)


def validate_spec(spec: ComparisonSpec, source: str, expected_name: str | None = None) -> list[str]:
    """Every problem with a schema-valid spec, one line each naming the field. Empty = runnable.

    Override values are checked later, by composing every pair's config before the first run.
    """
    lines: list[str] = []

    def bad(key: str, msg: str) -> None:
        lines.append(f"{source}: field '{key}': {msg}")

    if not _SAFE_NAME.match(spec.name):
        bad("name", f"{spec.name!r} must be a plain name (letters, digits, _ . -)")
    elif expected_name is not None and spec.name != expected_name:
        bad("name", f"{spec.name!r} must equal the file name {expected_name!r}")
    if spec.metric != "bpb":
        bad("metric", f"{spec.metric!r} is not supported; the protocol's metric is 'bpb'")
    if not spec.arms:
        bad("arms", "no arms")
    for arm, overrides in spec.arms.items():
        if not _SAFE_NAME.match(arm):
            bad(f"arms.{arm}", "an arm name must be a plain name (letters, digits, _ . -): "
                "it names directories")
        for o in overrides:
            if "=" not in o:
                bad(f"arms.{arm}", f"override {o!r} is not key=value")
            elif override_key(o) in RUNNER_KEYS:
                bad(f"arms.{arm}", f"override {o!r} sets a key the runner owns ({', '.join(RUNNER_KEYS)})")
    for o in spec.fixed:
        if "=" not in o:
            bad("fixed", f"override {o!r} is not key=value")
        elif override_key(o) in RUNNER_KEYS:
            bad("fixed", f"override {o!r} sets a key the runner owns ({', '.join(RUNNER_KEYS)})")
    if spec.baseline not in spec.arms:
        bad("baseline", f"{spec.baseline!r} is not one of the arms ({', '.join(spec.arms)})")
    if spec.aa_arm is not None:
        if spec.aa_arm not in spec.arms:
            bad("aa_arm", f"{spec.aa_arm!r} is not one of the arms ({', '.join(spec.arms)})")
        elif spec.aa_arm == spec.baseline:
            bad("aa_arm", "must differ from the baseline (it is the baseline again with another data-order stream)")
    tested = [a for a in spec.arms if a not in (spec.baseline, spec.aa_arm)]
    if spec.arms and not tested:
        bad("arms", "no arm to compare with the baseline")
    if not spec.seeds:
        bad("seeds", "at least one seed is required")
    elif len(set(spec.seeds)) != len(spec.seeds):
        bad("seeds", f"{spec.seeds} repeats a seed; paired differences need distinct seeds")
    if not (math.isfinite(spec.min_effect) and spec.min_effect >= 0):
        bad("min_effect", f"{spec.min_effect} must be a finite number >= 0 (bpb)")
    if spec.extension_comparison is not None:
        if not _SAFE_NAME.match(spec.extension_comparison):
            bad("extension_comparison", f"{spec.extension_comparison!r} must be a plain name")
        elif spec.extension_comparison == spec.name:
            bad("extension_comparison", "must name another registered comparison, not this one")
    return lines


def extension_problems(spec: ComparisonSpec, ext: ComparisonSpec, source: str) -> list[str]:
    """Why ``ext`` is not a faithful extension of ``spec``: it may add seeds and nothing else."""
    lines = []
    for key in ComparisonSpec.__dataclass_fields__:
        if key not in EXTENSION_MAY_DIFFER and getattr(spec, key) != getattr(ext, key):
            lines.append(f"{source}: field 'extension_comparison': {ext.name!r} changes {key!r} "
                         f"({getattr(spec, key)!r} -> {getattr(ext, key)!r}); an extension adds seeds only")
    if not set(spec.seeds) < set(ext.seeds):
        lines.append(f"{source}: field 'extension_comparison': {ext.name!r} has seeds {ext.seeds}, which must "
                     f"strictly contain this comparison's {spec.seeds}")
    return lines


def load_spec(name: str, registry: Path | None = None) -> Registered:
    """Load, schema-check and validate registered comparison ``name``.

    ``registry`` is a directory of ``NAME.yaml`` files (default: the installed ``dormouse.conf/ab``);
    ``name`` may also be the path of a YAML file. Raises :class:`ABSpecError`.
    """
    text, source = _read_text(name, registry)
    spec = parse_spec(text, source)
    expected = None if name.endswith((".yaml", ".yml")) else name
    problems = validate_spec(spec, source, expected)
    if not problems and spec.extension_comparison is not None:
        try:
            ext_text, ext_source = _read_text(spec.extension_comparison, registry)
            ext = parse_spec(ext_text, ext_source)
        except ABSpecError as exc:
            problems += [f"{source}: field 'extension_comparison': {line}" for line in exc.lines]
        else:
            problems += extension_problems(spec, ext, source)
    if problems:
        raise ABSpecError(problems)
    return Registered(spec=spec, text=text, source=source)
