"""The stand-in for ``dormouse.train.loop.train`` that the ``dormouse ab`` tests hand the runner.

One configurable fake: it writes the run directory a real run writes (tests/helpers/planted_run.py owns its
shape) with a planted final bpb, a checkpoint per eval, and the failures a real run can end in (an exception,
the loop's diverged TrainError, a killed run, a checkpoint that does not load, a dead arm). Each test module
plants its own final bpb through ``final_bpb``; the default is the comparison of tests/flows/test_ab.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from dormouse.errors import RunDirRefused, TrainError
from dormouse.run.checkpoint import CheckpointError
from tests.helpers.planted_run import append_eval, append_log, done_line, eval_rows, write_run_header

# Planted final-bpb effects vs the baseline: gr clearly better, attnres_block clearly worse, attnres_full
# and the A/A arm within noise.
EFFECT = {"rezero": 0.0, "gr": -0.10, "attnres_full": 0.002, "attnres_block": 0.08, "rezero_aa": 0.0}
JITTER = {1: 0.0015, 2: -0.001, 3: 0.0004}


@dataclass(frozen=True)
class PlantedRun:
    """What the fake reads of one run's config: its name, arm, seeds, lr and depth."""

    name: str
    arm: str
    seed: int
    lr: float
    max_iter: int
    resume: str
    cfg: DictConfig


def arm_of(name: str) -> str:
    """The arm a run name belongs to: ``<arm>-s<seed>`` or, for a tune run, ``tune-<arm>-lr<lr>-s<seed>``."""
    return name.rsplit("-s", 1)[0].removeprefix("tune-").split("-lr")[0]


def comparison_bpb(arm: str, seed: int, exact: tuple[str, ...] = ()) -> float:
    """The planted final bpb of tests/flows/test_ab.py's comparison: 2 + 0.05·seed + the arm's effect + a jitter
    that grows with the arm's place in EFFECT (none for the arms in ``exact``)."""
    jitter = JITTER[(seed - 1) % 3 + 1] * (1 + (0 if arm in exact else list(EFFECT).index(arm)))
    return 2.0 + 0.05 * seed + EFFECT[arm] + jitter


class FakeTrain:
    """Stands in for dormouse.train.loop.train: config.yaml, provenance.json, train.log with eval and done
    lines, metrics.jsonl and a checkpoint per eval, the final bpb planted by ``final_bpb``.

    ``fail``: run names that raise before writing anything; ``refuse``: run names whose start is refused as the
    trainer refuses a run directory (a TrainError that is not a divergence); ``diverges``: runs that raise the
    loop's diverged TrainError after their header; ``stop_at``: run name -> the last step written ("killed": no
    done line); ``fail_resume``: a resume is refused as the trainer refuses an unreadable checkpoint; ``dead``:
    arms whose counters say they were asked and never ran; ``exact``: arms of the default plant without jitter.
    """

    def __init__(self, final_bpb: Callable[[PlantedRun], float] | None = None, *,
                 diverges: Callable[[PlantedRun], bool] | None = None, dead: tuple[str, ...] = (),
                 fail: tuple[str, ...] = (), refuse: tuple[str, ...] = (), fail_resume: bool = False,
                 stop_at: dict[str, int] | None = None,
                 exact: tuple[str, ...] = ()) -> None:
        self.final_bpb = final_bpb or (lambda run: comparison_bpb(run.arm, run.seed, exact))
        self.diverges = diverges or (lambda run: False)
        self.dead, self.fail, self.refuse, self.fail_resume = dead, fail, refuse, fail_resume
        self.stop_at = stop_at or {}
        self.runs: list[PlantedRun] = []
        self.cache_dirs: dict[str, str | None] = {}  # run name -> TORCHINDUCTOR_CACHE_DIR as the run saw it

    @property
    def calls(self) -> list[tuple[str, str]]:
        """(run name, train.resume) of each call, in order."""
        return [(r.name, r.resume) for r in self.runs]

    @property
    def names(self) -> list[str]:
        """The run name of each call, in order."""
        return [r.name for r in self.runs]

    @property
    def configs(self) -> list[DictConfig]:
        return [r.cfg for r in self.runs]

    def __call__(self, cfg: DictConfig) -> None:
        name, seed = str(cfg.run.name), int(cfg.train.seed)
        run = PlantedRun(name, arm_of(name), seed, float(cfg.train.lr), int(cfg.model.max_iter),
                         str(cfg.train.resume), cfg)
        assert name.endswith(f"-s{seed}"), name
        run_dir = Path(cfg.run.dir) / name
        self.runs.append(run)
        self.cache_dirs[name] = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        if name in self.fail:
            raise RuntimeError("planted failure")
        if name in self.refuse:
            raise RunDirRefused(f"planted: {name}'s checkpoint was written under another config")
        start = 0
        if run.resume == "auto":
            if self.fail_resume:  # the trainer's refusal; the fake's checkpoints (b"fake") do not load
                raise CheckpointError("planted: checkpoint unreadable")
            ckpts = sorted((run_dir / "checkpoints").glob("step_*.pt"))
            start = int(ckpts[-1].stem[5:]) if ckpts else 0
        else:
            assert not run_dir.exists(), "the runner must hand a fresh run an empty directory"
        params = 10_000 + 100 * len(run.arm)
        write_run_header(run_dir, cfg, {"params": params, "arm_params": 100 * len(run.arm)})
        if self.diverges(run):
            raise TrainError("non-finite loss (loss nan) at step 3; last good checkpoint: none; lower train.lr",
                             diverged=True)
        append_log(run_dir, f"resume step={start} from=ckpt" if start else "# dormouse: fake")
        for row in eval_rows(cfg, self.final_bpb(run), start=start, tok_s=5000.0 - 100 * len(run.arm),
                             params=params, dead=run.arm in self.dead):
            if self.stop_at.get(name) is not None and row["step"] > self.stop_at[name]:
                return
            append_eval(run_dir, cfg, row)
            (run_dir / "checkpoints").mkdir(exist_ok=True)
            (run_dir / "checkpoints" / f"step_{row['step']:08d}.pt").write_bytes(b"fake")
        append_log(run_dir, done_line(cfg))
