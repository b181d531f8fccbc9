"""Registered comparisons: ``conf/ab/NAME.yaml`` (installed as ``dormouse.conf`` / ``ab``), written down
before any run so nothing is tuned after the results are seen. Each file is schema-checked through
``OmegaConf.structured`` and validated; a bad file is refused before any run, with the field named. Every
key is documented in docs/ab-protocol.md ("The registration file"); protocol 1 is read only."""

from __future__ import annotations

import difflib
import hashlib
import importlib.resources
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dormouse.ab.comparison.budget import BudgetSpec, budget_owned_keys
from dormouse.ab.rule.family import BONFERRONI
from dormouse.ab.rule.sequential import Design
from dormouse.ab.tune.rule import RULES, Bracketing, grid_ratio
from dormouse.arms.plugins import PluginError, load_plugin
from dormouse.errors import DormouseError

REGISTRY_PACKAGE = "dormouse.conf"
REGISTRY_DIR = "ab"
PROTOCOL = 2  # what `dormouse ab` runs; protocol 1 is read only

# Keys the runner sets for every run; a registered file or CLI override that sets them would break the
# pairing (seeds), the directory layout (run.*), resumption (train.resume) or the wandb grouping.
RUNNER_KEYS = (
    "run.dir",
    "run.name",
    "train.seed",
    "train.data_seed",
    "train.resume",
    "train.overwrite",
    "logging.wandb_group",
    "logging.wandb_job_type",
)
# Protocol 1 let an arm set its data-order seed (its A/A arm did); the runner owned the rest.
RUNNER_KEYS_V1 = tuple(k for k in RUNNER_KEYS if k != "train.data_seed")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class TuneSpec:
    """The optional ``tune:`` block of a protocol-2 registration (docs/ab-protocol.md, "The tune stage")."""

    lrs: list[float] = MISSING
    replicates: int = 1
    init_seed_base: int = MISSING
    data_seed_base: int = MISSING
    rule: str = "lowest_mean_final_bpb"
    extensions: int = 0  # max grid points added per arm (0: the grid only)
    second_seed_gap: float | None = None  # bpb; None: no second tune seed

    def bracketing(self) -> Bracketing:
        """The registered stage as the rule reads it (dormouse/ab/tune/rule.py)."""
        return Bracketing(grid=tuple(float(x) for x in self.lrs), replicates=int(self.replicates),
                          extensions=int(self.extensions),
                          second_seed_gap=None if self.second_seed_gap is None else float(self.second_seed_gap))

    def streams(self) -> dict[str, range]:
        """Field -> the seeds it uses (a second seed is one more: tune replicate R)."""
        n = self.replicates + (1 if self.second_seed_gap is not None else 0)
        return {"tune.init_seed_base": range(self.init_seed_base, self.init_seed_base + n),
                "tune.data_seed_base": range(self.data_seed_base, self.data_seed_base + n)}


@dataclass
class BadModeSpec:
    """The optional ``bad_mode:`` block (docs/ab-protocol.md, "Bad modes"): the early marker, reported only."""

    at_fraction: float = MISSING  # in (0, 1]: the first eval at or after this share of a run's steps
    margin: float = MISSING  # bpb above the arm's median at that eval


@dataclass
class ContrastSpec:
    """The optional ``contrast:`` block (docs/ab-protocol.md, "A registered contrast"): two tested arms compared
    directly, paired by replicate, as their own family of one test with their own smallest effect."""

    arm: str = MISSING  # Δ_i = bpb(arm) − bpb(against): negative means ``arm`` is better
    against: str = MISSING
    sesoi: float = MISSING  # bpb: the contrast's own equivalence margin
    pilot_sd: float = MISSING  # sd of the paired differences arm − against the contrast's card simulates
    expected_effect: float = MISSING  # bpb, arm − against: where the contrast's card states its power


@dataclass
class ComparisonSpec:
    """A protocol-2 registered comparison (docs/ab-protocol.md, "The registration file")."""

    protocol: int = PROTOCOL
    name: str = MISSING
    description: str = ""
    metric: str = "bpb"
    baseline: str = MISSING
    aa_arm: str | None = None
    sesoi: float = MISSING
    alpha: float = 0.05
    alpha_holdback: float = 1.0
    looks: list[int] = MISSING
    init_seed_base: int = MISSING
    data_seed_base: int = MISSING
    aa_data_seed_base: int | None = None
    pilot_sd: float = MISSING
    expected_effect: float = MISSING
    bad_run_ceiling: float | None = None
    bad_run_replacements: int = 0
    fixed: list[str] = field(default_factory=list)
    arms: dict[str, list[str]] = MISSING
    tune: TuneSpec | None = None
    plugins: list[str] = field(default_factory=list)
    budget: BudgetSpec | None = None  # null: every arm trains for train.steps
    reference: str | None = None  # null or "baseline"; "baseline_and_aa": the mean of the baseline and its A/A repeat
    bad_mode: BadModeSpec | None = None  # null: no bad-mode marker
    multiplicity: str | None = None  # null or "bonferroni"; "holm": each kind of claim by Holm's step-down
    contrast: ContrastSpec | None = None  # null: every arm is compared with the baseline only

    def design(self) -> Design:
        """The registered sequential design; the family (the tested arms) is fixed here."""
        return Design(alpha=float(self.alpha), sesoi=float(self.sesoi), looks=tuple(int(n) for n in self.looks),
                      n_arms=len(self.tested), alpha_holdback=float(self.alpha_holdback),
                      multiplicity=self.multiplicity or BONFERRONI)

    @property
    def max_replicates(self) -> int:
        return int(self.looks[-1])

    @property
    def planned_replicates(self) -> int:
        """The replicates the seed streams may reach: the maximum, then the bad-run policy's spares."""
        return self.max_replicates + max(0, int(self.bad_run_replacements))

    @property
    def tested(self) -> list[str]:
        """The arms compared with the baseline: the multiplicity family, fixed here, in registry order."""
        return [a for a in self.arms if a not in (self.baseline, self.aa_arm)]


@dataclass
class ComparisonSpecV1:
    """Protocol 1's schema, read only (the published ``residual_cpu``)."""

    protocol: int = 1
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

    @property
    def tested(self) -> list[str]:
        return [a for a in self.arms if a not in (self.baseline, self.aa_arm)]


AnySpec = ComparisonSpec | ComparisonSpecV1


class ComparisonError(DormouseError, ValueError, exit_code=2):
    """A comparison that cannot run or continue. ``lines`` holds one message per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


class ABSpecError(ComparisonError):
    """A registered comparison file that is missing, malformed or inconsistent (the field is named)."""


@dataclass
class Registered:
    """A loaded registered comparison: the typed spec, its file's text and where it came from."""

    spec: AnySpec
    text: str
    source: str  # a path or "dormouse.conf/ab/NAME.yaml"
    given: str = ""  # what the user named it by: a registered name, or a file's path as typed

    @property
    def argument(self) -> str:
        """How ``dormouse ab`` is told this comparison again, shell-quoted: its path if given by path, else its
        name."""
        return shlex.quote(self.given if _looks_like_path(self.given) else self.spec.name)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def protocol(self) -> int:
        return int(self.spec.protocol)


def override_key(override: str) -> str:
    """``'model.use_gr=true'`` -> ``'model.use_gr'``."""
    return override.partition("=")[0].lstrip("+~")


def list_comparisons(registry: Path | None = None) -> list[str]:
    root = registry if registry is not None else importlib.resources.files(REGISTRY_PACKAGE) / REGISTRY_DIR
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


STUDY_KEY = "study"  # the block that makes a registration a study (dormouse/ab/study/registry.py)


def _looks_like_path(name: str) -> bool:
    """A name with a folder separator or a YAML suffix is a file's path."""
    return "/" in name or "\\" in name or name.endswith((".yaml", ".yml"))


def _read_text(name: str, registry: Path | None) -> tuple[str, str]:
    if _looks_like_path(name):  # a registration file outside the registry
        path_ = Path(name)
        if not path_.is_file() or not name.endswith((".yaml", ".yml")):
            what = "is not a .yaml file" if path_.is_file() else ("is a folder" if path_.is_dir() else
                                                                  "does not exist")
            raise ABSpecError([f"registration file {name} {what}: a comparison is a registered name under "
                               f"conf/ab ({', '.join(list_comparisons(registry)) or 'none'}) or the path of an "
                               "existing NAME.yaml file with the same fields"])
        return path_.read_text(encoding="utf-8"), str(path_)
    if not _SAFE_NAME.match(name):
        raise ABSpecError([f"comparison name {name!r} is not a plain name (letters, digits, _ . -)"])
    if registry is not None:
        path: Any = Path(registry) / f"{name}.yaml"
        source = str(path)
    else:
        path = importlib.resources.files(REGISTRY_PACKAGE) / REGISTRY_DIR / f"{name}.yaml"
        source = f"{REGISTRY_PACKAGE}/{REGISTRY_DIR}/{name}.yaml"
    if not path.is_file():
        names = list_comparisons(registry)
        # 0.6 (difflib's default): one or two letters off in a short name (smok/smoke 0.89, residul 0.93)
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise ABSpecError([f"no registered comparison {name!r} ({source} does not exist){hint} "
                           f"registered: {', '.join(names) or 'none'} (dormouse ab list)"])
    return path.read_text(encoding="utf-8"), source


def is_study_text(text: str) -> bool:
    try:
        raw = OmegaConf.create(text)
    except Exception:
        return False  # not YAML: parse_spec says so, naming the file
    return OmegaConf.is_dict(raw) and STUDY_KEY in raw


def is_study(name: str, registry: Path | None = None) -> bool:
    """Whether ``name`` (a name or a path) is a study; a missing one is not (the comparison loader says so)."""
    try:
        text, _ = _read_text(name, registry)
    except ABSpecError:
        return False
    return is_study_text(text)


def parse_spec(text: str, source: str) -> AnySpec:
    """Schema-check YAML text against its protocol's dataclass; :class:`ABSpecError` names the field."""
    try:
        raw = OmegaConf.create(text)
    except Exception as exc:
        raise ABSpecError([f"{source}: not valid YAML: {exc}"]) from exc
    if not OmegaConf.is_dict(raw):
        raise ABSpecError([f"{source}: expected a mapping of the fields {', '.join(_fields(ComparisonSpec))}"])
    if STUDY_KEY in raw:  # the study's loader reads this block (dormouse/ab/study/registry.py); a comparison has none
        raise ABSpecError([f"{source} is a registered study (it has a 'study' block), not one comparison: run it "
                           "as `dormouse ab NAME` (dormouse.ab.study.registry.load_study reads it)"])
    protocol = raw.get("protocol", 1)
    schema: type = {1: ComparisonSpecV1, 2: ComparisonSpec}.get(protocol)  # type: ignore[assignment]
    if schema is None:
        raise ABSpecError([f"{source}: field 'protocol': {protocol!r} is not 1 (read only) or 2"])
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(schema), raw)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        raise ABSpecError([f"{source}: field '{key}': {msg} (protocol {protocol} fields: "
                           f"{', '.join(_fields(schema))})"]) from exc
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ABSpecError([f"{source}: field '{k}' is required" for k in missing])
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def _fields(schema: type) -> list[str]:
    return list(schema.__dataclass_fields__)


def _common_problems(spec: AnySpec, bad: Any, expected_name: str | None, runner_keys: tuple[str, ...]) -> None:
    """The checks both protocols share: names, metric, arms and their overrides, baseline, A/A arm."""
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
            elif override_key(o) in runner_keys:
                bad(f"arms.{arm}", f"override {o!r} sets a key the runner owns ({', '.join(runner_keys)})")
    for o in spec.fixed:
        if "=" not in o:
            bad("fixed", f"override {o!r} is not key=value")
        elif override_key(o) in runner_keys:
            bad("fixed", f"override {o!r} sets a key the runner owns ({', '.join(runner_keys)})")
    if spec.baseline not in spec.arms:
        bad("baseline", f"{spec.baseline!r} is not one of the arms ({', '.join(spec.arms)})")
    if spec.aa_arm is not None:
        if spec.aa_arm not in spec.arms:
            bad("aa_arm", f"{spec.aa_arm!r} is not one of the arms ({', '.join(spec.arms)})")
        elif spec.aa_arm == spec.baseline:
            bad("aa_arm", "must differ from the baseline (it is the baseline again with another data-order stream)")
    if spec.arms and not spec.tested:
        bad("arms", "no arm to compare with the baseline")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _v2_problems(spec: ComparisonSpec, bad: Any) -> None:
    """Protocol 2's own fields: the smallest effect, α, the looks, the seed streams, the design inputs."""
    problems = dict(spec.design().field_problems())
    for name in ("sesoi", "alpha", "alpha_holdback", "looks", "multiplicity"):  # the family size: _common_problems
        if name in problems:
            bad(name, problems[name])
    looks = list(spec.looks)
    if not (_finite(spec.pilot_sd) and spec.pilot_sd > 0):
        bad("pilot_sd", f"{spec.pilot_sd} must be a finite number > 0 (bpb; the sd of paired differences)")
    if not _finite(spec.expected_effect) or spec.expected_effect == 0:  # the card states power at it
        bad("expected_effect", f"{spec.expected_effect} must be a finite non-zero number (bpb)")
    if spec.bad_run_ceiling is not None and not (_finite(spec.bad_run_ceiling) and spec.bad_run_ceiling > 0):
        bad("bad_run_ceiling", f"{spec.bad_run_ceiling} must be a finite number > 0 (bpb) or null")
    if spec.bad_run_replacements < 0:
        bad("bad_run_replacements", f"{spec.bad_run_replacements} must be >= 0 (0: no bad-run policy)")
    elif spec.bad_run_replacements and spec.bad_run_ceiling is None:
        bad("bad_run_replacements", f"{spec.bad_run_replacements} needs a bad_run_ceiling: the policy replaces "
            "runs that ended above it")
    for key in ("init_seed_base", "data_seed_base", "aa_data_seed_base"):
        value = getattr(spec, key)
        if value is not None and value < 0:
            bad(key, f"{value} must be >= 0")
    if spec.aa_arm is not None and spec.aa_arm in spec.arms and spec.baseline in spec.arms:
        if spec.aa_data_seed_base is None:
            bad("aa_data_seed_base", f"required with aa_arm {spec.aa_arm!r}: the A/A arm's own data-order stream")
        elif looks:
            n = looks[-1] + max(0, spec.bad_run_replacements)  # the spares' streams too
            lo, hi = spec.aa_data_seed_base, spec.aa_data_seed_base + n - 1
            if lo <= spec.data_seed_base + n - 1 and spec.data_seed_base <= hi:
                bad("aa_data_seed_base", f"the A/A data seeds {lo}..{hi} overlap the arms' data seeds "
                    f"{spec.data_seed_base}..{spec.data_seed_base + n - 1}: an A/A replicate would share its "
                    "baseline's data order")
        if list(spec.arms[spec.aa_arm]) != list(spec.arms[spec.baseline]):
            bad(f"arms.{spec.aa_arm}", f"the A/A arm is the baseline again: its overrides "
                f"{list(spec.arms[spec.aa_arm])} must equal {spec.baseline!r}'s {list(spec.arms[spec.baseline])} "
                "(the runner gives it its own data-order stream)")
    elif spec.aa_arm is None and spec.aa_data_seed_base is not None:
        bad("aa_data_seed_base", "set without an aa_arm")
    if spec.tune is not None:
        _tune_problems(spec, spec.tune, bad)
    if spec.budget is not None:
        _budget_problems(spec, spec.budget, bad)
    if spec.bad_mode is not None:
        if not (_finite(spec.bad_mode.at_fraction) and 0 < spec.bad_mode.at_fraction <= 1):
            bad("bad_mode.at_fraction", f"{spec.bad_mode.at_fraction} must be in (0, 1] (a share of each run's steps)")
        if not (_finite(spec.bad_mode.margin) and spec.bad_mode.margin > 0):
            bad("bad_mode.margin", f"{spec.bad_mode.margin} must be a finite number > 0 (bpb above the arm's median)")
    _reference_problems(spec, bad)
    if spec.contrast is not None:
        _contrast_problems(spec, spec.contrast, bad)


def _contrast_problems(spec: ComparisonSpec, contrast: ContrastSpec, bad: Any) -> None:
    """Two distinct tested arms, the contrast's own design inputs, and no spare replicates (unpaired)."""
    for key in ("arm", "against"):
        name = getattr(contrast, key)
        if name not in spec.tested:
            bad(f"contrast.{key}", f"{name!r} is not a tested arm ({', '.join(spec.tested)}): the baseline and the "
                "A/A arm are compared with every arm already")
    if contrast.arm == contrast.against:
        bad("contrast.against", f"{contrast.against!r} is the contrast's arm too: a contrast needs two arms")
    if not (_finite(contrast.sesoi) and contrast.sesoi > 0):
        bad("contrast.sesoi", f"{contrast.sesoi} must be a finite number > 0 (bpb): equivalence needs a margin")
    if not (_finite(contrast.pilot_sd) and contrast.pilot_sd > 0):
        bad("contrast.pilot_sd", f"{contrast.pilot_sd} must be a finite number > 0 (bpb; the sd of arm − against)")
    if not _finite(contrast.expected_effect) or contrast.expected_effect == 0:
        bad("contrast.expected_effect", f"{contrast.expected_effect} must be a finite non-zero number (bpb)")
    if spec.bad_run_replacements:
        bad("contrast", "a contrast with bad_run_replacements: a spare replicate of one arm has no partner run "
            "of the other; register one or the other")


MEAN_REFERENCE = "baseline_and_aa"  # the per-replicate mean of the baseline and its A/A repeat
REFERENCES = ("baseline", MEAN_REFERENCE)  # what each tested arm's paired difference is taken against


def against_the_mean(spec: object) -> bool:
    """Whether a registration decides its tested arms against the mean reference (protocol 1: never)."""
    return getattr(spec, "reference", None) == MEAN_REFERENCE


def _reference_problems(spec: ComparisonSpec, bad: Any) -> None:
    """The mean reference needs the A/A arm, and no spare replicates (a spare's A/A run is not made)."""
    if spec.reference is None:
        return
    if spec.reference not in REFERENCES:
        bad("reference", f"{spec.reference!r} is not one of {', '.join(REFERENCES)}")
    elif against_the_mean(spec):
        if spec.aa_arm is None:
            bad("reference", "baseline_and_aa needs an aa_arm: the reference is the mean of the two")
        if spec.bad_run_replacements:
            bad("reference", "baseline_and_aa with bad_run_replacements: a spare replicate has no A/A run to "
                "average; register one or the other")


def _budget_problems(spec: ComparisonSpec, budget: BudgetSpec, bad: Any) -> None:
    """The budget's own fields; nothing else may set the steps it sets, nor an arm its own eval spacing under
    flops or tokens (the fixed ``train.eval_every`` spaces the baseline's evals, which sets their count)."""
    problems = budget.problems()
    for key, problem in problems:
        bad(key, problem)
    if any(key.endswith(".unit") for key, _ in problems):
        return
    setters = [("fixed", o) for o in spec.fixed] + [(f"arms.{a}", o) for a, ovs in spec.arms.items() for o in ovs]
    for where, o in setters:
        key = override_key(o)
        if key in budget_owned_keys(budget, where == "fixed"):
            bad(where, f"override {o!r} sets {key}, which budget (unit {budget.unit}) sets for every arm")


TUNED_KEY = "train.lr"  # the key the tune stage chooses per arm: nothing else may set it


def _tune_problems(spec: ComparisonSpec, tune: TuneSpec, bad: Any) -> None:
    """The tune stage: distinct positive lrs, a known rule, seed streams disjoint from the confirmatory ones (a tune
    run must never be a confirmatory run), and nothing else setting train.lr."""
    lrs = list(tune.lrs)
    if not lrs:
        bad("tune.lrs", "at least one learning rate is required")
    elif not all(_finite(x) and x > 0 for x in lrs) or len(set(lrs)) != len(lrs):
        bad("tune.lrs", f"{lrs} must be distinct finite numbers > 0")
    if tune.replicates < 1:
        bad("tune.replicates", f"{tune.replicates} must be >= 1")
    if tune.rule not in RULES:
        bad("tune.rule", f"{tune.rule!r} is not a known rule ({', '.join(RULES)})")
    _bracketing_problems(tune, bad)
    for key in ("init_seed_base", "data_seed_base"):
        if getattr(tune, key) < 0:
            bad(f"tune.{key}", f"{getattr(tune, key)} must be >= 0")
    n = spec.planned_replicates if list(spec.looks) else 0
    confirmatory = {"init_seed_base": ("tune.init_seed_base", spec.init_seed_base),
                    "data_seed_base": ("tune.data_seed_base", spec.data_seed_base),
                    "aa_data_seed_base": ("tune.data_seed_base", spec.aa_data_seed_base)}
    streams = tune.streams()
    for field_name, (tune_field, base) in confirmatory.items():
        if base is None or n == 0:
            continue
        ours, theirs = streams[tune_field], range(base, base + n)
        if ours and max(ours.start, theirs.start) < min(ours.stop, theirs.stop):
            bad(tune_field, f"the tune seeds {ours.start}..{ours.stop - 1} overlap the confirmatory "
                f"'{field_name}' seeds {theirs.start}..{theirs.stop - 1}: a tune run would repeat a confirmatory "
                "replicate's stream; move the tune stream clear of it")
    setters = [("fixed", o) for o in spec.fixed] + [(f"arms.{a}", o) for a, ovs in spec.arms.items() for o in ovs]
    for where, o in setters:
        if override_key(o) == TUNED_KEY:
            bad(where, f"override {o!r} sets {TUNED_KEY}, which the tune stage chooses per arm")


def _bracketing_problems(tune: TuneSpec, bad: Any) -> None:
    """Extensions need a geometric grid (its next point beyond an edge); the second-seed gap is positive."""
    if tune.extensions < 0:
        bad("tune.extensions", f"{tune.extensions} must be >= 0")
    elif tune.extensions > 0 and grid_ratio([float(x) for x in tune.lrs]) is None:
        bad("tune.lrs", f"{list(tune.lrs)} must be a geometric grid (>= 2 points, ascending, one constant ratio) "
            f"for tune.extensions={tune.extensions}: an extension is the grid's next point beyond its edge")
    gap = tune.second_seed_gap
    if gap is not None and not (_finite(gap) and gap > 0):
        bad("tune.second_seed_gap", f"{gap} must be a finite number > 0 (bpb), or null for no second seed")


def _v1_problems(spec: ComparisonSpecV1, bad: Any) -> None:
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


def validate_spec(spec: AnySpec, source: str, expected_name: str | None = None) -> list[str]:
    """Every problem of a schema-valid spec, one line each naming the field; override values are checked later, when
    every run's config is composed."""
    lines: list[str] = []

    def bad(key: str, msg: str) -> None:
        lines.append(f"{source}: field '{key}': {msg}")

    if isinstance(spec, ComparisonSpec):
        _common_problems(spec, bad, expected_name, RUNNER_KEYS)
        _v2_problems(spec, bad)
    else:
        _common_problems(spec, bad, expected_name, RUNNER_KEYS_V1)
        _v1_problems(spec, bad)
    return lines


def _load_plugins(spec: AnySpec, name: str, registry: Path | None, source: str) -> None:
    """Load the registration's plugins (paths relative to its file) before its arms' overrides are composed."""
    if not getattr(spec, "plugins", None):
        return
    # ``source`` is the registration's path, except for a shipped one (read from the installed package)
    shipped = registry is None and not _looks_like_path(name)
    base = (Path(str(importlib.resources.files(REGISTRY_PACKAGE) / REGISTRY_DIR)) if shipped
            else Path(source).resolve().parent)
    for i, plugin in enumerate(spec.plugins):
        try:
            load_plugin(plugin, f"{source}, field 'plugins'", base=base)
        except PluginError as exc:
            raise ABSpecError([f"{source}: field 'plugins[{i}]': {exc}"]) from None


def load_spec(name: str, registry: Path | None = None) -> Registered:
    """Load, schema-check and validate comparison ``name`` (or a YAML path) from ``registry`` (default the installed
    ``dormouse.conf/ab``). Raises :class:`ABSpecError`."""
    text, source = _read_text(name, registry)
    spec = parse_spec(text, source)
    _load_plugins(spec, name, registry, source)
    expected = None if name.endswith((".yaml", ".yml")) else name
    problems = validate_spec(spec, source, expected)
    if problems:
        raise ABSpecError(problems)
    return Registered(spec=spec, text=text, source=source, given=name)
