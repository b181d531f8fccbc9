"""Where things live on disk: the one owner of the file names in run, comparison and study directories.

A run, ``<run.dir>/<run.name>/``::

    config.yaml       the resolved config the run trained with
    provenance.json   commit, versions, device, dtype, kernel path, corpus hash, parameter counts, plugin
    train.log         provenance header, then eval / resume / interrupted / done lines (dormouse.run.loglines)
    metrics.jsonl     one row per eval line
    checkpoints/      step_XXXXXXXX.pt
    <arm plot>.png    what the arm learned (the arm's ``plot_file``)
    wandb_id.txt      with logging.wandb on: the wandb run id a resume continues
    run.lock          held by the `dormouse train` writing the run; names its pid
    ab_error.txt      the traceback of an error `dormouse ab` caught in this run

A comparison, ``<root>/<name>/``: one run per run, ``<arm>-s<init seed>``, plus ``registration.json``,
``design.json``, ``results.json``, ``report.md``, plots, and the launch records::

    ab.lock           held by the running `dormouse ab`; names its pid and host
    locks/RUN.lock   held by whichever process trains the run
    launch/RUN.json  the run's attempts: where, threads, launcher, how it ended
    launch/RUN.out   a worker's or cluster job's output
    launch/RUN.job.json  the cluster job the driver last submitted for the run, and how the driver ended it
    submitit/         submitit's job pickles and logs (--launcher slurm)
    wandb_id.txt      the id of the verdict summary run, when logging to wandb

A study, ``<root>/<study>/``: one comparison per point, ``<axis leaf>-<value>``, plus the same record files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIG = "config.yaml"
PROVENANCE = "provenance.json"
LOG = "train.log"
SWEEP = "sweep.yaml"  # a sweep's folder (dormouse train -m): its settings, one run folder per setting
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
AB_ERROR = "ab_error.txt"
WANDB_ID = "wandb_id.txt"
RUN_LOCK = "run.lock"

PUBLISHED_ROOT = Path("docs/results")  # where `dormouse ab publish` writes NAME/; carry and rerun read it
RERUN_ROOT = Path("runs/rerun")  # where `dormouse ab rerun` trains its run
RUNS_ROOT = Path("runs")  # run.dir's default (conf/config.yaml): where `dormouse logs` looks when given no path
AB_ROOT = Path("runs/ab")  # where `dormouse ab` writes comparisons unless --root says otherwise
REGISTRATION = "registration.json"
DESIGN = "design.json"
RESULTS = "results.json"
REPORT = "report.md"
CURVES_PLOT = "bpb_vs_tokens.png"
DEPTH_PLOT = "bpb_by_depth.png"
FOREST_PLOT = "forest.png"
LR_PLOT = "bpb_vs_lr.png"  # only for a comparison with a tune stage: each arm's final bpb against its tune lrs
LOCK = "ab.lock"
RUN_LOCKS = "locks"
LAUNCH = "launch"
SUBMITIT = "submitit"
DELTA_AXIS_PLOT = "delta_vs_axis.png"  # a study's: each arm's Δ against the baseline at every point of its axis
POINTS_DEPTH_PLOT = "bpb_by_depth_points.png"  # a study's: bpb@k per arm, one panel per point
LOSS_FLOPS_PLOT = "loss_vs_flops.png"  # a width ladder's: each arm's final bpb against training FLOPs, its fitted law
COMPILE_CACHE = "compile_cache"  # torch's own compile caches (Inductor's FX graph and AOTAutograd), per comparison


@dataclass(frozen=True)
class RunFiles:
    """The paths of one run directory."""

    dir: Path

    @classmethod
    def of_checkpoint(cls, checkpoint: Path) -> RunFiles | None:
        """The run a checkpoint file belongs to (``<run>/checkpoints/step_N.pt``); None for a file elsewhere."""
        checkpoint = Path(checkpoint)
        return cls(checkpoint.parent.parent) if checkpoint.parent.name == CHECKPOINTS else None

    @property
    def config(self) -> Path:
        return self.dir / CONFIG

    @property
    def provenance(self) -> Path:
        return self.dir / PROVENANCE

    @property
    def log(self) -> Path:
        return self.dir / LOG

    @property
    def metrics(self) -> Path:
        return self.dir / METRICS

    @property
    def checkpoints(self) -> Path:
        return self.dir / CHECKPOINTS

    @property
    def best_checkpoint(self) -> Path:
        """The lowest-eval-bpb checkpoint (``train.keep_best``); not a ``step_*.pt``, so never pruned or resumed."""
        return self.checkpoints / "best.pt"

    @property
    def ab_error(self) -> Path:
        return self.dir / AB_ERROR

    @property
    def wandb_id(self) -> Path:
        return self.dir / WANDB_ID

    @property
    def lock(self) -> Path:
        return self.dir / RUN_LOCK

    def holds_run(self) -> bool:
        """Whether a run has already written here (its config or its metrics)."""
        return self.config.exists() or self.metrics.exists()


@dataclass(frozen=True)
class ComparisonFiles:
    """The paths of one comparison directory (its runs are ``RunFiles(comp_dir / '<arm>-s<seed>')``)."""

    dir: Path

    @property
    def registration(self) -> Path:
        return self.dir / REGISTRATION

    @property
    def design(self) -> Path:
        return self.dir / DESIGN

    @property
    def results(self) -> Path:
        return self.dir / RESULTS

    @property
    def report(self) -> Path:
        return self.dir / REPORT

    @property
    def curves_plot(self) -> Path:
        return self.dir / CURVES_PLOT

    @property
    def depth_plot(self) -> Path:
        return self.dir / DEPTH_PLOT

    @property
    def forest_plot(self) -> Path:
        return self.dir / FOREST_PLOT

    @property
    def lr_plot(self) -> Path:
        return self.dir / LR_PLOT

    def arm_plot(self, plot_name: str, arm: str) -> Path:
        """An arm's learned-value plot averaged over its seeds: ``attnres_map.png`` -> ``attnres_map_<arm>.png``."""
        stem, _, ext = plot_name.rpartition(".")
        return self.dir / f"{stem}_{arm}.{ext}"

    @property
    def lock(self) -> Path:
        return self.dir / LOCK

    @property
    def run_locks(self) -> Path:
        return self.dir / RUN_LOCKS

    def run_lock(self, run: str) -> Path:
        return self.dir / RUN_LOCKS / f"{run}.lock"

    def launch_record(self, run: str) -> Path:
        return self.dir / LAUNCH / f"{run}.json"

    def launch_output(self, run: str) -> Path:
        return self.dir / LAUNCH / f"{run}.out"

    def launch_job(self, run: str) -> Path:
        return self.dir / LAUNCH / f"{run}.job.json"

    @property
    def submitit(self) -> Path:
        return self.dir / SUBMITIT

    @property
    def compile_cache(self) -> Path:
        return self.dir / COMPILE_CACHE

    def run(self, arm: str, seed: int) -> RunFiles:
        return RunFiles(self.dir / run_name(arm, seed))


@dataclass(frozen=True)
class StudyFiles:
    """The paths of one study directory: a comparison per point and the study's own records and plots."""

    dir: Path

    @property
    def registration(self) -> Path:
        return self.dir / REGISTRATION

    @property
    def design(self) -> Path:
        return self.dir / DESIGN

    @property
    def results(self) -> Path:
        return self.dir / RESULTS

    @property
    def report(self) -> Path:
        return self.dir / REPORT

    @property
    def lock(self) -> Path:
        return self.dir / LOCK

    @property
    def delta_plot(self) -> Path:
        return self.dir / DELTA_AXIS_PLOT

    @property
    def depth_plot(self) -> Path:
        return self.dir / POINTS_DEPTH_PLOT

    def point(self, point: str) -> ComparisonFiles:
        return ComparisonFiles(self.dir / point)


def run_name(arm: str, seed: int) -> str:
    """The run directory name of one (arm, seed) run of a comparison."""
    return f"{arm}-s{seed}"


def published_dir(name: str) -> Path:
    """Where comparison (or study) ``name`` is published and its runs carried."""
    return PUBLISHED_ROOT / name
