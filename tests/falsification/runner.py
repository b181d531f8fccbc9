"""Falsification record: every gate must be able to go red.

A perturbation is a named mutation of one definition (tests/falsification/perturbations_*.py, each defining
``PERTURBATIONS: list[dict]`` with ``name, file, function, old, new, gates, why, protects``): ``function`` is
the qualified name of the def/class/constant in ``file`` that ``old`` (a pattern) and ``new`` (its
replacement) perturb, located with ``ast`` so that the record survives the definition moving, edits elsewhere
in the file and a change of indentation (tests/falsification/locate.py says what ``function`` may name);
``protects`` is what the gate guards, one of PROTECTS below. A perturbation without ``function`` or
``protects`` is a load error, never guessed (``python -m tests.falsification.key --write`` computes the
missing keys). For each one this runner:

1. copies the repo's ``dormouse/`` -> TMP/dormouse, ``conf/`` -> TMP/dormouse/conf, ``kernels/`` ->
   TMP/dormouse_kernels, ``tests/`` -> TMP/tests (plus pyproject.toml and scripts/), never touching the repo;
2. checks that ``old`` occurs EXACTLY once inside ``function`` of the copied file (else: "stale
   perturbation", saying whether the definition or the pattern is gone) and applies it;
3. runs ``python -m pytest -x -q -p no:cacheprovider -n 0 <gates>`` in TMP with PYTHONPATH=TMP, and checks from
   inside that run that ``dormouse`` (and the mutated module) were imported from TMP, not from the
   editable install of the repo;
4. records the first gate that went red and the ``deviation=`` / ``bound=`` its failure message reports;
5. runs the same gates on an unperturbed copy: restore must be green.

Each red run also records the repo files it opened and their fingerprint (reads.py, record.py), so that
``--changed`` re-runs only what a change could have turned green. The table (perturbation | gate that went red
| by how much | restored green) is printed last. Exit status
1 when any perturbation left every gate green, was stale, could not be run, or its restore was not green.

    python -m tests.falsification                 # everything
    python -m tests.falsification --list          # what would run, and whether each still applies
    python -m tests.falsification --only temperature_1_over_sqrt_d --json out.json
    python -m tests.falsification --record        # everything, then the record: record.json + docs/falsification.md
    python -m tests.falsification --changed       # only what changed since its recorded red run (CI)
    python -m tests.falsification --changed --record   # ... and update the record
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import record
from .locate import WHOLE_FILE, StalePerturbation, apply
from .reads import READS_ENV, SITECUSTOMIZE, TREE_ENV, environment, fingerprint, repo_paths

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(__file__).resolve().parent  # tests/falsification: the runner, the perturbations, the keying tool
COMMAND = "python -m tests.falsification"
# repo directory -> its place in the temporary tree (the installed package layout, see pyproject.toml)
LAYOUT: dict[str, str] = {
    "dormouse": "dormouse",
    "conf": "dormouse/conf",
    "kernels": "dormouse_kernels",
    "tests": "tests",
    "scripts": "scripts",
    "docs": "docs",  # docs/results/: the published comparisons tests/flows/test_published_results.py reads
}
# Top-level files the tree holds as they are: the package metadata, and what a researcher reads to use and cite
# the code (tests/flows/test_citation.py).
EXTRA_FILES: tuple[str, ...] = ("pyproject.toml", "README.md", "LICENSE", "CITATION.cff", ".gitignore")
REQUIRED_KEYS: tuple[str, ...] = ("name", "file", "function", "old", "new", "gates", "why", "protects")
# What a gate protects, in the order docs/falsification.md lists the groups.
PROTECTS: tuple[str, ...] = ("mechanism", "kernels", "training loop", "data/eval", "arms' set-up", "A/B rule",
                             "counters", "probes", "record")
ENV = environment()  # torch's and Python's versions: part of every fingerprint (reads.py)
RUN_TIMEOUT_S = 600  # one perturbation's gates
# The restore runs every perturbation's gates in one pytest run (~11 min on 2 cores at 330 perturbations, and
# growing with the record): its own limit, so a longer record is not reported as 330 failed restores.
RESTORE_TIMEOUT_S = 3600

# Runs inside TMP: pytest in-process, then report where the packages were imported from (the repo is
# pip-installed editable, so a perturbed copy that is not the one imported would "pass" for nothing).
_WRAPPER = r"""
import json, sys
import pytest
junit, mutated, args = sys.argv[1], sys.argv[2], sys.argv[3:]
rc = int(pytest.main(["-p", "no:cacheprovider", "--junitxml=" + junit, *args]))
seen = {}
for name in ("dormouse", "dormouse_kernels", mutated):
    mod = sys.modules.get(name) if name else None
    if name:
        seen[name] = getattr(mod, "__file__", None) if mod is not None else None
print("FALSIFY_IMPORTS " + json.dumps(seen), flush=True)
sys.exit(rc)
"""


@dataclass
class Result:
    name: str
    file: str
    function: str
    why: str
    source: str
    gates: list[str]
    protects: str = ""
    status: str = "pending"  # red | survived | stale | error
    gate: str | None = None
    deviation: str | None = None
    restored: bool | None = None
    detail: str = ""
    seconds: float = 0.0
    imports: dict[str, str | None] = field(default_factory=dict)
    # what the red run read (repo paths) and their fingerprint (reads.py); where and when it ran
    reads: list[str] = field(default_factory=list)
    fingerprint: str = ""
    commit: str = ""
    date: str = ""


# --------------------------------------------------------------------------------------------------
# perturbations
# --------------------------------------------------------------------------------------------------


def read_perturbations(path: Path) -> list[Any]:
    """The ``PERTURBATIONS`` list of one perturbation file, as Python evaluates it (names resolved)."""
    spec = importlib.util.spec_from_file_location(f"_falsify_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    perts = module.PERTURBATIONS
    if not isinstance(perts, list):
        raise TypeError("PERTURBATIONS is not a list")
    return perts


def load_perturbations(files: list[Path] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """All perturbations from ``files`` (default: tests/falsification/perturbations_*.py) and the load errors."""
    paths = files if files is not None else sorted(HOME.glob("perturbations_*.py"))
    found: list[dict[str, Any]] = []
    errors: list[str] = []
    names: set[str] = set()
    for path in paths:
        try:
            perts = read_perturbations(path)
        except Exception as e:  # one broken file must not hide the others
            errors.append(f"{path.name}: cannot load ({type(e).__name__}: {e})")
            continue
        for k, p in enumerate(perts):
            missing = [key for key in REQUIRED_KEYS if not isinstance(p, dict) or key not in p]
            if missing:
                hint = " (python -m tests.falsification.key --write adds it)" if missing == ["function"] else ""
                errors.append(f"{path.name}[{k}]: missing {missing}{hint}")
                continue
            if p["name"] in names:
                errors.append(f"{path.name}: duplicate perturbation name {p['name']!r}")
                continue
            if not p["gates"] or not all(isinstance(g, str) for g in p["gates"]):
                errors.append(f"{path.name}: {p['name']}: gates must be a non-empty list of node ids")
                continue
            if p["protects"] not in PROTECTS:
                errors.append(f"{path.name}: {p['name']}: protects={p['protects']!r} is not one of "
                              f"{', '.join(repr(x) for x in PROTECTS)}")
                continue
            names.add(p["name"])
            found.append({**p, "source": path.name})
    return found, errors


def tree_path(file: str) -> str:
    """Where repo-relative ``file`` lives in the temporary tree (conf/x -> dormouse/conf/x, ...)."""
    if file in EXTRA_FILES:
        return file
    head, _, rest = file.replace("\\", "/").partition("/")
    if head not in LAYOUT or not rest:
        raise StalePerturbation(f"{file}: not under one of the copied directories {sorted(LAYOUT)}")
    return f"{LAYOUT[head]}/{rest}"


def module_name(tree_file: str) -> str:
    """The module a tree-relative .py file imports as ('' for non-Python files and tests)."""
    if not tree_file.endswith(".py") or tree_file.startswith(("tests/", "scripts/")):
        return ""
    parts = tree_file[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def make_tree(dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for src, rel in LAYOUT.items():  # dormouse/ before conf/ -> dormouse/conf
        # ROOT may itself be such a tree (a gate that runs the falsification): kernels/ is then dormouse_kernels/
        found = next((ROOT / d for d in (src, rel) if (ROOT / d).is_dir()), None)
        if found is not None:
            shutil.copytree(found, dst / rel, ignore=ignore, dirs_exist_ok=True)
    for name in EXTRA_FILES:
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dst / name)
    (dst / "sitecustomize.py").write_text(SITECUSTOMIZE)  # every process of a gate run reports what it opened


def tree_bytes(tree: Path, original: dict[str, bytes]):  # noqa: ANN201 - a reader for reads.fingerprint
    """Read a repo-relative file as the tree holds it, the perturbed file as it was before the perturbation."""

    def read(rel: str) -> bytes | None:
        if rel in original:
            return original[rel]
        path = tree / (tree_path(rel) if "/" in rel else rel)
        return path.read_bytes() if path.is_file() else None

    return read


# --------------------------------------------------------------------------------------------------
# running the gates
# --------------------------------------------------------------------------------------------------


def _nodeid(tree: Path, classname: str, name: str) -> str:
    if not classname:  # a collection error: junit names the module, e.g. "tests.arms.test_attnres"
        path = Path(*name.split("."))
        if (tree / path).with_suffix(".py").is_file():
            return f"{path.with_suffix('.py').as_posix()} (collection error)"
    parts = classname.split(".") if classname else []
    for k in range(len(parts), 0, -1):
        if (tree / Path(*parts[:k])).with_suffix(".py").is_file():
            return "::".join(["/".join(parts[:k]) + ".py", *parts[k:], name])
    return f"{classname}::{name}" if classname else name


def _matches(nodeid: str, gate: str) -> bool:
    return nodeid == gate or nodeid.startswith((gate + "[", gate + "::"))


def parse_junit(path: Path, tree: Path) -> list[dict[str, str]]:
    """One row per testcase: nodeid, outcome (passed/failed/error/skipped), message, text."""
    if not path.is_file():
        return []
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        row = {
            "nodeid": _nodeid(tree, case.get("classname", ""), case.get("name", "")),
            "outcome": "passed",
            "message": "",
            "text": "",
        }
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                row.update(
                    outcome="failed" if tag == "failure" else tag,
                    message=el.get("message", ""),
                    text=el.text or "",
                )
                break
        rows.append(row)
    return rows


def by_how_much(message: str, text: str) -> str:
    """The ``deviation=`` (and ``bound=``) a gate reported, else the exception's first line."""
    for blob in (message, text):
        dev = re.search(r"deviation=([^\s,;)]+)(\s+sources)?", blob)
        if dev:
            value = dev.group(1) + (dev.group(2) or "")
            bound = re.search(r"bound=([^\s,;)]+)", blob)
            if not bound:
                return value
            out = f"{value} (bound {bound.group(1)})"
            try:
                ratio = float(dev.group(1)) / float(bound.group(1))
                out += f", {ratio:.2g}x" if ratio < 1e6 else f", {ratio:.1e}x"
            except (ValueError, ZeroDivisionError):
                pass
            return out
    lines = [ln[2:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    raised = [ln for ln in lines if re.match(r"\w*(Error|Exception)\b", ln)]  # the exception line
    first = (raised or lines or message.splitlines() or ["(no message)"])[0]
    return first[:100]


def run_gates(tree: Path, gates: list[str], mutated: str, extra: list[str], tag: str,
              timeout_s: int = RUN_TIMEOUT_S) -> dict[str, Any]:
    """Run pytest on ``gates`` inside ``tree``; return rc, the testcases and where modules came from."""
    junit = tree / f".falsify-{tag}.xml"
    reads = tree.parent / f"{tree.name}.{tag}.reads"  # outside the tree: the log is no read of the tree
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1", **{READS_ENV: str(reads), TREE_ENV: str(tree)})
    # -p no:hypothesispytest: that plugin alone imports for ~1.5 s per run and no gate needs it (hypothesis'
    # @given works without it); a gate that did need a disabled plugin would fail its restore run, loudly.
    cmd = [
        sys.executable,
        "-c",
        _WRAPPER,
        str(junit),
        mutated,
        *extra,
        "-q",
        "--tb=short",
        "-p",
        "no:hypothesispytest",
        "-n",  # in this process: the gates are a few tests, and the imports check below reads this process
        "0",
        *gates,
    ]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"rc": None, "cases": [], "imports": {}, "reads": [], "output": f"timed out after {timeout_s} s"}
    opened = reads.read_text().splitlines() if reads.is_file() else []
    imports: dict[str, str | None] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("FALSIFY_IMPORTS "):
            imports = json.loads(line[len("FALSIFY_IMPORTS ") :])
    return {
        "rc": proc.returncode,
        "cases": parse_junit(junit, tree),
        "imports": imports,
        "reads": repo_paths(opened, LAYOUT, ROOT),
        "output": (proc.stdout + proc.stderr)[-4000:],
    }


def import_problem(tree: Path, imports: dict[str, str | None], mutated: str, red: bool) -> str | None:
    """Why this run did not test the copy in ``tree`` (None when it did)."""
    root = os.path.realpath(tree)
    for name, path in imports.items():
        if path is not None and not os.path.realpath(path).startswith(root + os.sep):
            return f"{name} was imported from {path}, not from the temporary copy"
    if not imports:
        return "the run did not report its imports"
    if mutated and imports.get(mutated) is None and not red:
        return f"the gates never imported {mutated}, the module this perturbation mutates"
    return None


def falsify_one(p: dict[str, Any], workdir: Path) -> Result:
    res = Result(p["name"], p["file"], p["function"], p["why"], p["source"], list(p["gates"]), p["protects"])
    start = time.monotonic()
    tree = workdir / p["name"]
    try:
        rel = tree_path(p["file"])
        make_tree(tree)
        target = tree / rel
        if not target.is_file():
            raise StalePerturbation(f"stale perturbation: {p['file']} does not exist")
        original = {p["file"]: target.read_bytes()}
        target.write_text(apply(target.read_text(), p["function"], p["old"], p["new"], p["file"]))
    except StalePerturbation as e:
        res.status, res.detail = "stale", str(e)
        return res
    mutated = module_name(rel)
    run = run_gates(tree, res.gates, mutated, ["-x"], "perturbed")
    res.imports = run["imports"]
    red_cases = [c for c in run["cases"] if c["outcome"] in ("failed", "error")]
    if red_cases:  # a test failed, or collection failed because the mutation broke an import (rc 2 or 4)
        res.status, res.gate = "red", red_cases[0]["nodeid"]
        res.deviation = by_how_much(red_cases[0]["message"], red_cases[0]["text"])
    elif run["rc"] == 0:
        res.status, res.detail = "survived", "every gate stayed green"
    else:
        res.status, res.detail = "error", f"pytest rc={run['rc']}: {run['output'][-600:]}"
    problem = import_problem(tree, run["imports"], mutated, res.status == "red")
    if problem:
        res.status, res.detail = "error", problem
    if res.status == "red":  # what the red run read decides when it must run again (reads.py)
        res.reads = run["reads"]
        res.fingerprint = fingerprint(p, res.reads, tree_bytes(tree, original), ENV)
    res.seconds = time.monotonic() - start
    shutil.rmtree(tree, ignore_errors=True)
    return res


def restore(results: list[Result], workdir: Path) -> None:
    """Run every tested perturbation's gates on one unperturbed copy; each must be green."""
    todo = [r for r in results if r.status in ("red", "survived")]
    if not todo:
        return
    tree = workdir / "_unperturbed"
    make_tree(tree)
    gates = list(dict.fromkeys(g for r in todo for g in r.gates))
    run = run_gates(tree, gates, "", [], "restore", timeout_s=RESTORE_TIMEOUT_S)
    # a run that timed out reported nothing: say so, not that it hid its imports
    problem = run["output"] if run["rc"] is None else import_problem(tree, run["imports"], "", True)
    for r in todo:
        cases = [c for c in run["cases"] if any(_matches(c["nodeid"], g) for g in r.gates)]
        bad = [c for c in cases if c["outcome"] in ("failed", "error")]
        passed = [c for c in cases if c["outcome"] == "passed"]
        r.restored = problem is None and run["rc"] in (0, 1) and not bad and bool(passed)
        if not r.restored:
            why = problem or (
                f"{bad[0]['nodeid']}: {by_how_much(bad[0]['message'], bad[0]['text'])}"
                if bad
                else f"no gate passed (pytest rc={run['rc']})"
            )
            r.detail = (r.detail + "; " if r.detail else "") + f"restore not green: {why}"


# --------------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------------


def _console() -> Any:
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=220, soft_wrap=False)


def staleness(p: dict[str, Any]) -> str | None:
    """Why ``p`` does not apply to the repo as it is now (None when it applies)."""
    path = ROOT / p["file"]
    if not path.is_file():
        return f"stale perturbation: {p['file']} does not exist"
    try:
        apply(path.read_text(), p["function"], p["old"], p["new"], p["file"])
    except StalePerturbation as e:
        return str(e)
    return None


def print_list(perts: list[dict[str, Any]]) -> int:
    """Print the table of perturbations; return how many are stale."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{len(perts)} perturbations", show_lines=False)
    for col in ("perturbation", "file :: function", "gates", "why", "applies"):
        table.add_column(col, overflow="fold")
    stale = 0
    for p in perts:
        problem = staleness(p)
        stale += problem is not None
        applies = "yes" if problem is None else f"[bold red]STALE[/] {escape(problem)}"
        where = p["file"] if p["function"] == WHOLE_FILE else f"{p['file']} :: {p['function']}"
        cells = (p["name"], where, "\n".join(p["gates"]), p["why"])
        table.add_row(*(escape(str(x)) for x in cells), applies)
    _console().print(table)
    print(f"{len(perts)} perturbations, {len(perts) - stale} apply, {stale} stale")
    return stale


def print_table(results: list[Result], seconds: float) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"Falsification: {len(results)} perturbations, {seconds:.0f} s", show_lines=False)
    table.add_column("perturbation", overflow="fold")
    table.add_column("gate that went red", overflow="fold")
    table.add_column("by how much", overflow="fold")
    table.add_column("restored green", overflow="fold")
    for r in results:
        if r.status == "red":
            gate, much = escape(r.gate or ""), escape(r.deviation or "")
        else:
            gate, much = f"[bold red]{r.status.upper()}[/]", escape(r.detail)
        restored = {True: "yes", False: "[bold red]NO[/]", None: "-"}[r.restored]
        if r.restored is False and r.status == "red":
            much = f"{much}; {escape(r.detail)}"
        table.add_row(escape(r.name), gate, much, restored)
    _console().print(table)


_GROUP_TITLES = {
    "mechanism": "Mechanism: the arms' and AttnRes's equations (Eq. 1-6, the two-phase schedule)",
    "kernels": "Kernels: the fused Triton read, its backward and the Phase-2 merge",
    "training loop": "Training loop: schedule, optimizer, depth, what the loss trains",
    "data/eval": "Data and eval: the split, the eval set and its size",
    "arms' set-up": "Arms' set-up: starting values and per-slot parameters",
    "A/B rule": "A/B rule: the verdict, Holm, the report's sentences, the registered extension",
    "counters": "Counters: ran/asked and the log check",
    "probes": "Probes: the learned values the runs and the report plot",
    "record": "The record itself: what a red run read, its fingerprint, what --changed re-runs",
}


def _machine() -> str:
    import platform

    parts = [f"{os.cpu_count()} CPU cores", f"Python {platform.python_version()}"]
    for mod in ("torch", "triton"):
        try:
            parts.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            parts.append(f"no {mod}")
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a broken CUDA set-up must not stop the record from being written
        gpu = None
    parts.append(gpu or "no GPU (the kernel gates run under TRITON_INTERPRET=1)")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(rows: list[Result], ran: int, seconds: float, command: str, status: int, date: str,
                    load_errors: list[str]) -> str:
    """docs/falsification.md: the record, grouped by what each gate protects (PROTECTS order).

    ``rows`` holds every perturbation: its recorded red run (record.py) or, when it has none, this run's
    outcome; ``ran`` of them ran in this run (``--changed`` runs only what changed), which took ``seconds``."""
    red = sum(r.status == "red" for r in rows)
    restored = sum(r.restored is True for r in rows)
    sources = sorted({r.source for r in rows})
    commits = sorted({r.commit for r in rows if r.commit})
    out = [
        "# Falsification record",
        "",
        "Every gate must be able to go red. `python -m tests.falsification` (part of the test suite, in",
        "`tests/falsification/`) applies each named mutation from `tests/falsification/perturbations_*.py` to a",
        "temporary copy of the package (never to the repo): each is keyed to the definition it perturbs (a",
        "function, class or constant, found with `ast`) and a pattern that must occur exactly once inside it. It",
        "runs that perturbation's gates with `pytest -x` against the copy (checking from inside the run that the",
        "copy, not the editable install, was imported), records the first gate that went red and the",
        "`deviation=` / `bound=` its message reports, then runs the same gates on an unperturbed copy (restore",
        "must be green). It exits 1 if a perturbation left every gate green, was stale (its definition is gone,",
        "or its pattern no longer occurs exactly once there), could not be run, or did not restore green.",
        "",
        "Each red run also records the repo files it opened and a fingerprint of their contents",
        "(`tests/falsification/record.json`); `--changed` re-runs only the perturbations whose files, definition",
        "or torch changed since their recorded run, which is what CI runs. The column \"run at\" is the commit of",
        "each row's recorded run (`+dirty`: with uncommitted edits, which the fingerprint covers). This file is",
        "written by the run itself (`--record`); do not edit it by hand.",
        "",
        f"- Last run: {date}, `{command}` (repo root; exit status {status}), {ran} perturbations in {seconds:.0f} s",
        f"- Machine of the last run: {_machine()}",
        f"- Record: {len(rows)} perturbations ({', '.join(f'`{x}`' for x in sources)}); {red} red, {restored}"
        f" restored green; run at {', '.join(f'`{c}`' for c in commits) or 'no commit'}.",
    ]
    if load_errors:
        out += ["- **Load errors**: " + "; ".join(_cell(e) for e in load_errors)]
    out += [
        "",
        "\"by how much\" is the failing assertion's measured deviation, its bound, and their ratio; \"N sources",
        "(bound 0)\" means a source set had N sources more or fewer than Eq. 6 says; \"bound >1e-4\" means the",
        "output had to move by more than 1e-4 and moved by the deviation shown. `--list` prints each",
        "perturbation's file, definition and gates and whether it still applies; `--only NAME` runs one.",
        "",
        "| protects | perturbations | red | restored green |",
        "|---|---|---|---|",
    ]
    groups = {g: [r for r in rows if r.protects == g] for g in PROTECTS}
    for g, rs in groups.items():
        out.append(f"| {g} | {len(rs)} | {sum(r.status == 'red' for r in rs)} | "
                   f"{sum(r.restored is True for r in rs)} |")
    for g, rs in groups.items():
        if not rs:
            continue
        out += ["", f"## {_GROUP_TITLES[g]}", "",
                "| perturbation | the defect | gate that went red | by how much | restored green | run at |",
                "|---|---|---|---|---|---|"]
        for r in rs:
            if r.status == "red":
                gate = f"`{r.gate.removeprefix('tests/')}`" if r.gate else ""
                much = _cell(r.deviation or "")
            else:
                gate, much = f"**{r.status.upper()}**", _cell(r.detail)
            back = {True: "yes", False: "**NO**", None: "-"}[r.restored]
            out.append(f"| `{r.name}` ({r.source.removeprefix('perturbations_').removesuffix('.py')}) | "
                       f"{_cell(r.why)} | {gate} | {much} | {back} | {r.commit or '-'} |")
    return "\n".join(out) + "\n"


def _commit() -> str:
    """HEAD's short hash, ``+dirty`` when the work tree has uncommitted edits ('' outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+dirty" if dirty else "")


def record_rows(perts: list[dict[str, Any]], entries: dict[str, dict[str, Any]],
                results: list[Result]) -> list[Result]:
    """Every perturbation's row for the markdown: its recorded red run, else this run's outcome, else not run."""
    ran = {r.name: r for r in results}
    rows = []
    for p in perts:
        if p["name"] in entries:
            e = entries[p["name"]]
            rows.append(Result(**{k: v for k, v in e.items() if k in Result.__dataclass_fields__}))
        elif p["name"] in ran:
            rows.append(ran[p["name"]])
        else:
            rows.append(Result(p["name"], p["file"], p["function"], p["why"], p["source"], list(p["gates"]),
                               p["protects"], status="not run", detail="no recorded red run"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this perturbation (repeatable, or comma-separated)",
    )
    ap.add_argument("--list", action="store_true", help="list the perturbations and exit")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write this run's results as JSON")
    ap.add_argument("--changed", action="store_true",
                    help="run only the perturbations whose recorded red run read other bytes than the repo holds "
                    "now, or that have no record (what CI runs; tests/falsification/reads.py)")
    ap.add_argument("--record", action="store_true",
                    help="merge this run into the record (tests/falsification/record.json) and rewrite "
                    "docs/falsification.md from it")
    ap.add_argument("--record-file", type=Path, default=record.RECORD, metavar="PATH",
                    help="the record to read (--changed) and write (--record)")
    ap.add_argument("--markdown", type=Path, default=record.MARKDOWN, metavar="PATH",
                    help="where --record writes the record as markdown (default docs/falsification.md)")
    ap.add_argument(
        "--file",
        type=Path,
        action="append",
        metavar="PATH",
        help="load perturbations from this file instead of tests/falsification/perturbations_*.py",
    )
    ap.add_argument("--jobs", type=int, default=2, help="perturbations run in parallel (default 2)")
    args = ap.parse_args(argv)

    perts, errors = load_perturbations(args.file)
    every = perts  # --only runs a few; the record keeps the others' entries
    only = [n for item in args.only for n in item.split(",") if n]
    if only:
        unknown = sorted(set(only) - {p["name"] for p in perts})
        if unknown:
            print(f"unknown perturbation(s): {', '.join(unknown)}", file=sys.stderr)
            return 2
        perts = [p for p in perts if p["name"] in only]
    for e in errors:
        print(f"{'warning' if only else 'error'}: {e}", file=sys.stderr)
    if args.list:
        stale = print_list(perts)
        return 1 if stale or (errors and not only) else 0

    entries = record.load(args.record_file) if (args.changed or args.record) else {}
    todo = perts
    if args.changed:
        todo = [p for p in perts if not record.up_to_date(p, entries.get(p["name"]), ROOT, ENV)]
        print(f"{len(perts) - len(todo)} of {len(perts)} perturbations read the same bytes as their recorded red run "
              f"({args.record_file.relative_to(ROOT) if args.record_file.is_relative_to(ROOT) else args.record_file});"
              f" running the other {len(todo)}", flush=True)

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="falsify-") as tmp:
        workdir = Path(tmp)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda p: falsify_one(p, workdir), todo))
        restore(results, workdir)
    seconds = time.monotonic() - start

    failed = [r for r in results if r.status != "red" or r.restored is not True]
    status = 1 if failed or (errors and not only) else 0
    command = " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])])
    date = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    commit = _commit()
    for r in results:
        r.commit, r.date = commit, date
    if args.record:
        entries = record.merge(entries, [asdict(r) for r in results], {p["name"] for p in every})
        record.save(args.record_file, entries)
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        rows = record_rows(every, entries, results)
        args.markdown.write_text(render_markdown(rows, len(results), seconds, command, status, date, errors))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "date": date,
                    "command": command,
                    "seconds": round(seconds, 1),
                    "load_errors": errors,
                    "ok": not failed and not (errors and not only),
                    "results": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
    print_table(results, seconds)
    if failed:
        print(f"{len(failed)} perturbation(s) not falsified cleanly: {', '.join(r.name for r in failed)}")
    return status
