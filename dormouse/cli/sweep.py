"""Sweeps the Hydra way: ``dormouse train -m train.lr=1e-3,3e-3 model.d_model=64,128``.

Hydra's own sweeper expands the overrides (``BasicSweeper.split_arguments``: the cartesian product of every
``a,b``, ``range()`` or ``choice()``, in the order given), and each setting is one ``dormouse train`` in its
own process, one after another, like Hydra's basic launcher; each writes its own run directory
``<run.dir>/<sweep>/<job number>`` (``<sweep>`` = ``run.name``, default ``sweep-<start time>``) beside the
sweep's ``sweep.yaml`` (the settings, Hydra's ``multirun.yaml``). Every setting's config is checked before
the first one trains. ``dormouse logs <run.dir>/<sweep>`` shows the sweep as one table.

A sweep explores; it decides nothing: a decision between settings is a registered comparison (``dormouse ab``:
seeds, a rule fixed before the runs, a verdict). The SLURM path of Hydra sweeps is the
hydra-submitit-launcher plugin, which needs Hydra's own app runtime (``@hydra.main``), not dormouse's compose
API; dormouse's cluster path is ``dormouse ab --launcher slurm`` (dormouse/ab/cluster.py).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from dormouse.config.schema import ConfigError
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import SWEEP
from dormouse.train.preflight import environment_problems
from dormouse.train.start import load_run_config


def expand(overrides: list[str]) -> list[list[str]]:
    """Each setting of the sweep, as override strings, in Hydra's order (its BasicSweeper)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException, OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        (settings,) = BasicSweeper.split_arguments(parsed, None)
    except (HydraException, OverrideParseException) as exc:
        raise ConfigError([f"sweep: {' '.join(str(exc).split())}"]) from exc
    return settings


def plan(overrides: list[str]) -> tuple[Path, list[list[str]]]:
    """The sweep's folder and each setting's overrides (``run.name`` set to ``<sweep>/<job>``), every config
    checked first: one bad setting refuses the whole sweep before any run, naming it."""
    settings = expand(overrides)
    names = {s.partition("=")[2] for job in settings for s in job if s.startswith("run.name=")}
    if len(names) > 1:
        raise ConfigError(["run.name is swept: a sweep is one folder; give one run.name (the sweep's) or none"])
    sweep = names.pop() if names else f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    width = len(str(len(settings) - 1))
    jobs = [[s for s in job if not s.startswith("run.name=")] + [f"run.name={sweep}/{i:0{width}d}"]
            for i, job in enumerate(settings)]
    problems: list[str] = []
    run_dir = None
    for i, job in enumerate(jobs):
        try:
            cfg = load_run_config(job)
            run_dir = Path(str(cfg.run.dir)) / sweep
            lines = environment_problems(cfg)  # a missing file, no CUDA, a kernel the device cannot run
        except ConfigError as exc:
            lines = exc.lines
        problems += [f"sweep setting {i} ({' '.join(job[:-1])}): {line}" for line in lines]
    if problems:
        raise ConfigError(problems)
    assert run_dir is not None
    return run_dir, jobs


def run_sweep(overrides: list[str]) -> int:
    """Plan, write ``sweep.yaml``, then train each setting in its own process; stop at the first that fails
    (its exit code; an interrupted one's 130/143 too). Returns 0 when every setting finished."""
    folder, jobs = plan(overrides)
    settings = [job[:-1] for job in jobs]
    swept = sorted({s.partition("=")[0] for job in settings for s in job if sum(s in j for j in settings) < len(jobs)})
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / SWEEP, yaml.safe_dump(
        {"overrides": overrides, "swept": swept,
         "jobs": [{"run": job[-1].partition("=")[2], "overrides": job[:-1]} for job in jobs]}, sort_keys=False))
    for i, job in enumerate(jobs):
        print(f"sweep {folder} setting {i + 1}/{len(jobs)}: {' '.join(job[:-1]) or '(defaults)'}", flush=True)
        code = subprocess.run([sys.executable, "-m", "dormouse", "train", *job], check=False).returncode
        if code != 0:
            print(f"sweep stopped: setting {i + 1}/{len(jobs)} exited {code}; rerun the same command with "
                  "train.resume=auto to continue", file=sys.stderr, flush=True)
            return code
    print(f"sweep done: {len(jobs)} run(s) in {folder}; dormouse logs {folder}", flush=True)
    return 0
