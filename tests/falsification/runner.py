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
3. runs ``python -m pytest -x -q -p no:cacheprovider <gates>`` in TMP with PYTHONPATH=TMP, and checks from
   inside that run that ``dormouse`` (and the mutated module) were imported from TMP, not from the
   editable install of the repo;
4. records the first gate that went red and the ``deviation=`` / ``bound=`` its failure message reports;
5. runs the same gates on an unperturbed copy: restore must be green.

The table (perturbation | gate that went red | by how much | restored green) is printed last. Exit status
1 when any perturbation left every gate green, was stale, could not be run, or its restore was not green.

    python -m tests.falsification                 # everything
    python -m tests.falsification --list          # what would run, and whether each still applies
    python -m tests.falsification --only temperature_1_over_sqrt_d --json out.json
    python -m tests.falsification --markdown docs/falsification.md   # the record, grouped by what it protects
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

from .locate import WHOLE_FILE, StalePerturbation, apply

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
EXTRA_FILES: tuple[str, ...] = ("pyproject.toml",)
REQUIRED_KEYS: tuple[str, ...] = ("name", "file", "function", "old", "new", "gates", "why", "protects")
# What a gate protects, in the order docs/falsification.md lists the groups.
PROTECTS: tuple[str, ...] = ("mechanism", "kernels", "training loop", "data/eval", "arms' set-up", "A/B rule",
                             "counters", "probes")
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
        if (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, dst / rel, ignore=ignore, dirs_exist_ok=True)
    for name in EXTRA_FILES:
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dst / name)


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
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
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
        *gates,
    ]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"rc": None, "cases": [], "imports": {}, "output": f"timed out after {timeout_s} s"}
    imports: dict[str, str | None] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("FALSIFY_IMPORTS "):
            imports = json.loads(line[len("FALSIFY_IMPORTS ") :])
    return {
        "rc": proc.returncode,
        "cases": parse_junit(junit, tree),
        "imports": imports,
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


def render_markdown(results: list[Result], seconds: float, command: str, status: int, date: str,
                    load_errors: list[str]) -> str:
    """docs/falsification.md: the record, grouped by what each gate protects (PROTECTS order)."""
    red = sum(r.status == "red" for r in results)
    restored = sum(r.restored is True for r in results)
    sources = sorted({r.source for r in results})
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
        "or its pattern no longer occurs exactly once there), could not be run, or did not restore green. This",
        "file is written by the run itself (`--markdown`); do not edit it by hand.",
        "",
        f"- Date: {date}",
        f"- Command: `{command}` (repo root; exit status {status})",
        f"- Machine: {_machine()}",
        f"- Wall time: {seconds:.0f} s for {len(results)} perturbations ({', '.join(f'`{x}`' for x in sources)});"
        f" {red} went red, {restored} restored green.",
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
    groups = {g: [r for r in results if r.protects == g] for g in PROTECTS}
    for g, rs in groups.items():
        out.append(f"| {g} | {len(rs)} | {sum(r.status == 'red' for r in rs)} | "
                   f"{sum(r.restored is True for r in rs)} |")
    for g, rs in groups.items():
        if not rs:
            continue
        out += ["", f"## {_GROUP_TITLES[g]}", "",
                "| perturbation | the defect | gate that went red | by how much | restored green |",
                "|---|---|---|---|---|"]
        for r in rs:
            if r.status == "red":
                gate = f"`{r.gate.removeprefix('tests/')}`" if r.gate else ""
                much = _cell(r.deviation or "")
            else:
                gate, much = f"**{r.status.upper()}**", _cell(r.detail)
            back = {True: "yes", False: "**NO**", None: "-"}[r.restored]
            out.append(f"| `{r.name}` ({r.source.removeprefix('perturbations_').removesuffix('.py')}) | "
                       f"{_cell(r.why)} | {gate} | {much} | {back} |")
    return "\n".join(out) + "\n"


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
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--markdown", type=Path, metavar="PATH",
                    help="also write the record as markdown, grouped by what each gate protects "
                    "(docs/falsification.md)")
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

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="falsify-") as tmp:
        workdir = Path(tmp)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda p: falsify_one(p, workdir), perts))
        restore(results, workdir)
    seconds = time.monotonic() - start

    failed = [r for r in results if r.status != "red" or r.restored is not True]
    status = 1 if failed or (errors and not only) else 0
    command = " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])])
    date = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(render_markdown(results, seconds, command, status, date, errors))
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

