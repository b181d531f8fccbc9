#!/usr/bin/env bash
# One-shot GPU check of the fused AttnRes kernels, sized for < 8 minutes on one H200:
#   1. the kernel tests natively on CUDA (tests/arms/test_kernels.py, tests/arms/test_attnres.py);
#   2. the kernel benchmark, reduced shape set (scripts/bench_kernels.py --quick);
#   3. the 9m training step, pre-norm (the baseline), ReZero, GR and AttnRes with the fused read, each
#      eager, with the repeated block compiled as regions (train.compile, the default scope), with the whole
#      forward compiled (train.compile_scope=whole) and compiled with CUDA graphs (mode=reduce-overhead), interleaved
#      (scripts/bench_model_step.py);
# then a short summary table. Results (JSON, logs) go to $OUT (default runs/gpu_check/).
#
# Works with the repo NOT pip-installed (the GPU machine has torch/triton/typer/rich but not hydra-core,
# omegaconf, wandb, datasets): wheels carried in .whl/ are installed into /tmp/site, and the two
# package-dir mappings of pyproject.toml are rebuilt in /tmp/dk (dormouse_kernels -> kernels/,
# dormouse.conf -> conf/) without touching the working tree.
#
#   bash scripts/gpu_check.sh            # from the repo root
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/runs/gpu_check}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
T_TESTS="${T_TESTS:-150}"   # per-stage limits (s); the sum (480 s) stays at 8 minutes
T_BENCH="${T_BENCH:-90}"
T_MODEL="${T_MODEL:-240}"   # 16 variants, 12 of them compiled (inductor, ~20-40 s each whole on 16 cores; regions share one)
START=$(date +%s)

# --- environment ---------------------------------------------------------------------------------
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || echo "WARN: wheel install failed"
fi
rm -rf /tmp/dk && mkdir -p /tmp/dk
ln -s "$ROOT/kernels" /tmp/dk/dormouse_kernels
# dormouse.conf is conf/ in the repo: overlay a copy of the package with conf linked in
cp -r "$ROOT/dormouse" /tmp/dk/dormouse
ln -sfn "$ROOT/conf" /tmp/dk/dormouse/conf
export PYTHONPATH="/tmp/dk:/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET  # native kernels; tests/conftest.py only sets it when there is no GPU

"$PY" - <<'EOF' | tee "$OUT/env.txt"
import torch, triton, dormouse_kernels as dk
print("torch", torch.__version__, "| triton", triton.__version__, "| cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "-")
print("dormouse_kernels from", dk.__file__, "| unavailable:", dk.triton_unavailable_reason(torch.device("cuda")))
EOF

declare -A STATUS SECS
run_stage() {  # name, limit, command...
    local name=$1 limit=$2
    shift 2
    local t0=$(date +%s)
    echo "=== $name (limit ${limit}s) ==="
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    SECS[$name]=$(( $(date +%s) - t0 ))
    case $rc in
        0) STATUS[$name]="ok" ;;
        124|137) STATUS[$name]="TIMEOUT" ;;
        *) STATUS[$name]="FAIL(rc=$rc)" ;;
    esac
}

# --- 1. tests ---------------------------------------------------------------------------------------
if "$PY" -m pytest --version >/dev/null 2>&1; then
    TESTS=(tests/arms/test_kernels.py)
    [ -f tests/arms/test_attnres.py ] && TESTS+=(tests/arms/test_attnres.py)
    # -o addopts=-ra: one process on the one GPU, whether or not pytest-xdist (pyproject's addopts) is carried
    run_stage tests "$T_TESTS" "$PY" -m pytest -q -p no:cacheprovider -o addopts=-ra \
        --junitxml="$OUT/tests.xml" "${TESTS[@]}"
else
    STATUS[tests]="SKIP(no pytest: carry a pytest wheel in .whl/)"; SECS[tests]=0
fi

# --- 2. kernel benchmark (reduced) --------------------------------------------------------------------
run_stage bench "$T_BENCH" "$PY" scripts/bench_kernels.py --quick --reps 10 --out "$OUT/bench_kernels.json"

# --- 3. model step ------------------------------------------------------------------------------------
run_stage model_step "$T_MODEL" "$PY" scripts/bench_model_step.py --preset 9m --arms prenorm rezero gr attnres_fused \
    --modes eager regional compile reduce-overhead --rounds 3 --steps 5 --warmup 3 --out "$OUT/bench_model_step.json"

# --- summary (last) -----------------------------------------------------------------------------------
STAGES=""
for s in tests bench model_step; do STAGES+="$s=${STATUS[$s]:-?}:${SECS[$s]:-0};"; done
STAGES="$STAGES" OUT="$OUT" TOTAL=$(( $(date +%s) - START )) "$PY" - <<'EOF'
import json, os, re, pathlib
out = pathlib.Path(os.environ["OUT"])
lines = []
for item in filter(None, os.environ["STAGES"].split(";")):
    name, rest = item.split("=", 1)
    status, secs = rest.rsplit(":", 1)
    extra = ""
    if name == "tests" and (out / "tests.log").exists():
        m = re.findall(r"(\d+ (?:passed|failed|skipped|error)[^\n=]*)", (out / "tests.log").read_text())
        extra = m[-1].strip() if m else ""
    lines.append(f"{name:<11} {status:<12} {secs:>4}s  {extra}")
print("\n" + "=" * 100)
print(f"GPU CHECK SUMMARY (total {os.environ['TOTAL']}s; results in {out})")
print("\n".join(lines))
b = out / "bench_kernels.json"
if b.exists():
    data = json.loads(b.read_text())
    cb = data["meta"]["copy_gbs"]
    print(f"\nkernel (copy bandwidth {cb:.0f} GB/s)   fwd: triton ms  GB/s  %copy  x eager  x compile | "
          "fwd+bwd: triton ms  GB/s  %copy  x eager  x compile")
    for r in data["rows"]:
        def cells(ph):
            t = r.get(f"triton_{ph}_ms")
            if not t:
                return f"{r.get('triton_error', 'n/a')[:40]:>44}"
            g = r[f"triton_{ph}_gbs"]
            e, c = r.get(f"eager_{ph}_ms"), r.get(f"compile_{ph}_ms")
            return (f"{t:9.3f} {g:6.0f} {100 * g / cb:5.0f}% {e / t if e else float('nan'):7.2f} "
                    f"{c / t if c else float('nan'):9.2f}")
        print(f"{r['tokens'] // 1024:>4}K d={r['d']:<5} L={r['L']:<3} {r['dtype']:<9} {cells('fwd')} | {cells('fwdbwd')}")
m = out / "bench_model_step.json"
if m.exists():
    rows = json.loads(m.read_text())["rows"]
    eager = {n.split(" [")[0]: r.get("step_ms") for n, r in rows.items() if n.endswith("[eager]")}
    print()
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:<34} ERROR {r['error'][:70]}")
            continue
        ratio = r["x_base"] if r.get("x_base") is not None else float("nan")
        e = eager.get(name.split(" [")[0])
        speedup = e / r["step_ms"] if e else float("nan")
        print(f"{name:<34} path={r['kernel']:<7} step {r['step_ms']:8.2f} ms  x {r['baseline']} {ratio:5.3f}  "
              f"x eager {speedup:5.2f}  ran/asked {r['counts']}  warmup {r['warmup_s']:.0f}s")
    for q in json.loads(m.read_text()).get("quotients", []):
        print(f"{q['variant']:<34} step x {q['step_x']:.3f} / FLOP x {q['flop_x']:.3f} = {q['quotient']:.3f} "
              f"(goal <= {q['goal']}: {q['verdict']})")
EOF
