"""``dormouse ab rerun NAME ARM SEED``: re-run one training run of a published comparison (NAME, or ``STUDY/POINT``)
and check it reproduces the published final bpb. The run is composed as ``dormouse ab`` composes it
(``runner.plan_runs``; with a tune stage, the arm's published ``train.lr``) into a fresh directory, trained by the
same trainer at the thread count its launch record says (the count fixes the order of CPU reductions: 2 threads
differed from 1 by 6.7e-6 bpb in the pilot). At the commit the comparison ran at, on the same kind of machine, the
final bpb must be *equal*, bit for bit; a later commit with other roundings is only close, and the command says so.
Exit 0 when it reproduces, 1 when it does not, 2 when the published results do not match the registration.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from dormouse.ab.comparison.registry import ComparisonError, Registered, load_spec
from dormouse.ab.comparison.runner import plan_runs
from dormouse.ab.runs.job import Run
from dormouse.ab.runs.records import final_row
from dormouse.ab.study.registry import load_study
from dormouse.run.files import RunFiles, published_dir
from dormouse.run.loglines import read_metrics
from dormouse.train.start import git_commit

# Environment that caps torch's kernels, MKL and oneDNN at AVX2: a run from a CPU without AVX-512, re-run on one with it
AVX2_LEVEL = "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2"


def _say(console: Console | None, line: str) -> None:
    (console or Console()).print(line, soft_wrap=True, highlight=False, markup=False)


def _published_commit(provenance: Path) -> str | None:
    """The commit the published comparison ran at (its provenance.json), or None if not recorded."""
    return json.loads(provenance.read_text()).get("commit") if provenance.is_file() else None


def _say_cpu(provenance: Path, console: Console | None = None) -> None:
    """Say whether this CPU is the one the published run computed on (dormouse.train.start.cpu_description): on
    another, bit-equality is not promised, and a difference says nothing about the run's own code path."""
    from dormouse.train.start import cpu_description

    here = cpu_description()
    if not provenance.is_file():
        _say(console, f"note: no {provenance}: cannot tell whether this CPU ({here['model']}) is the run's")
        return
    ran = json.loads(provenance.read_text())
    if "cpu" not in ran:
        _say(console, f"note: the published run did not record its CPU (platform {ran.get('platform')}); this one "
                      f"is {here}: a difference may be the machine's rounding, not the run's")
    elif ran["cpu"] != here:
        same_model, ran_level = ran["cpu"]["model"] == here["model"], ran["cpu"]["torch_capability"]
        if same_model and ran_level == here["torch_capability"]:
            # the ISA flags differ but torch computes at the run's level (e.g. capped by AVX2_LEVEL below)
            _say(console, f"note: the run ran on {ran['cpu']}, this CPU is {here}: the same model at the same torch "
                          "level, so bit-equality is expected if MKL and oneDNN are capped alike")
            return
        _say(console, f"note: the run ran on {ran['cpu']}, this CPU is {here}: bit-equality is promised on the same "
                      "CPU only; expect a close number, not the same one")
        if same_model and ran_level == "AVX2":
            # The same CPU model with AVX-512 masked off: capping torch's own kernels and the MKL and oneDNN it
            # calls at AVX2 reproduced depth_cpu's max_iter-4 runs bit for bit (docs/results/depth_cpu).
            _say(console, f"      `{AVX2_LEVEL} dormouse ab rerun ...` computes at the run's level here")


def _registration(name: str) -> tuple[Registered, Path, Path]:
    """The registration of ``name``, where it is published and where its runs were carried: a comparison
    (``residual_cpu2``), or one point of a registered study (``depth_cpu/max_iter-4``)."""
    study, _, point = name.partition("/")
    if not point:
        return load_spec(name), published_dir(name), published_dir(name) / "carry"
    points = {p.name: p for p in load_study(study).points()}
    if point not in points:
        raise ComparisonError([f"study {study} has no point {point!r}: its points are {', '.join(points)}"])
    return points[point].reg, published_dir(study) / point, published_dir(study) / "carry" / point


def _published_run(name: str, arm: str, seed: int, results: Path | None,
                    root: Path) -> tuple[Registered, Path, dict[str, Any], Run, Path]:
    """The registration, the published results (path and content), the run (at its arm's chosen lr) and the
    folder its provenance was carried to; refused unless the results are the registration's and hold the run."""
    reg, published, carried = _registration(name)
    results_path = results or published / "results.json"
    doc = json.loads(results_path.read_text())
    if doc["registration"].get("sha256") != reg.sha256:
        raise ComparisonError([f"{results_path} was produced under another registration (sha256 "
                               f"{doc['registration'].get('sha256')}) than conf/ab/{name}.yaml ({reg.sha256}); "
                               "refusing to compare"])
    comp_dir = (root / name).resolve()
    runs = {(p.arm, p.seed): p for p in plan_runs(reg, list(doc.get("overrides", [])), comp_dir)}
    if (arm, seed) not in runs:
        raise ComparisonError([f"no run {arm}-s{seed} in {name}: arms {list(reg.spec.arms)}, "
                               f"init seeds {sorted({s for _, s in runs})}"])
    run = runs[(arm, seed)]
    # A registration with a tune stage: the run ran at its arm's chosen lr, which the published results hold
    # (the re-run's own directory has no tune.json, so the plan could not know it).
    chosen = (doc.get("tune") or {}).get("chosen") or {}
    if arm in chosen:
        run.cfg.train.lr = float(chosen[arm])
    return reg, results_path, doc, run, carried


def _equivalent_command(reg: Registered, run: Run, chosen: dict[str, Any]) -> str:
    """The ``dormouse train`` line that trains ``run`` as the comparison did."""
    tuned = [f"train.lr={chosen[run.arm]}"] if run.arm in chosen else []
    data_seed = [] if run.cfg.train.data_seed is None or reg.protocol == 1 else [
        f"train.data_seed={run.cfg.train.data_seed}"]  # protocol 2: the replicate's data-order stream
    overrides = [*reg.spec.fixed, *reg.spec.arms[run.arm], *tuned, f"train.seed={run.seed}", *data_seed,
                 f"run.dir={run.run_dir.parent}", f"run.name={run.run_dir.name}"]
    return "dormouse train " + " ".join(overrides)


def _threads(results_path: Path, run: Run, threads: int | None) -> int:
    """The thread count to re-run with: ``threads``, else the one the published run's launch record names."""
    record = results_path.parent / "launch" / f"{run.run_dir.name}.json"
    if threads is None and record.is_file():
        used = {a.get("threads") for a in json.loads(record.read_text())["attempts"]}
        if len(used) != 1:
            raise ComparisonError([f"{record}: the published run ran with several thread counts "
                                   f"{sorted(map(str, used))}: it cannot be reproduced bit for bit; pass --threads "
                                   "to re-run anyway"])
        threads = used.pop()
    if threads is None:
        raise ComparisonError([f"no launch record {record} says the run's thread count; pass --threads"])
    return threads


def rerun(name: str, arm: str, seed: int, *, results: Path | None = None, root: Path, threads: int | None = None,
          print_only: bool = False, console: Console | None = None) -> int:
    """Re-run the run (``arm``, init ``seed``) of published comparison ``name`` under ``root``; exit code 0 when its
    final bpb equals the published one, 1 when it does not (refusals raise ComparisonError: exit 2)."""
    reg, results_path, doc, run, carried = _published_run(name, arm, seed, results, root)
    _say(console, "equivalent command: " + _equivalent_command(reg, run, (doc.get("tune") or {}).get("chosen") or {}))
    # protocol 1 keys a run by its seed, protocol 2 by its replicate (whose init seed ``seed`` is)
    key = str(seed) if doc.get("protocol", 1) == 1 else str(run.replicate)
    expected = doc["arms"][arm]["final_bpb"].get(key)
    _say(console, f"published final bpb ({results_path}): {expected!r}")
    ran_at, here = _published_commit(results_path.parent / "provenance.json"), git_commit()
    if ran_at is not None and ran_at != here:
        # a later commit may compute the same model with other roundings (fused operations)
        _say(console, f"note: the comparison ran at commit {ran_at[:12]}, this tree is at {here}: bit-equality is "
                      f"promised at {ran_at[:12]} only (git worktree add /tmp/at {ran_at[:12]}, then run "
                      "`dormouse ab rerun` there)")
    _say_cpu(carried / run.run_dir.name / "provenance.json", console)
    if print_only:
        return 0
    n_threads = _threads(results_path, run, threads)
    _say(console, f"threads: {n_threads} (the thread count fixes the order of CPU reductions)")
    if run.run_dir.exists():
        raise ComparisonError([f"{run.run_dir} exists: remove it first (a re-run must start from nothing)"])
    import torch

    from dormouse.train.loop import train

    torch.set_num_threads(n_threads)
    t0 = time.perf_counter()
    train(run.cfg)
    wall = time.perf_counter() - t0
    row = final_row(read_metrics(RunFiles(run.run_dir).metrics), run.steps)
    got = None if row is None else float(row["bpb"])
    same = got is not None and got == expected
    _say(console, f"re-run final bpb: {got!r}  published: {expected!r}  "
                  f"{'REPRODUCED (bit-equal)' if same else 'DIFFERENT'}  wall {wall:.0f} s")
    return 0 if same else 1
