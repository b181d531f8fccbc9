"""`dormouse ab rerun` (dormouse/ab/lifecycle/rerun.py) says, before it trains, whether this CPU can reproduce
the published run bit for bit: the same CPU says nothing, another says "expect a close number", and the same
model with AVX-512 where the run had none names the environment that computes at the run's level (which
reproduced depth_cpu's max_iter-4 runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dormouse.ab.lifecycle import rerun

EPYC_AVX2 = {"model": "AMD EPYC", "torch_capability": "AVX2", "isa": ["fma", "avx2"]}
EPYC_AVX512 = {"model": "AMD EPYC", "torch_capability": "AVX512", "isa": ["fma", "avx2", "avx512f"]}
XEON = {"model": "Intel(R) Xeon(R) Processor", "torch_capability": "AVX512", "isa": ["fma", "avx2", "avx512f"]}


def _note(ran: dict, here: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> str:
    import dormouse.train.start as start

    monkeypatch.setattr(start, "cpu_description", lambda: here)
    provenance = tmp_path / "provenance.json"
    provenance.write_text(json.dumps({"cpu": ran}))
    rerun._say_cpu(provenance)
    return capsys.readouterr().out


def test_the_same_cpu_gets_no_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert _note(XEON, XEON, tmp_path, monkeypatch, capsys) == ""


def test_another_cpu_is_told_to_expect_a_close_number_not_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = _note(XEON, EPYC_AVX512, tmp_path, monkeypatch, capsys)
    assert "expect a close number" in out and "ATEN_CPU_CAPABILITY" not in out


def test_a_run_without_avx512_rerun_on_its_model_with_it_is_told_how_to_cap_the_level(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = _note(EPYC_AVX2, EPYC_AVX512, tmp_path, monkeypatch, capsys)
    assert "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" in out


def test_a_capped_level_on_the_same_model_is_expected_to_reproduce(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    capped = {**EPYC_AVX512, "torch_capability": "AVX2"}
    out = _note(EPYC_AVX2, capped, tmp_path, monkeypatch, capsys)
    assert "bit-equality is expected" in out and "expect a close number" not in out
