#!/usr/bin/env python
"""Does ``train.compile=true`` shorten a real comparison on this machine? (issue 23, goal 3)

Runs ONE replicate of ``residual_cpu``'s five runs (ReZero, GR, Full and Block AttnRes, the A/A repeat;
its registered config, 2800 steps each) through ``dormouse ab NAME --jobs 2``, as a user would, three times:

1. ``compile-cold``: ``train.compile=true`` with an empty compile cache: the comparison pays each arm's
   compile once (the comparison's ``compile_cache/``, dormouse/ab/runs/job.py);
2. ``eager``: ``train.compile=false``;
3. ``compile-warm``: ``train.compile=true`` again, its cache pointed at run 1's (``TORCHINDUCTOR_CACHE_DIR``):
   what every later replicate of a compiled comparison pays.

``residual_cpu`` itself is a protocol-1 registration, which ``dormouse ab`` only reads, so the script writes a
protocol-2 copy of it (same ``fixed`` and arms; looks ``[2]``, the smallest allowed) per mode under ``--root``
and stops each comparison (SIGINT to its process group, as Ctrl-C) once replicate 1's five runs have finished:
the slot that frees up first starts replicate 2 meanwhile, as it would in a real comparison, so the figure is
the steady-state wall time of one replicate. Reported per mode: the wall time from the first run's start to
the fifth run's end (the launch records), each run's elapsed time, and the first step of each run (its
``first step:`` line: the compile, cold or warm).

    python scripts/bench_compile_comparison.py --root /tmp/bench_compile          # ~35 min on 2 cores
    python scripts/bench_compile_comparison.py --root /tmp/bc --modes eager compile-warm --steps 700

Run it on a quiet machine: nothing else may run beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARMS = ("rezero", "gr", "attnres_full", "attnres_block", "rezero_aa")
MODES = ("compile-cold", "eager", "compile-warm")
_FIRST = re.compile(r"first step: ([\d.]+) s")


def registration(name: str, compile_: bool, steps: int | None) -> str:
    """residual_cpu's fixed settings and arms as a protocol-2 registration (looks [2])."""
    src = (REPO / "conf" / "ab" / "residual_cpu.yaml").read_text()
    fixed = src[src.index("fixed:") : src.index("arms:")].replace(
        "train.compile=false", f"train.compile={'true' if compile_ else 'false'}"
    )
    if steps is not None:
        fixed = re.sub(r"train\.steps=\d+", f"train.steps={steps}", fixed)
        fixed = re.sub(r"train\.(eval|ckpt)_every=\d+", lambda m: f"train.{m.group(1)}_every={steps}", fixed)
    arms = "\n".join(
        [
            "arms:",
            "  rezero: []",
            "  gr: [model.use_gr=true]",
            "  attnres_full: [model.use_attnres=true]",
            "  attnres_block: [model.use_attnres=true, model.attnres.block_size=2]",
            "  rezero_aa: []",
        ]
    )
    return (
        f"protocol: 2\nname: {name}\ndescription: one replicate of residual_cpu, train.compile={compile_}\n"
        "metric: bpb\nbaseline: rezero\naa_arm: rezero_aa\nsesoi: 0.03\nalpha: 0.05\nlooks: [2]\n"
        "init_seed_base: 1\ndata_seed_base: 1001\naa_data_seed_base: 2001\npilot_sd: 0.03\n"
        f"expected_effect: -0.05\n{fixed}{arms}\n"
    )


def replicate_done(comp: Path) -> bool:
    for arm in ARMS:
        rec = comp / "launch" / f"{arm}-s1.json"
        if not rec.is_file():
            return False
        attempts = json.loads(rec.read_text()).get("attempts", [])
        if not attempts or attempts[-1].get("state") != "done":
            return False
    return True


def measure(mode: str, root: Path, steps: int | None, cache: Path | None) -> dict:
    name = f"rcpu_{mode.replace('-', '_')}"
    reg = root / f"{name}.yaml"
    reg.parent.mkdir(parents=True, exist_ok=True)
    reg.write_text(registration(name, mode != "eager", steps))
    env = dict(os.environ)
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    cmd = ["dormouse", "ab", str(reg), "--jobs", "2", "--root", str(root / "ab"), "--restart"]
    print(f"{mode}: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    # its own process group: the stop below reaches the driver and its run workers, as Ctrl-C in a terminal does
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    comp = root / "ab" / name
    while not replicate_done(comp):
        if proc.poll() is not None:
            break
        time.sleep(5)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    runs = {}
    for arm in ARMS:
        att = json.loads((comp / "launch" / f"{arm}-s1.json").read_text())["attempts"][-1]
        log = (comp / "launch" / f"{arm}-s1.out").read_text(errors="replace")
        first = _FIRST.search(log)
        runs[arm] = {
            "started": att["started"],
            "finished": att["finished"],
            "elapsed_s": att["elapsed_s"],
            "state": att["state"],
            "first_step_s": float(first.group(1)) if first else None,
        }
    start = min(datetime.fromisoformat(p["started"]) for p in runs.values())
    end = max(datetime.fromisoformat(p["finished"]) for p in runs.values())
    out = {"mode": mode, "wall_s": (end - start).total_seconds(), "driver_s": time.time() - t0, "pairs": runs}
    print(
        f"{mode}: replicate wall {out['wall_s']:.0f} s; "
        + ", ".join(f"{a} {p['elapsed_s']:.0f} s (first step {p['first_step_s']} s)" for a, p in runs.items()),
        flush=True,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="where the comparisons and registrations go")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--steps", type=int, help="shorter runs (default: the registered 2800)")
    ap.add_argument("--out", type=Path, help="write the measurements here as JSON")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    cold_cache = root / "ab" / "rcpu_compile_cold" / "compile_cache"
    results = []
    for mode in args.modes:
        cache = cold_cache if mode == "compile-warm" else None
        if mode == "compile-warm" and not cold_cache.is_dir():
            print(f"compile-warm needs compile-cold's cache ({cold_cache}); run compile-cold first", file=sys.stderr)
            return 2
        results.append(measure(mode, root, args.steps, cache))
    print("\none replicate of residual_cpu's five runs, dormouse ab --jobs 2 (first start to fifth end):")
    eager = next((r["wall_s"] for r in results if r["mode"] == "eager"), None)
    for r in results:
        rel = f"  x{r['wall_s'] / eager:.3f} of eager" if eager else ""
        print(f"  {r['mode']:13s} {r['wall_s']:7.0f} s{rel}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
