"""A long comparison resumes on a fresh machine from what was committed (`dormouse ab carry`,
dormouse/ab/lifecycle/carry.py): the finished runs' small files, the stamps and the launch records; never a
checkpoint, a lock or a compile cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_ab import FakeTrain, registry, run  # noqa: F401 - registry is a fixture

from dormouse.ab.comparison.registry import ComparisonError
from dormouse.ab.lifecycle import carry


def test_a_carried_comparison_resumes_elsewhere_without_redoing_a_finished_run(tmp_path: Path,
                                                                                registry: Path) -> None:  # noqa: F811
    first = FakeTrain(stop_at={"gr-s2": 10})  # gr-s2 is "killed" at step 10: not finished
    run(registry, tmp_path / "ab", first)
    saved = tmp_path / "carry"
    carry.save("t", tmp_path / "ab", saved, registry)
    names = {p.relative_to(saved).as_posix() for p in saved.rglob("*") if p.is_file()}
    assert "registration.json" in names and "launch/gr-s1.json" in names and "gr-s1/metrics.jsonl" in names
    assert not any(n.startswith("gr-s2/") for n in names), "an unfinished run is not carried"
    assert not any("checkpoints" in n or n.endswith(".lock") or "compile_cache" in n for n in names)

    fresh = tmp_path / "fresh"  # another machine: nothing of runs/ but what was committed
    carry.restore("t", fresh, saved)
    second = FakeTrain()
    run(registry, fresh, second)
    assert [name for name, _ in second.calls] == ["gr-s2"], second.calls


def test_restore_refuses_to_mix_with_another_run_of_the_comparison(tmp_path: Path,
                                                                    registry: Path) -> None:  # noqa: F811
    run(registry, tmp_path / "ab", FakeTrain())
    saved = tmp_path / "carry"
    carry.save("t", tmp_path / "ab", saved, registry)
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "ab", other)
    metrics = other / "t" / "gr-s1" / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"bpb": 2', '"bpb": 3', 1))
    before = metrics.read_text()
    with pytest.raises(ComparisonError, match="differ from the carried ones"):  # exit 2, nothing restored
        carry.restore("t", other, saved)
    assert metrics.read_text() == before
