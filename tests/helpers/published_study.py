"""An independent oracle for a published registered study (docs/results/<study>/): the study folder came from
the registered study file, and the primary question (each tested arm's change of Δ along the axis) follows from
the carried runs' final bpb by the contrast written out from docs/ab-protocol.md ("A registered study: the
primary question") with scipy's Student t, without calling ``dormouse.ab.study.interaction``.

Each point is a protocol-2 comparison checked by tests/helpers/published_comparison.py; its runs' files are in
``<publication>/carry/<point>/``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

from dormouse.ab.comparison.binding import registration_hash
from tests.helpers import published_comparison as published


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def check_study_registration(study: Any, folder: Path) -> None:
    """The study's stamp is the study file's bytes with no CLI overrides, and each point's stamp is that point's
    registration, derived from those bytes; each point's results state its registered design."""
    raw = study.text.encode("utf-8")
    stamp = read_json(folder / "registration.json")
    assert stamp["sha256"] == hashlib.sha256(raw).hexdigest(), f"{study.source} changed after the study ran"
    assert stamp["registered"] == study.text and stamp["overrides"] == []
    results = read_json(folder / "results.json")
    assert results["registration"]["sha256"] == stamp["sha256"]
    for point in study.points():
        r = read_json(folder / point.name / "results.json")
        assert r["registration"]["sha256"] == hashlib.sha256(point.reg.text.encode("utf-8")).hexdigest(), point.name
        assert r["registration"]["hash"] == registration_hash(point.reg, []) and r["overrides"] == [], point.name
        assert study.sha256 in point.reg.text  # the point follows the study file's bytes
        published.check_results_match_spec(r, point.reg.spec)


def _contrast_weights(values: list[float]) -> list[float]:
    """c_p = (u_p − ū)(u_P − u_1) / Σ_q (u_q − ū)², u = log2(value): the least-squares slope of Δ on log2 value
    times the log2 range, so L = Σ c_p m_p is the change of Δ from the first to the last point."""
    u = [math.log2(v) for v in values]
    ub = math.fsum(u) / len(u)
    ss = math.fsum((x - ub) ** 2 for x in u)
    return [(x - ub) * (u[-1] - u[0]) / ss for x in u]


def interaction(diffs: list[list[float]], values: list[float], alpha: float, n_arms: int, tau: float
                ) -> dict[str, Any]:
    """One arm's change: L, se² = Σ c_p² s_p² / n_p, df = min(n_p − 1) over the weighed points; grows/shrinks
    by the Bonferroni t (α/(2 n_arms) per direction), flat by both TOST tests at α, else undecided."""
    c = _contrast_weights(values)
    means, sds = zip(*(published.mean_sd(d) for d in diffs))
    estimate = math.fsum(cp * m for cp, m in zip(c, means))
    se = math.sqrt(math.fsum(cp**2 * s**2 / len(d) for cp, s, d in zip(c, sds, diffs)))
    df = min(len(d) - 1 for cp, d in zip(c, diffs) if cp != 0)
    t_sup, t_eq = sps.t.isf(alpha / (2 * n_arms), df), sps.t.isf(alpha, df)
    verdict = published.four_way(estimate, se, t_sup, t_eq, tau, ("grows", "shrinks", "flat", "undecided"))
    return {"verdict": verdict, "estimate": estimate, "se": se, "df": df,
            "interval": [estimate - t_sup * se, estimate + t_sup * se],
            "eq_interval": [estimate - t_eq * se, estimate + t_eq * se], "n": [len(d) for d in diffs],
            "means": list(means)}


def check_interaction(study: Any, folder: Path) -> dict[str, dict[str, Any]]:
    """Recompute each tested arm's change (and the A/A arm's calibration) from every point's runs: at each point
    the arm's first n paired differences, n the replicates of the look its replayed decision was taken at (the
    A/A arm: every replicate); assert the study's published decisions are these."""
    results = read_json(folder / "results.json")
    assert results["complete"] is True
    holdback = results.get("alpha_holdback") or 1.0
    alpha, tau, values = results["alpha"] * holdback, results["smallest_change"], [float(v) for v in study.values]
    per_arm: dict[str, list[list[float]]] = {}
    for point in study.points():
        r = read_json(folder / point.name / "results.json")
        verdicts = published.replay_looks(r)
        n_all = r["looks_taken"][-1]["n"]
        for arm in [*r["family"], r["aa_arm"]]:
            n = r["looks"][verdicts[arm][1] - 1] if arm in verdicts else n_all
            per_arm.setdefault(arm, []).append(published.paired_diffs(r, arm, n))
    mine = {arm: interaction(d, values, alpha, len(study.tested), tau) for arm, d in per_arm.items()}
    shown = {**results["interaction"], study.template.aa_arm: results["calibration"]}
    for arm, want in mine.items():
        got = shown[arm]
        assert got["verdict"] == want["verdict"], (arm, got["verdict"], want)
        assert got["df"] == want["df"] and [p["n"] for p in got["points"]] == want["n"], arm
        for key in ("estimate", "se", "interval", "eq_interval"):
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (arm, key)
    return mine
