"""The published comparison (docs/results/residual_cpu/) is the registered one, and its verdicts follow the
registered rule (issue 14).

These read two committed files and nothing else: the registration ``conf/ab/residual_cpu.yaml`` and the
outcome ``docs/results/residual_cpu/results.json`` that ``dormouse ab residual_cpu`` wrote. They fail when
either is edited without the other (another seed list, another fixed value, a hand-edited verdict), which
is what a reader must be able to rely on: the numbers in the README came from the file in conf/ab.

The verdicts are recomputed here from the per-run final bpb in ``runs`` (not from the arms' own summary
fields), with the rule written out from docs/ab-protocol.md and the Student-t distribution from scipy,
without calling ``dormouse.ab.stats``: an oracle independent of the code that wrote the report.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

from dormouse.ab.registry import load_spec
from dormouse.ab.runner import registration_hash

REPO = Path(__file__).resolve().parent.parent
NAME = "residual_cpu"
PUBLISHED = REPO / "docs" / "results" / NAME
# The sizing target of issue 14: every model of the comparison below 2.6 val bpb (it has learned something).
BPB_CEILING = 2.6
CEILING_HEADING = "## Models at or above the 2.6 bpb ceiling"
_CEILING_LINE = re.compile(r"^- `(\w+)` seed (\d+): ([\d.]+)", re.MULTILINE)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return json.loads((PUBLISHED / "results.json").read_text(encoding="utf-8"))


def test_published_results_come_from_the_registered_file(results: dict[str, Any]) -> None:
    reg = load_spec(NAME)  # the installed dormouse.conf/ab/residual_cpu.yaml, i.e. conf/ab/ in the repo
    raw = reg.text.encode("utf-8")
    stamp = results["registration"]
    assert stamp["sha256"] == hashlib.sha256(raw).hexdigest(), "conf/ab/residual_cpu.yaml changed after the run"
    registered = json.loads((PUBLISHED / "registration.json").read_text(encoding="utf-8"))
    assert registered["registered"] == raw.decode("utf-8")  # the registration stamp keeps the file's text
    assert registered["sha256"] == stamp["sha256"] and registered["hash"] == stamp["hash"]
    assert stamp["overrides"] == [] and results["overrides"] == [], "the published run had CLI overrides"
    assert stamp["hash"] == registration_hash(reg, [])
    spec = reg.spec
    assert results["name"] == spec.name
    assert results["seeds"] == list(spec.seeds)
    assert results["fixed"] == list(spec.fixed)
    assert results["baseline"] == spec.baseline and results["aa_arm"] == spec.aa_arm
    assert results["min_effect"] == spec.min_effect
    assert {a: r["overrides"] for a, r in results["arms"].items()} == {a: list(o) for a, o in spec.arms.items()}


def test_every_registered_pair_finished_and_passed_its_counter_check(results: dict[str, Any]) -> None:
    spec = load_spec(NAME).spec
    assert results["complete"] is True
    ran = {(r["arm"], r["seed"]) for r in results["runs"] if r["complete"]}
    assert ran == {(a, s) for a in spec.arms for s in spec.seeds}
    for arm, r in results["arms"].items():
        assert r["counter_check"] == "pass", (arm, r["findings"])
    for run in results["runs"]:
        assert run["final"]["step"] == run["steps"], run["arm"]


def test_every_model_at_or_above_the_bpb_ceiling_is_named_in_the_publication(results: dict[str, Any]) -> None:
    """The registration was sized for every model below 2.6 bpb; one that is not must be named, with its
    number, under the results README's ceiling heading (nothing else is listed there)."""
    finals = {(r["arm"], r["seed"]): r["final"]["bpb"] for r in results["runs"]}
    over = {k: round(v, 4) for k, v in finals.items() if not v < BPB_CEILING}
    text = (PUBLISHED / "README.md").read_text(encoding="utf-8")
    section = text.split(CEILING_HEADING, 1)[1].split("\n## ", 1)[0] if CEILING_HEADING in text else ""
    named = {(m.group(1), int(m.group(2))): float(m.group(3)) for m in _CEILING_LINE.finditer(section)}
    assert named == over, f"models at or above {BPB_CEILING} bpb: {over}; named in the README: {named}"


def _t_interval(xs: list[float]) -> tuple[float, float, float]:
    n = len(xs)
    m = math.fsum(xs) / n
    s = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))
    half = sps.t.ppf(0.975, n - 1) * s / math.sqrt(n)
    p = 2 * sps.t.sf(abs(m) / (s / math.sqrt(n)), n - 1) if s > 0 else (1.0 if m == 0 else 0.0)
    return m - half, m + half, p


def _holm(ps: dict[str, float]) -> dict[str, float]:
    order = sorted(ps, key=lambda a: ps[a])
    out, running = {}, 0.0
    for rank, arm in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * ps[arm]))
        out[arm] = running
    return out


def test_published_verdicts_follow_the_registered_rule(results: dict[str, Any]) -> None:
    """better/worse: interval on one side of 0, |mean| >= delta, Holm p < 0.05; tie: interval inside
    (-delta, +delta); undecided: anything else (docs/ab-protocol.md, "Verdicts")."""
    final = {(r["arm"], r["seed"]): r["final"]["bpb"] for r in results["runs"]}
    seeds, base = results["seeds"], results["baseline"]
    diffs = {a: [final[(a, s)] - final[(base, s)] for s in seeds] for a in results["arms"] if a != base}
    aa = results["aa_arm"]
    aa_mean = math.fsum(diffs[aa]) / len(seeds)
    aa_sd = math.sqrt(math.fsum((d - aa_mean) ** 2 for d in diffs[aa]) / (len(seeds) - 1))
    delta = max(results["min_effect"], 2 * aa_sd)
    assert results["delta"] == pytest.approx(delta, rel=1e-12, abs=1e-15)
    stats = {a: _t_interval(d) for a, d in diffs.items()}
    tested = [a for a, r in results["arms"].items() if r["role"] == "arm"]
    p_holm = _holm({a: stats[a][2] for a in tested})
    for arm, (lo, hi, _p) in stats.items():
        mean = math.fsum(diffs[arm]) / len(seeds)
        padj = p_holm.get(arm)
        significant = padj is None or padj < results["alpha"]  # the A/A arm is outside the Holm family
        if hi < 0 and abs(mean) >= delta and significant:
            expected = "better"
        elif lo > 0 and abs(mean) >= delta and significant:
            expected = "worse"
        elif -delta < lo and hi < delta:
            expected = "tie"
        else:
            expected = "undecided"
        published = results["arms"][arm]
        assert published["verdict"] == expected, (arm, published["reason"], (lo, hi, padj, delta))
        assert published["t_interval"] == pytest.approx([lo, hi], rel=1e-9, abs=1e-12)
        if padj is not None:
            assert published["p_holm"] == pytest.approx(padj, rel=1e-6)


def test_the_publication_names_its_command_commit_and_machine() -> None:
    text = (PUBLISHED / "README.md").read_text(encoding="utf-8")
    for needle in (f"dormouse ab {NAME}", "commit", "torch", "cores", "wall"):
        assert needle in text, f"docs/results/{NAME}/README.md does not say {needle!r}"
    report = (PUBLISHED / "report.md").read_text(encoding="utf-8")
    for line in report.splitlines():
        if line.startswith("![") and "](" in line:
            assert (PUBLISHED / line.split("](", 1)[1].rstrip(")")).is_file(), line
