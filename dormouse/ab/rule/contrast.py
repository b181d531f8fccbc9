"""A registered contrast between two tested arms (docs/ab-protocol.md, "A registered contrast"): Δ_i = bpb(arm) −
bpb(against) per replicate, paired by their shared seeds, decided at every look by :func:`sequential.decide` as a
family of one test with its own SESOI. Its arms run on while it is undecided; their verdicts against the baseline
stay as decided at their own look."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dormouse.ab.rule.sequential import UNDECIDED, ArmDecision, Design, DesignCard, decide, design_card

KEY = "contrast"  # the one test of its family, as sequential.decide names it


@dataclass
class ContrastState:
    """Where the registered contrast stands after the looks replayed so far."""

    arm: str
    against: str
    decisions: list[ArmDecision] = field(default_factory=list)  # one per look taken, in order
    diffs: list[float] = field(default_factory=list)  # arm − against over the replicates of the last look taken
    invalid: str | None = None  # why no verdict (a run of either arm failed or ran not as asked)

    @property
    def decision(self) -> ArmDecision | None:
        """The contrast's latest decision (None before its first look)."""
        return self.decisions[-1] if self.decisions else None

    @property
    def open(self) -> bool:
        """Its arms run on: it is neither decided nor invalid."""
        d = self.decision
        return self.invalid is None and (d is None or d.verdict == UNDECIDED)

    @property
    def arms(self) -> tuple[str, str]:
        return self.arm, self.against

    @property
    def verdict(self) -> str:
        if self.invalid is not None:
            return "invalid"
        return UNDECIDED if self.decision is None else str(self.decision.verdict)

    def sentence(self) -> str:
        """What the contrast's rule tested at its latest look (or why it has no verdict)."""
        if self.invalid is not None:
            return f"{self.arm} vs {self.against} has no verdict: {self.invalid}."
        if self.decision is None:
            return f"{self.arm} vs {self.against}: no look taken yet."
        return self.decision.sentence(self.arm, self.against)


def contrast_design(spec: Any) -> Design:
    """The contrast's design: the comparison's α, hold-back and looks, its own SESOI, a family of one."""
    return Design(alpha=float(spec.alpha), sesoi=float(spec.contrast.sesoi), looks=tuple(int(n) for n in spec.looks),
                  n_arms=1, alpha_holdback=float(spec.alpha_holdback))


def contrast_card(spec: Any) -> DesignCard:
    """The contrast's design card at its registered pilot sd and expected effect."""
    return design_card(contrast_design(spec), float(spec.contrast.pilot_sd), float(spec.contrast.expected_effect))


def decide_look(spec: Any, state: ContrastState, look: int, diffs: list[float]) -> None:
    """Decide the open contrast at ``look`` (0-based) from its paired differences there."""
    state.diffs = list(diffs)
    state.decisions.append(decide(contrast_design(spec), look, {KEY: diffs})[KEY])


def to_dict(spec: Any, state: ContrastState) -> dict[str, Any]:
    """The contrast as results.json holds it: the registration, each look's decision, the verdict and sentence."""
    c = spec.contrast
    return {"arm": c.arm, "against": c.against, "sesoi": float(c.sesoi), "pilot_sd": float(c.pilot_sd),
            "expected_effect": float(c.expected_effect), "verdict": state.verdict, "sentence": state.sentence(),
            "invalid": state.invalid, "diffs": list(state.diffs),
            "looks": [d.to_dict() for d in state.decisions]}
