"""scripts/falsify.py: perturbations apply, a real defect goes red and restores green, a harmless or stale
perturbation is reported (exit 1), never counted as falsified."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "falsify.py"


def _falsify() -> ModuleType:
    spec = importlib.util.spec_from_file_location("falsify", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["falsify"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_every_perturbation_loads_and_applies_exactly_once() -> None:
    """A perturbation whose ``old`` no longer matches is stale: caught here, before the slow full run."""
    falsify = _falsify()
    perts, errors = falsify.load_perturbations()
    assert not errors, f"perturbation files that do not load: {errors}"
    assert {p["source"] for p in perts} >= {"perturbations_attnres.py"}
    stale = {p["name"]: falsify.occurrences(p) for p in perts if falsify.occurrences(p) != 1}
    assert not stale, f"stale perturbations (name: occurrences of `old`): {stale}"
    with pytest.raises(falsify.StalePerturbation):
        falsify.apply("a a", "a", "b", "x.py")


def test_falsify_goes_red_and_restores_green(tmp_path: Path) -> None:
    out = tmp_path / "falsify.json"
    proc = _run("--only", "temperature_1_over_sqrt_d", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())["results"]
    assert result["status"] == "red", result
    assert result["gate"].startswith("tests/test_attnres.py::test_gold_fixture_a"), result
    assert result["deviation"] and "bound" in result["deviation"], result  # "by how much" was parsed
    assert result["restored"] is True, result
    # the perturbed copy, not the editable install of the repo, is what the gate imported
    assert "/falsify-" in result["imports"]["dormouse.attnres"], result["imports"]
    assert "temperature_1_over_sqrt_d" in proc.stdout  # the table was printed


def test_falsify_reports_harmless_and_stale_perturbations(tmp_path: Path) -> None:
    gate = "tests/test_attnres.py::test_gold_fixture_a"
    perts = [
        {  # changes a comment only: every gate stays green, so it falsifies nothing
            "name": "comment_only",
            "file": "dormouse/attnres.py",
            "old": "# Eq. 4: the weights act on the RAW values",
            "new": "# (a comment changed)",
            "gates": [gate],
            "why": "a no-op",
            "protects": "mechanism",
        },
        {
            "name": "no_longer_matches",
            "file": "dormouse/attnres.py",
            "old": "this text is not in the file",
            "new": "",
            "gates": [gate],
            "why": "stale",
            "protects": "mechanism",
        },
    ]
    pfile = tmp_path / "perturbations_test.py"
    pfile.write_text(f"PERTURBATIONS = {perts!r}\n")
    out = tmp_path / "falsify.json"
    proc = _run("--file", str(pfile), "--json", str(out))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    status = {r["name"]: r for r in json.loads(out.read_text())["results"]}
    assert status["comment_only"]["status"] == "survived", status["comment_only"]
    assert status["comment_only"]["restored"] is True, status["comment_only"]
    assert status["no_longer_matches"]["status"] == "stale", status["no_longer_matches"]
    assert "occurs 0 times" in status["no_longer_matches"]["detail"]


def test_a_perturbation_without_protects_is_a_load_error_and_the_record_is_grouped(tmp_path: Path) -> None:
    falsify = _falsify()
    base = {"name": "x", "file": "dormouse/attnres.py", "old": "a", "new": "b", "gates": ["tests/t.py::t"],
            "why": "w"}
    pfile = tmp_path / "perturbations_t.py"
    pfile.write_text(f"PERTURBATIONS = {[base, {**base, 'name': 'y', 'protects': 'vibes'}]!r}\n")
    perts, errors = falsify.load_perturbations([pfile])
    assert perts == [] and len(errors) == 2, errors
    assert "missing ['protects']" in errors[0] and "protects='vibes' is not one of" in errors[1], errors
    results = [falsify.Result("k1", "f", "why k1", "perturbations_k.py", ["g"], "kernels", status="red",
                              gate="tests/test_k.py::t", deviation="2 (bound 1), 2x", restored=True),
               falsify.Result("m1", "f", "why m1", "perturbations_m.py", ["g"], "mechanism", status="survived",
                              detail="every gate stayed green", restored=True)]
    md = falsify.render_markdown(results, 3.0, "python scripts/falsify.py", 1, "2026-12-01", [])
    assert md.index("## Mechanism") < md.index("## Kernels")  # the PROTECTS order, not the run order
    assert "| `k1` (k) | why k1 | `test_k.py::t` | 2 (bound 1), 2x | yes |" in md
    assert "| `m1` (m) | why m1 | **SURVIVED** | every gate stayed green | yes |" in md
    assert "| mechanism | 1 | 0 | 1 |" in md and "exit status 1" in md
