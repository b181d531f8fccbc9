"""A comparison's results flow in memory: the run records are read from disk once per replay of the looks, the
report is made from the last replay's records, the runner returns the results it wrote, and ``results.json`` reads
back as the same typed results."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dormouse.ab.comparison import runner
from dormouse.ab.reporting.results import ComparisonResults
from dormouse.ab.runs.job import Run
from dormouse.ab.runs.records import RunRecord
from tests.flows.test_ab import SEQUENTIAL, SPEC, FakeTrain


def test_the_report_reads_no_record_the_looks_did_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "t.yaml").write_text(SEQUENTIAL)
    reads: Counter[str] = Counter()
    after_replays: list[Counter[str]] = []  # the reads counted as each replay of the looks ends
    read_run, progress = runner.read_run, runner.progress

    def counted_read(p: Run, error: str | None = None) -> RunRecord:
        reads[p.name] += 1
        return read_run(p, error)

    def counted_progress(*args: Any, **kw: Any) -> Any:
        state = progress(*args, **kw)
        after_replays.append(Counter(reads))
        return state

    monkeypatch.setattr(runner, "read_run", counted_read)
    monkeypatch.setattr(runner, "progress", counted_progress)
    results = runner.run_comparison("t", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                                    train_fn=FakeTrain(), registry=tmp_path / "registry")

    assert len(after_replays) == 3  # look 1's runs, look 2's runs, then the replay that finds nothing to run
    assert reads == after_replays[-1]  # the analysis and the report read nothing more
    assert max(reads.values()) <= len(after_replays)  # a run is read at most once per replay
    assert {name for name, n in reads.items() if n == 3} >= {"rezero-s1", "gr-s1", "rezero-s2", "gr-s2"}
    assert isinstance(results, ComparisonResults) and results.complete
    assert results.to_json() == json.loads((results.plan.comp_dir / "results.json").read_text())


@pytest.mark.parametrize(("spec", "fake"), [(SEQUENTIAL, FakeTrain()), (SPEC, FakeTrain(fail=("attnres_block-s2",)))],
                         ids=["two looks", "a failed run"])
def test_results_json_reads_back_as_the_results_written(tmp_path: Path, spec: str, fake: FakeTrain) -> None:
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "t.yaml").write_text(spec)
    results = runner.run_comparison("t", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                                    train_fn=fake, registry=tmp_path / "registry")
    doc = json.loads((results.plan.comp_dir / "results.json").read_text())
    assert ComparisonResults.from_json(results.to_json()) == results
    assert ComparisonResults.from_json(doc) == results and ComparisonResults.from_json(doc).to_json() == doc
    assert results.complete == doc["complete"] == (spec == SEQUENTIAL)
