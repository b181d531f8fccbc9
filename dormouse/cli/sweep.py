"""Sweeps the Hydra way (``dormouse train -m train.lr=1e-3,3e-3``): Hydra's ``BasicSweeper`` expands the product
and each setting runs as its own ``dormouse train`` into ``<run.dir>/<sweep>/<job>``, every config checked first.
A sweep explores; deciding is ``dormouse ab``'s."""

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
from dormouse.train.run_config import load_run_config


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
    """The sweep's folder and each setting's overrides, every config checked first (one bad refuses all)."""
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
    """Plan, write ``sweep.yaml``, train each setting in turn; the first failure's exit code, else 0."""
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
