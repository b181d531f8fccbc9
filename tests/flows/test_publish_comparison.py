"""A comparison published across sittings reports the time it ran, not the pauses between sessions
(scripts/publish_comparison.py)."""

from __future__ import annotations

from tests.helpers.script_module import load_script


def test_sittings_merge_overlapping_pairs_and_split_at_a_pause_between_sessions() -> None:
    publish = load_script("publish_comparison")
    attempts = [  # two pairs at once, a short gap before the next look, then a pause of an hour
        ("2026-12-02T07:00:00", "2026-12-02T07:05:00"),
        ("2026-12-02T07:00:00", "2026-12-02T07:04:00"),
        ("2026-12-02T07:05:30", "2026-12-02T07:10:00"),
        ("2026-12-02T08:10:00", "2026-12-02T08:15:00"),
        ("2026-12-02T08:12:00", "2026-12-02T08:14:00"),
    ]
    assert publish.sittings(attempts) == [("2026-12-02T07:00:00", "2026-12-02T07:10:00"),
                                          ("2026-12-02T08:10:00", "2026-12-02T08:15:00")]
    assert publish.sittings([]) == []
