#!/usr/bin/env python
"""Size the next registration from a published comparison: the design card at its arms' paired sds.

    python scripts/card_from_published.py docs/results/residual_cpu2/results.json --looks 4 8 12
    python scripts/card_from_published.py docs/results/residual_cpu/results.json --extra-sd max   # + one new arm

The card is :func:`dormouse.ab.sequential.design_card` (the exact procedure, simulated); this script only
chooses its inputs: each compared arm's sample sd of paired differences (``arms[*].diff_sd``, role ``arm``;
the baseline and the A/A arm are not compared arms), plus one sd per ``--extra-sd`` for an arm the published
comparison did not have (``max``: the largest published sd, a conservative guess for an arm whose spread
against this baseline is unknown). Paste what it prints into the new registration's comments, with why.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from dormouse.ab.sequential import CARD_N_SIM, Design, DesignCard, design_card


def pilot_sds(results: Mapping) -> dict[str, float]:
    """Each compared arm's sd of paired differences (``arms[*].diff_sd`` of a results.json, role ``arm``)."""
    return {name: float(a["diff_sd"]) for name, a in results["arms"].items()
            if a.get("role") == "arm" and a.get("diff_sd") is not None}


def card(sds: Mapping[str, float], looks: Sequence[int], sesoi: float, expected_effect: float,
         alpha: float = 0.05, extra_sd: Sequence[str] = (), n_sim: int = CARD_N_SIM) -> DesignCard:
    """The design card for the compared arms' paired ``sds`` (:func:`pilot_sds`) plus ``extra_sd`` arms."""
    if not sds:
        raise SystemExit("the results file has no compared arm with a paired sd")
    extra = [max(sds.values()) if x == "max" else float(x) for x in extra_sd]
    spread = [*extra, *sds.values()]
    design = Design(alpha=alpha, sesoi=sesoi, looks=tuple(looks), n_arms=len(spread))
    return design_card(design, spread, expected_effect, n_sim=n_sim)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a published results.json")
    ap.add_argument("--looks", type=int, nargs="+", required=True, help="cumulative replicates per look")
    ap.add_argument("--sesoi", type=float, default=0.03)
    ap.add_argument("--expected", type=float, default=-0.05, help="the effect to state the power at (bpb)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--extra-sd", action="append", default=[], help="an arm not in the results: its sd, or max")
    ap.add_argument("--n-sim", type=int, default=CARD_N_SIM)
    args = ap.parse_args(argv)
    sds = pilot_sds(json.loads(args.results.read_text()))
    print(f"paired sds from {args.results}: " + ", ".join(f"{a} {v:.4f}" for a, v in sds.items()))
    print(card(sds, args.looks, args.sesoi, args.expected, args.alpha, args.extra_sd, args.n_sim).to_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
