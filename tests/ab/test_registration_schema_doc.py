"""docs/ab-protocol.md is where the registration's YAML schema is written: each dataclass a registration is
parsed into has exactly its fields there, in the YAML block of its section."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from dormouse.ab.comparison.registry import BadModeSpec, ComparisonSpec, ComparisonSpecV1, TuneSpec
from dormouse.ab.study.registry import StudyBlock

DOC = Path(__file__).resolve().parents[2] / "docs" / "ab-protocol.md"


def _section(heading: str) -> str:
    """The text of the ``## `` section whose heading starts with ``heading``."""
    parts = re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)
    found = [p for p in parts if p.startswith(heading)]
    assert len(found) == 1, f"docs/ab-protocol.md: {len(found)} sections headed {heading!r}"
    return found[0]


def _documented_keys(heading: str, block: str | None) -> set[str]:
    """The keys of the section's one YAML block (under ``block:`` when given)."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", _section(heading), flags=re.M | re.S)
    assert len(blocks) == 1, f"docs/ab-protocol.md, {heading!r}: {len(blocks)} yaml blocks"
    loaded = yaml.safe_load(blocks[0])
    return set(loaded[block] if block else loaded)


@pytest.mark.parametrize(("schema", "heading", "block"), [
    (ComparisonSpec, "The registration file", None),
    (TuneSpec, "The tune stage", "tune"),
    (StudyBlock, "A registered study (", "study"),
    (BadModeSpec, "The registration file", "bad_mode"),
], ids=["comparison", "tune", "study", "bad_mode"])
def test_protocol_doc_documents_exactly_the_registration_fields(schema: type, heading: str, block: str | None):
    declared = {f.name for f in fields(schema)}
    documented = _documented_keys(heading, block)
    assert declared - documented == set(), f"fields of {schema.__name__} missing from docs/ab-protocol.md"
    assert documented - declared == set(), f"docs/ab-protocol.md documents keys {schema.__name__} lacks"


def test_protocol_doc_names_every_protocol_1_field():
    text = _section("Version 1")
    missing = [f.name for f in fields(ComparisonSpecV1) if f.name != "protocol" and f"`{f.name}`" not in text]
    assert missing == [], f"ComparisonSpecV1 fields missing from docs/ab-protocol.md's Version 1 section: {missing}"
