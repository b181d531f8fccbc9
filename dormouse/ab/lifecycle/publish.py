"""``dormouse ab publish NAME --command "..."``: copy a finished comparison's outcome into the repository, with
its provenance.

From ``runs/ab/NAME/`` (what ``dormouse ab NAME`` wrote) to ``docs/results/NAME/``: ``report.md``,
``results.json``, the plots, ``registration.json``, ``design.json`` (protocol 2) and each run's launch
record (where and with how many threads it ran, when, how long). ``provenance.json`` adds what the report
does not hold: the exact command, the commit the runs ran on (from their provenance files; refused if they
differ), the machine (cores, torch and Python versions, platform) and the comparison's time, from the launch
records' attempts (interrupted ones included: they took the machine too):

- ``wall_s``: first run started to last run finished, pauses between sittings included;
- ``sittings``: the stretches in which runs trained, a pause longer than ``SITTING_GAP_S`` ending one, and
  ``running_s``, their summed length: what a comparison that spans sessions cost the machine;
- ``run_cpus``: how many of the runs its results use computed on each CPU (each run's provenance.json): a
  comparison carried across sessions may resume on a machine with another CPU, which sets both its speed (a
  run's wall differed 3.7-fold between two such machines) and its roundings (a re-run is bit-equal on the
  run's own CPU only); ``machine`` is the machine that published.

A registered study is published point by point (``docs/results/STUDY/<point>/``, each as a comparison), then
its own report, results, stamp, card and plots, with one provenance.json over the points (one clean commit for
all of them). The prose README of the results folder is written by hand.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path

from dormouse.ab.comparison.registry import ComparisonError
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import ComparisonFiles, StudyFiles

# Between two runs of one sitting the driver takes seconds (a look's analysis, the next run's start); a
# pause of more than five minutes with no run running is a stop and a later resume.
SITTING_GAP_S = 300.0


def sittings(intervals: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Merge ISO-time (start, end) intervals into stretches, a gap above SITTING_GAP_S separating two."""
    out: list[tuple[str, str]] = []
    for start, end in sorted(intervals):
        if out and (datetime.fromisoformat(start) - datetime.fromisoformat(out[-1][1])).total_seconds() \
                <= SITTING_GAP_S:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _copy_launch_records(comp: Path, out: Path) -> tuple[list[str], list[str], set, list[tuple[str, str]]]:
    """Copy each run's launch record; returns its attempts' starts, ends, thread counts and (start, end) spans."""
    (out / "launch").mkdir(exist_ok=True)
    starts, ends, threads, spans = [], [], set(), []
    for record in sorted((comp / "launch").glob("*.json")):
        shutil.copy2(record, out / "launch" / record.name)
        for attempt in json.loads(record.read_text())["attempts"]:
            starts.append(attempt["started"])
            if attempt.get("finished"):
                ends.append(attempt["finished"])
                spans.append((attempt["started"], attempt["finished"]))
            threads.add(attempt.get("threads"))
    return starts, ends, threads, spans


def publish(comp: Path, out: Path, name: str, command: str) -> dict:
    """Copy one finished comparison ``comp`` into ``out`` and write its provenance.json; returns the provenance.
    Refused (ComparisonError) when it is not complete or its runs did not run on one clean commit."""
    files = ComparisonFiles(comp)
    results = json.loads(files.results.read_text()) if files.results.is_file() else {}
    if not results.get("complete"):
        raise ComparisonError([f"{comp}: the comparison is not complete; finish it first (rerun `{command}`)"])
    commits, provs = set(), []
    for run in results["runs"]:
        prov = json.loads((Path(run["run_dir"]) / "provenance.json").read_text())
        commits.add(str(prov.get("commit")))
        provs.append(prov)
    if len(commits) != 1 or any(c.endswith("+dirty") for c in commits):
        raise ComparisonError([f"the runs ran on {sorted(commits)}: a published comparison runs on one clean commit"])
    out.mkdir(parents=True, exist_ok=True)
    design = [files.design.name] if files.design.is_file() else []  # protocol 2: the design card
    for fname in [files.results.name, files.report.name, files.registration.name, *design, *results.get("plots", [])]:
        shutil.copy2(comp / fname, out / fname)
    starts, ends, threads, spans = _copy_launch_records(comp, out)
    provenance = {"comparison": name, "command": command, "commit": commits.pop(),
                  **timing(spans, starts, ends), "threads_per_pair": sorted(t for t in threads if t is not None),
                  "run_cpus": run_cpus(provs), "machine": machine()}
    atomic_write_text(out / "provenance.json", json.dumps(provenance, indent=2) + "\n")
    return provenance


def timing(spans: list[tuple[str, str]], starts: list[str], ends: list[str]) -> dict:
    """First start to last end (pauses included), the sittings, and the time runs were training."""
    t0, t1 = min(starts), max(ends)
    stretches = sittings(spans)
    running = sum((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() for a, b in stretches)
    return {"started": t0, "finished": t1,
            "wall_s": (datetime.fromisoformat(t1) - datetime.fromisoformat(t0)).total_seconds(),
            "sittings": [list(x) for x in stretches], "running_s": running}


def run_cpus(provenances: list[dict]) -> dict[str, int]:
    """How many runs computed on each CPU, keyed "model (torch's dispatch level)" from each run's provenance
    (dormouse.train.start.cpu_description); a run that recorded none counts under "not recorded"."""
    counts = Counter(f"{cpu['model']} ({cpu['torch_capability']})" if (cpu := prov.get("cpu")) else "not recorded"
                     for prov in provenances)
    return dict(sorted(counts.items()))


def machine() -> dict:
    """The publishing machine: cores, torch and Python versions, platform, processor."""
    import torch  # its version only; imported when a comparison is published

    return {"cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine()}


def publish_study(sdir: Path, out: Path, name: str, command: str, registry: Path | None = None) -> dict:
    """A registered study: every point as a comparison into ``out/<point>/``, then the study's own files and a
    provenance.json over all points (refused unless every point ran on the same one clean commit)."""
    from dormouse.ab.study.registry import load_study

    files = StudyFiles(sdir)
    results = json.loads(files.results.read_text()) if files.results.is_file() else {}
    if not results.get("complete"):
        raise ComparisonError([f"{sdir}: the study is not complete; finish it first (rerun `{command}`)"])
    points = {point.name: publish(sdir / point.name, out / point.name, point.name, command)
              for point in load_study(name, registry).points()}
    commits = {p["commit"] for p in points.values()}
    if len(commits) != 1:
        raise ComparisonError([f"the points ran on {sorted(commits)}: a published study runs on one clean commit"])
    for fname in [files.results.name, files.report.name, files.registration.name, files.design.name,
                  *results.get("plots", [])]:
        shutil.copy2(sdir / fname, out / fname)
    spans = [tuple(s) for p in points.values() for s in p["sittings"]]
    provenance = {"study": name, "command": command, "commit": commits.pop(),
                  **timing(spans, [p["started"] for p in points.values()], [p["finished"] for p in points.values()]),
                  "points": {k: {f: v[f] for f in ("started", "finished", "wall_s", "running_s", "run_cpus")}
                             for k, v in points.items()},
                  "run_cpus": dict(sorted(sum((Counter(p["run_cpus"]) for p in points.values()), Counter()).items())),
                  "machine": machine()}
    atomic_write_text(out / "provenance.json", json.dumps(provenance, indent=2) + "\n")
    return provenance


def publish_named(name: str, command: str, *, root: Path, out: Path, registry: Path | None = None) -> dict:
    """``dormouse ab publish NAME``: the comparison or study ``root/NAME`` into ``out``; returns its provenance."""
    from dormouse.ab.comparison.registry import is_study

    comp = (root / name).resolve()
    if is_study(name, registry):
        return publish_study(comp, out, name, command, registry)
    return publish(comp, out, name, command)
