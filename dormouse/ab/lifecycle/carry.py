"""``dormouse ab carry save|restore NAME``: keep a long comparison resumable across machines: save what resuming
needs into the repository, and restore it on a fresh machine.

A comparison that spans sessions may find a fresh machine next time, and ``runs/`` is git-ignored. What
``dormouse ab NAME`` needs to go on without redoing finished work is small: the registration stamp, the
design and tune records, each run's launch record (its code fingerprint, its attempts) and each **finished**
run's files (``config.yaml``, ``provenance.json``, ``train.log``, ``metrics.jsonl``: what
:func:`dormouse.ab.runs.job.run_state` reads to call a run complete, and what the report reads). Checkpoints,
compile caches, locks and the runs still in progress are left out: an unfinished run restarts. A registered
study carries every started point's, in the point's folder.

``save`` replaces the carry folder's contents (atomically per file). ``restore`` copies into the comparison
directory only what is missing there, and refuses (changing nothing) when a file there differs from the
carried one: the two would be different comparisons.
"""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

from rich.console import Console

from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.registry import ComparisonError, Registered, is_study, load_spec
from dormouse.ab.runs.job import run_state
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import CONFIG, DESIGN, LAUNCH, LOG, METRICS, PROVENANCE, REGISTRATION

RUN_FILES = (CONFIG, PROVENANCE, LOG, METRICS)
TOP_FILES = (REGISTRATION, DESIGN, "tune.json")


def carried_files(comp: Path, name: str, registry: Path | None = None) -> list[Path]:
    """The files of ``comp`` that resuming needs (relative paths): see the module docstring. A registered
    study's are its own stamp and card, then each started point's, under the point's folder."""
    stamp = comp / REGISTRATION
    if not stamp.is_file():
        raise ComparisonError([f"{comp}: no {REGISTRATION}; not a comparison `dormouse ab {name}` started"])
    if is_study(name, registry):
        from dormouse.ab.study.registry import load_study  # a study's points: only when it is one

        out = [Path(f) for f in TOP_FILES if (comp / f).is_file()]
        for point in load_study(name, registry).points():
            if (comp / point.name / REGISTRATION).is_file():
                out += [Path(point.name) / f for f in _comparison_files(comp / point.name, point.reg)]
        return out
    return _comparison_files(comp, load_spec(name, registry))


def _comparison_files(comp: Path, reg: Registered) -> list[Path]:
    out = [Path(f) for f in TOP_FILES if (comp / f).is_file()]
    out += sorted(p.relative_to(comp) for p in (comp / LAUNCH).glob("*.json"))
    plan = build_plan(reg, _overrides(comp), comp.parent)
    for run in plan.all_runs:
        if run.run_dir.is_dir() and run_state(run)[0] == "complete":
            out += [run.run_dir.relative_to(comp) / f for f in RUN_FILES if (run.run_dir / f).is_file()]
    return out


def _overrides(comp: Path) -> list[str]:
    return list(json.loads((comp / REGISTRATION).read_text()).get("overrides", []))


def save(name: str, root: Path, carry: Path, registry: Path | None = None, console: Console | None = None) -> None:
    """Replace ``carry`` with what resuming ``root/NAME`` needs."""
    comp = (root / name).resolve()
    files = carried_files(comp, name, registry)
    if carry.exists():
        shutil.rmtree(carry)
    for rel in files:
        dest = carry / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(dest, (comp / rel).read_text())
    runs = len({rel.parent for rel in files if rel.name == METRICS})
    (console or Console()).print(f"saved {len(files)} files ({runs} finished runs) from {comp} to {carry}",
                                 soft_wrap=True, highlight=False, markup=False)


def restore(name: str, root: Path, carry: Path, console: Console | None = None) -> None:
    """Copy into ``root/NAME`` what ``carry`` holds and it lacks. Refused (ComparisonError,
    nothing copied) when a file there differs from the carried one."""
    comp = (root / name).resolve()
    if not carry.is_dir():
        raise ComparisonError([f"{carry}: nothing carried for {name}"])
    files = sorted(p.relative_to(carry) for p in carry.rglob("*") if p.is_file())
    differ = [str(rel) for rel in files if (comp / rel).is_file() and not filecmp.cmp(comp / rel, carry / rel, False)]
    if differ:
        raise ComparisonError([
            f"{comp} already holds files that differ from the carried ones ({', '.join(differ[:5])}"
            f"{' ...' if len(differ) > 5 else ''}): it is another run of {name}; nothing restored. Move it "
            f"away (or `dormouse ab run {name} --restart` to discard it) and restore again."])
    copied = 0
    for rel in files:
        if not (comp / rel).is_file():
            (comp / rel).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(comp / rel, (carry / rel).read_text())
            copied += 1
    (console or Console()).print(f"restored {copied} of {len(files)} carried files into {comp}; "
                                 f"`dormouse ab {name}` resumes from there", soft_wrap=True, highlight=False,
                                 markup=False)
