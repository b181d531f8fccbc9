"""A comparison published across sittings reports the time it ran, not the pauses between sessions
(`dormouse ab publish`, dormouse/ab/lifecycle/publish.py)."""

from __future__ import annotations

from dormouse.ab.lifecycle import publish


def test_sittings_merge_overlapping_runs_and_split_at_a_pause_between_sessions() -> None:
    attempts = [  # two runs at once, a short gap before the next look, then a pause of an hour
        ("2026-12-02T07:00:00", "2026-12-02T07:05:00"),
        ("2026-12-02T07:00:00", "2026-12-02T07:04:00"),
        ("2026-12-02T07:05:30", "2026-12-02T07:10:00"),
        ("2026-12-02T08:10:00", "2026-12-02T08:15:00"),
        ("2026-12-02T08:12:00", "2026-12-02T08:14:00"),
    ]
    assert publish.sittings(attempts) == [("2026-12-02T07:00:00", "2026-12-02T07:10:00"),
                                          ("2026-12-02T08:10:00", "2026-12-02T08:15:00")]
    assert publish.sittings([]) == []


def test_run_cpus_counts_the_runs_on_each_cpu_and_those_that_recorded_none() -> None:
    """A comparison resumed on a machine with another CPU says so: its runs' speed and roundings follow the CPU."""
    xeon = {"cpu": {"model": "Intel(R) Xeon(R) Processor", "torch_capability": "AVX512", "isa": ["avx512f"]}}
    epyc = {"cpu": {"model": "AMD EPYC", "torch_capability": "AVX2", "isa": ["avx2"]}}
    assert publish.run_cpus([xeon, epyc, xeon, {}]) == {
        "AMD EPYC (AVX2)": 1, "Intel(R) Xeon(R) Processor (AVX512)": 2, "not recorded": 1}
