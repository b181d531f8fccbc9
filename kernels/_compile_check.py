"""Compile the kernels for a CUDA target without a GPU: ``python -m dormouse_kernels._compile_check``.

CI has no GPU and tests the kernels under Triton's interpreter, which accepts code the compiler rejects
(Python-int loop variables, scalar masks, loop-carried type changes). This compiles every kernel variant
the host code launches -- through Triton's real front end, optimiser and ptxas -- for sm_90 (H100/H200)
and prints one JSON line per variant with the PTX global-load widths, so a test can also check that the
source loads stay 128-bit vectorised (the ``tl.multiple_of`` hint on the source-offset table).

Must run in a process where TRITON_INTERPRET is unset: in interpreter mode triton.language is patched
for the interpreter and cannot lower to IR.
"""

from __future__ import annotations

import json
import os
import re
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import depth_attend as da
from . import merge as mg

_TL = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32, "fp64": tl.float64}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}
_DIV16 = [["tt.divisibility", 16]]


def _raw(kernel):
    # an InterpretedFunction (TRITON_INTERPRET=1 at import) keeps the Python function as .fn
    return kernel if isinstance(kernel, triton.runtime.jit.JITFunction) else triton.jit(kernel.fn)


def _compile(kernel, sig: dict[str, str], consts: dict, divisible: set[str], warps: int, arch: int):
    fn = _raw(kernel)
    sig = dict(sig)
    sig.update({k: "constexpr" for k in consts})
    names = list(sig)
    # what the launcher's specialisation gives real tensors: 16-byte-aligned pointers, ints % 16 == 0
    attrs = {(names.index(n),): _DIV16 for n in names if n in divisible}
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})


def variants() -> list[dict]:
    """The depth-attend variants the host launches for the benchmark shapes, plus odd-d and fp64 ones."""
    out = []
    for dt, d, form, aligned in (
        ("bf16", 1024, "paper", True),
        ("bf16", 2048, "paper", True),
        ("fp32", 256, "sqrt_d", True),
        ("fp16", 130, "paper", False),
        ("fp64", 33, "paper", False),
    ):
        out.append({"dtype": dt, "d": d, "form": form, "aligned": aligned})
    return out


def run(arch: int = 90) -> list[dict]:
    results = []
    for v in variants():
        dt, d = v["dtype"], v["d"]
        acc = "fp64" if dt == "fp64" else "fp32"
        bn, bd, warps = da._blocks(d, None)
        consts = {
            "NORM_MEAN": v["form"] == "paper",
            "DELTA_ALIGN": 16 // _SIZE[dt] if v["aligned"] else 1,
            "BLOCK_N": bn,
            "BLOCK_D": bd,
            "ACC": _TL[acc],
        }
        common = {"base_ptr": f"*{dt}", "delta_ptr": "*i64", "qg_ptr": f"*{acc}", "out_ptr": f"*{dt}"}
        div = {"base_ptr", "delta_ptr", "qg_ptr", "out_ptr", "lse_ptr", "gout_ptr", "gsrc_ptr", "dqg_ptr"}
        if d % 16 == 0:
            div |= {"D", "SLOT"}
        fwd_sig = {**common, "lse_ptr": f"*{acc}", "N": "i32", "D": "i32", "L": "i32", "eps": "fp32"}
        bwd_sig = {
            **common,
            "lse_ptr": f"*{acc}",
            "gout_ptr": f"*{dt}",
            "gsrc_ptr": f"*{dt}",
            "dqg_ptr": f"*{acc}",
            "N": "i32",
            "D": "i32",
            "L": "i32",
            "eps": "fp32",
            "NUM_BLOCKS": "i32",
            "NPROG": "i32",
            "SLOT": "i32",
        }
        for name, kernel, sig in (
            ("fwd", da._depth_attend_fwd_kernel, fwd_sig),
            ("bwd", da._depth_attend_bwd_kernel, bwd_sig),
        ):
            c = _compile(kernel, sig, consts, div, warps, arch)
            loads = sorted(set(re.findall(r"ld\.global[.\w]*", c.asm["ptx"])))
            results.append({"kernel": name, **v, "block_n": bn, "warps": warps, "loads": loads})
    for dt in ("fp32", "bf16"):
        sig = {n: f"*{dt}" for n in ("m1_ptr", "l1_ptr", "o1_ptr", "m2_ptr", "l2_ptr", "o2_ptr")}
        sig |= {n: f"*{dt}" for n in ("m_ptr", "l_ptr", "o_ptr", "h_ptr")} | {"N": "i32", "D": "i32"}
        consts = {"WRITE_H": True, "BLOCK_N": 4, "BLOCK_D": 1024, "ACC": tl.float32}
        c = _compile(mg._merge_kernel, sig, consts, {n for n in sig if n.endswith("_ptr")} | {"D"}, 4, arch)
        loads = sorted(set(re.findall(r"ld\.global[.\w]*", c.asm["ptx"])))
        results.append({"kernel": "merge", "dtype": dt, "d": 1024, "loads": loads})
    return results


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        sys.exit("unset TRITON_INTERPRET: the interpreter's patched triton.language cannot compile")
    for r in run(int(sys.argv[1]) if len(sys.argv) > 1 else 90):
        print(json.dumps(r))
