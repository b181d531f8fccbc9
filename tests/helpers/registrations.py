"""Registration files written for a test: one template for a small protocol-2 registration (the tiny preset,
20 steps, an eval every 10), the registry folder it is written to, and the refusal a registry gives one
edited registration."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormouse.ab.comparison.registry import ABSpecError, load_spec

# The overrides that make each arm of a test registration (conf/ab/*.yaml names the same).
ARM_OVERRIDES = {
    "rezero": "[]",
    "prenorm": "[model.use_prenorm=true]",
    "gr": "[model.use_gr=true]",
    "attnres_full": "[model.use_attnres=true]",
    "attnres_block": "[model.use_attnres=true, model.attnres.block_size=2]",
    "rezero_aa": "[]",
    "prenorm_aa": "[model.use_prenorm=true]",
}
FIXED = "[preset=tiny, train.steps=20, train.eval_every=10, train.device=cpu, logging.progress=off]"


def registration(name: str, arms: tuple[str, ...], *, sesoi: float = 0.01, looks: str = "[3]",
                 expected_effect: float = -0.02, description: str | None = None, fields: str = "",
                 tail: str = "", fixed: str = FIXED, aa_arm: str | None = "last",
                 overrides: dict[str, str] | None = None) -> str:
    """A protocol-2 registration named ``name`` whose first arm is the baseline and last the A/A arm (``aa_arm``
    names another; None: no A/A arm, nor its data seeds); ``fields`` (lines) go after ``expected_effect``,
    ``tail`` (a block such as ``tune:`` or ``study:``) after the arms; ``overrides`` give arms not in
    ARM_OVERRIDES theirs."""
    aa, known = (arms[-1] if aa_arm == "last" else aa_arm), {**ARM_OVERRIDES, **(overrides or {})}
    head = ["protocol: 2", f"name: {name}"] + ([f"description: {description}"] if description else [])
    lines = [*head, f"baseline: {arms[0]}", *([f"aa_arm: {aa}"] if aa else []), f"sesoi: {sesoi}", "alpha: 0.05",
             f"looks: {looks}", "init_seed_base: 1", "data_seed_base: 101",
             *(["aa_data_seed_base: 201"] if aa else []), "pilot_sd: 0.01", f"expected_effect: {expected_effect}",
             *fields.splitlines(), f"fixed: {fixed}", "arms:",
             *(f"  {arm}: {known[arm]}" for arm in arms)]
    return "\n".join(lines) + "\n" + tail


def write_registry(root: Path, name: str, text: str) -> Path:
    """``root``/registry holding registration ``name`` with ``text``: the folder to pass as ``registry=``."""
    reg = root / "registry"
    reg.mkdir(exist_ok=True)
    (reg / f"{name}.yaml").write_text(text)
    return reg


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
