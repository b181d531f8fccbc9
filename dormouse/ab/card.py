"""The design card (``design.json``): the registered design simulated at the pilot spread
(:func:`dormouse.ab.sequential.design_card`), saved under the registration it was made for."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from dormouse.ab.plan import ComparisonPlan
from dormouse.ab.registration import registration_hash
from dormouse.ab.sequential import DesignCard, design_card
from dormouse.run.checkpoint import atomic_write_text


def design_card_for(plan: ComparisonPlan) -> DesignCard:
    spec = plan.spec
    return design_card(plan.design(), float(spec.pilot_sd), float(spec.expected_effect))


def ensure_design_card(plan: ComparisonPlan, console: Console) -> dict[str, Any]:
    """The saved card for this registration, computed and saved if missing or made for another. Returns
    ``{"registration_hash", "card", "text"}``."""
    path = plan.files.design
    want = registration_hash(plan.reg, plan.overrides)
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("registration_hash") == want:
            return saved
    console.print(f"ab {plan.name}: simulating the design card (the registered looks, arms and rule)")
    return save_design_card(plan, design_card_for(plan))


def save_design_card(plan: ComparisonPlan, card: DesignCard) -> dict[str, Any]:
    """Write ``design.json``: the card, its text, and the registration it was made for."""
    saved = {"registration_hash": registration_hash(plan.reg, plan.overrides), "card": card.to_dict(),
             "text": card.to_text()}
    plan.comp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(plan.files.design, json.dumps(saved, indent=2, allow_nan=False) + "\n")
    return saved
