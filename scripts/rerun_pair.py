"""Re-run one training run (arm, seed) of a published comparison and check it reproduces the published final bpb.

    python scripts/rerun_pair.py residual_cpu gr 3            # trains into runs/rerun/residual_cpu/gr-s3
    python scripts/rerun_pair.py residual_cpu gr 3 --print    # only print the equivalent `dormouse train`
    python scripts/rerun_pair.py depth_cpu/max_iter-4 gr 3101  # one point of a registered study

The run is composed exactly as `dormouse ab` composes it (``runner.plan_pairs`` on the registered file:
fixed values, the arm's overrides, ``train.seed`` and, under protocol 2, ``train.data_seed``; with a tune stage,
the arm's chosen ``train.lr`` from the published results; ``seed`` is the run's init seed, which names its
directory), into a fresh directory, and trained by the same trainer.
CPU training is deterministic at a given thread count (fixed RNG objects; the thread count fixes the order
of the CPU reductions: in the pilot, seed 101 at 2 threads differed from 1 thread by 6.7e-6 bpb at step 700),
so the run is re-run with the thread count its launch record says it used, and on the same kind of machine
the final bpb must be *equal*, not close: the check is bit-for-bit on the float that results.json stores. That
holds at the commit the comparison ran at (provenance.json); a later commit that computes the same model with
other roundings (a fused multiply-add, another summation order) is only close, and the script says so. Exit 0 when it
reproduces, 1 when it does not, 2 when the published results do not match the registration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dormouse.ab.records import final_row
from dormouse.ab.registry import Registered, load_spec
from dormouse.ab.runner import plan_pairs
from dormouse.ab.study import load_study
from dormouse.run.files import RunFiles
from dormouse.run.loglines import read_metrics
from dormouse.train.start import git_commit

REPO = Path(__file__).resolve().parent.parent
# Environment that caps torch's kernels, MKL and oneDNN at AVX2: a run from a CPU without AVX-512, re-run on one with it
AVX2_LEVEL = "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2"


def _published_commit(provenance: Path) -> str | None:
    """The commit the published comparison ran at (its provenance.json), or None if not recorded."""
    return json.loads(provenance.read_text()).get("commit") if provenance.is_file() else None


def _say_cpu(provenance: Path) -> None:
    """Say whether this CPU is the one the published pair computed on (dormouse.train.start.cpu_description): on
    another, bit-equality is not promised, and a difference says nothing about the pair's own code path."""
    from dormouse.train.start import cpu_description

    here = cpu_description()
    if not provenance.is_file():
        print(f"note: no {provenance}: cannot tell whether this CPU ({here['model']}) is the run's")
        return
    ran = json.loads(provenance.read_text())
    if "cpu" not in ran:
        print(f"note: the published run did not record its CPU (platform {ran.get('platform')}); this one is "
              f"{here}: a difference may be the machine's rounding, not the run's")
    elif ran["cpu"] != here:
        same_model, ran_level = ran["cpu"]["model"] == here["model"], ran["cpu"]["torch_capability"]
        if same_model and ran_level == here["torch_capability"]:
            # the ISA flags differ but torch computes at the run's level (e.g. capped by AVX2_LEVEL below)
            print(f"note: the run ran on {ran['cpu']}, this CPU is {here}: the same model at the same torch level, "
                  "so bit-equality is expected if MKL and oneDNN are capped alike")
            return
        print(f"note: the run ran on {ran['cpu']}, this CPU is {here}: bit-equality is promised on the same CPU "
              "only; expect a close number, not the same one")
        if same_model and ran_level == "AVX2":
            # The same CPU model with AVX-512 masked off: capping torch's own kernels and the MKL and oneDNN it
            # calls at AVX2 reproduced depth_cpu's max_iter-4 runs bit for bit (docs/results/depth_cpu).
            print(f"      `{AVX2_LEVEL} python scripts/rerun_pair.py ...` computes at the run's level here")


def _registration(name: str) -> tuple[Registered, Path, Path]:
    """The registration of ``name``, where it is published and where its runs were carried: a comparison
    (``residual_cpu2``), or one point of a registered study (``depth_cpu/max_iter-4``)."""
    study, _, point = name.partition("/")
    if not point:
        return load_spec(name), REPO / "docs" / "results" / name, REPO / "docs" / "results" / name / "carry"
    points = {p.name: p for p in load_study(study).points()}
    if point not in points:
        raise SystemExit(f"study {study} has no point {point!r}: its points are {', '.join(points)}")
    return (points[point].reg, REPO / "docs" / "results" / study / point,
            REPO / "docs" / "results" / study / "carry" / point)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="registered comparison (conf/ab/NAME.yaml), or STUDY/POINT for a study's point")
    ap.add_argument("arm")
    ap.add_argument("seed", type=int)
    ap.add_argument("--results", type=Path, default=None,
                    help="published results.json (default docs/results/NAME/results.json)")
    ap.add_argument("--root", type=Path, default=REPO / "runs" / "rerun", help="where the re-run goes")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: what the published run ran with, from its launch record)")
    ap.add_argument("--print", dest="print_only", action="store_true", help="print the command and stop")
    args = ap.parse_args()

    reg, published_dir, carried = _registration(args.name)
    results_path = args.results or published_dir / "results.json"
    published = json.loads(results_path.read_text())
    if published["registration"].get("sha256") != reg.sha256:
        print(f"{results_path} was produced under another registration "
              f"(sha256 {published['registration'].get('sha256')}) than conf/ab/{args.name}.yaml "
              f"({reg.sha256}); refusing to compare")
        return 2
    comp_dir = (args.root / args.name).resolve()
    pairs = {(p.arm, p.seed): p for p in plan_pairs(reg, list(published.get("overrides", [])), comp_dir)}
    if (args.arm, args.seed) not in pairs:
        print(f"no run {args.arm}-s{args.seed} in {args.name}: arms {list(reg.spec.arms)}, "
              f"init seeds {sorted({seed for _, seed in pairs})}")
        return 2
    pair = pairs[(args.arm, args.seed)]
    # A registration with a tune stage: the pair ran at its arm's chosen lr, which the published results hold
    # (the re-run's own directory has no tune.json, so the plan could not know it).
    chosen = (published.get("tune") or {}).get("chosen") or {}
    tuned = [f"train.lr={chosen[args.arm]}"] if args.arm in chosen else []
    if tuned:
        pair.cfg.train.lr = float(chosen[args.arm])
    data_seed = [] if pair.cfg.train.data_seed is None or reg.protocol == 1 else [
        f"train.data_seed={pair.cfg.train.data_seed}"]  # protocol 2: the replicate's data-order stream
    overrides = [*reg.spec.fixed, *reg.spec.arms[args.arm], *tuned, f"train.seed={args.seed}", *data_seed,
                 f"run.dir={comp_dir}", f"run.name={pair.run_dir.name}"]
    print("equivalent command: dormouse train " + " ".join(overrides))
    # protocol 1 keys a run by its seed, protocol 2 by its replicate (whose init seed ``seed`` is)
    key = str(args.seed) if published.get("protocol", 1) == 1 else str(pair.replicate)
    expected = published["arms"][args.arm]["final_bpb"].get(key)
    print(f"published final bpb ({results_path}): {expected!r}")
    ran_at, here = _published_commit(results_path.parent / "provenance.json"), git_commit()
    if ran_at is not None and ran_at != here:
        # a later commit may compute the same model with other roundings (e.g. issue 11's fused operations)
        print(f"note: the comparison ran at commit {ran_at[:12]}, this tree is at {here}: "
              f"bit-equality is promised at {ran_at[:12]} only (git worktree add /tmp/at {ran_at[:12]}, "
              "then run this script there)")
    _say_cpu(carried / pair.run_dir.name / "provenance.json")
    if args.print_only:
        return 0
    threads = args.threads
    record = results_path.parent / "launch" / f"{pair.run_dir.name}.json"
    if threads is None and record.is_file():
        used = {a.get("threads") for a in json.loads(record.read_text())["attempts"]}
        if len(used) != 1:
            print(f"{record}: the published run ran with several thread counts {sorted(map(str, used))}: "
                  "it cannot be reproduced bit for bit; pass --threads to re-run anyway")
            return 2
        threads = used.pop()
    if threads is None:
        print(f"no launch record {record} says the run's thread count; pass --threads")
        return 2
    print(f"threads: {threads} (the thread count fixes the order of CPU reductions)")
    if pair.run_dir.exists():
        print(f"{pair.run_dir} exists: remove it first (a re-run must start from nothing)")
        return 2

    import torch

    from dormouse.train.loop import train

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    train(pair.cfg)
    wall = time.perf_counter() - t0
    row = final_row(read_metrics(RunFiles(pair.run_dir).metrics), pair.steps)
    got = None if row is None else float(row["bpb"])
    same = got is not None and got == expected
    print(f"re-run final bpb: {got!r}  published: {expected!r}  "
          f"{'REPRODUCED (bit-equal)' if same else 'DIFFERENT'}  wall {wall:.0f} s")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
