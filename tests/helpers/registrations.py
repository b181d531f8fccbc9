"""Registration files written for a test: the refusal a registry gives one edited registration."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormouse.ab.registry import ABSpecError, load_spec


def refusal(tmp_path: Path, spec: str, name: str, old: str, new: str) -> str:
    """The message ``load_spec`` refuses registration ``spec`` (named ``name``) with, once ``old`` is replaced by
    ``new`` in it; fails the test if ``old`` is not in the text or the edited registration is accepted."""
    reg = tmp_path / "bad"
    reg.mkdir(exist_ok=True)
    assert old in spec
    (reg / f"{name}.yaml").write_text(spec.replace(old, new))
    with pytest.raises(ABSpecError) as exc:
        load_spec(name, reg)
    return str(exc.value)
