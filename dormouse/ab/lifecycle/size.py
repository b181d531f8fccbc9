"""``dormouse ab size RESULTS.json --looks 4,8,12``: size the next registration from a published comparison: the
design card at its arms' paired sds.

The card is :func:`dormouse.ab.rule.sequential.design_card` (the exact procedure, simulated); this only chooses its
inputs: each compared arm's sample sd of paired differences (``arms[*].diff_sd``, role ``arm``; the baseline
and the A/A arm are not compared arms), plus one sd per ``--extra-sd`` for an arm the published comparison did
not have (``max``: the largest published sd, a conservative guess for an arm whose spread against this baseline
is unknown). Paste what it prints into the new registration's comments, with why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

from dormouse.ab.comparison.registry import ComparisonError
from dormouse.ab.rule.sequential import CARD_N_SIM, Design, DesignCard, design_card


def pilot_sds(results: Mapping) -> dict[str, float]:
    """Each compared arm's sd of paired differences (``arms[*].diff_sd`` of a results.json, role ``arm``)."""
    return {name: float(a["diff_sd"]) for name, a in results["arms"].items()
            if a.get("role") == "arm" and a.get("diff_sd") is not None}


def card(sds: Mapping[str, float], looks: Sequence[int], sesoi: float, expected_effect: float,
         alpha: float = 0.05, extra_sd: Sequence[str] = (), n_sim: int = CARD_N_SIM) -> DesignCard:
    """The design card for the compared arms' paired ``sds`` (:func:`pilot_sds`) plus ``extra_sd`` arms."""
    if not sds:
        raise ComparisonError(["the results file has no compared arm with a paired sd"])
    extra = [max(sds.values()) if x == "max" else float(x) for x in extra_sd]
    spread = [*extra, *sds.values()]
    design = Design(alpha=alpha, sesoi=sesoi, looks=tuple(looks), n_arms=len(spread))
    return design_card(design, spread, expected_effect, n_sim=n_sim)


def size_from(results: Path, looks: Sequence[int], *, sesoi: float, expected_effect: float, alpha: float,
              extra_sd: Sequence[str], n_sim: int, console: Console) -> None:
    """Print the published comparison's paired sds and the card they give the design ``looks``."""
    sds = pilot_sds(json.loads(results.read_text()))
    console.print(f"paired sds from {results}: " + ", ".join(f"{a} {v:.4f}" for a, v in sds.items()),
                  soft_wrap=True, highlight=False, markup=False)
    console.print(card(sds, looks, sesoi, expected_effect, alpha, extra_sd, n_sim).to_text(), soft_wrap=True,
                  highlight=False, markup=False)
