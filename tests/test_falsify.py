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
        },
        {
            "name": "no_longer_matches",
            "file": "dormouse/attnres.py",
            "old": "this text is not in the file",
            "new": "",
            "gates": [gate],
            "why": "stale",
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
