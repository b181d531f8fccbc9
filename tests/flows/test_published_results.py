"""The published comparisons (docs/results/residual_cpu/, docs/results/residual_cpu2/) are
the registered ones, and their verdicts follow the registered rules.

For residual_cpu (protocol 1), these read two committed files and nothing else: the registration
``conf/ab/residual_cpu.yaml`` and the outcome ``docs/results/residual_cpu/results.json`` that
``dormouse ab residual_cpu`` wrote. They fail when
either is edited without the other (another seed list, another fixed value, a hand-edited verdict), which
is what a reader must be able to rely on: the numbers in the README came from the file in conf/ab.

The verdicts are recomputed here from the per-run final bpb in ``runs`` (not from the arms' own summary
fields), with the rule written out from docs/ab-protocol.md and the Student-t distribution from scipy,
without calling ``dormouse.ab.rule.stats``: an oracle independent of the code that wrote the report.
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

from dormouse.ab.comparison.binding import registration_hash
from dormouse.ab.comparison.registry import load_spec
from tests.helpers import published_comparison as published

REPO = Path(__file__).resolve().parents[2]
NAME = "residual_cpu"
PUBLISHED = REPO / "docs" / "results" / NAME
# The sizing target: every model of the comparison below 2.6 val bpb (it has learned something).
BPB_CEILING = 2.6


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


def test_every_registered_run_finished_and_passed_its_counter_check(results: dict[str, Any]) -> None:
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
    named = published.named_at_or_above_the_ceiling(PUBLISHED / "README.md", BPB_CEILING)
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
    published.assert_report_plots_exist(PUBLISHED)


# --- residual_cpu2: protocol 2, a tune stage, looks ----------------------------------------------------------
# The verdicts are replayed look by look from the per-run final bpb with the rule written out from
# docs/ab-protocol.md (O'Brien-Fleming-type spending, Bonferroni over the registered family, TOST for a tie)
# and scipy's normal and Student-t distributions, without calling dormouse.ab.rule.sequential. The tune stage's
# choice is recomputed from the carried tune runs' metrics, and every confirmatory run's carried config is
# checked to have trained at its arm's choice.
NAME2 = "residual_cpu2"
PUBLISHED2 = REPO / "docs" / "results" / NAME2
CARRIED2 = PUBLISHED2 / "carry"  # each finished run's config, provenance, log and metrics, as it ran


@pytest.fixture(scope="module")
def results2() -> dict[str, Any]:
    return json.loads((PUBLISHED2 / "results.json").read_text(encoding="utf-8"))


def test_published_v2_results_come_from_the_registered_file(results2: dict[str, Any]) -> None:
    reg = load_spec(NAME2)
    raw = reg.text.encode("utf-8")
    stamp = results2["registration"]
    assert stamp["sha256"] == hashlib.sha256(raw).hexdigest(), "conf/ab/residual_cpu2.yaml changed after the run"
    registered = json.loads((PUBLISHED2 / "registration.json").read_text(encoding="utf-8"))
    assert registered["registered"] == raw.decode("utf-8")
    assert registered["sha256"] == stamp["sha256"] and registered["hash"] == stamp["hash"]
    assert stamp["overrides"] == [] and results2["overrides"] == [], "the published run had CLI overrides"
    assert stamp["hash"] == registration_hash(reg, [])
    published.check_results_match_spec(results2, reg.spec)


def test_v2_every_arm_ran_the_replicates_its_looks_needed_and_passed_its_counter_check(
        results2: dict[str, Any]) -> None:
    published.check_replicates(results2, load_spec(NAME2).spec, CARRIED2)


def test_v2_each_arm_trained_at_the_learning_rate_its_tune_runs_chose(results2: dict[str, Any]) -> None:
    published.check_tune_choice(results2, load_spec(NAME2).spec, CARRIED2)


def test_v2_published_verdicts_follow_the_registered_group_sequential_rule(results2: dict[str, Any]) -> None:
    published.replay_looks(results2)


def test_v2_every_model_at_or_above_the_bpb_ceiling_is_named_in_the_publication(results2: dict[str, Any]) -> None:
    over = published.over_the_ceiling(results2)
    named = published.named_at_or_above_the_ceiling(PUBLISHED2 / "README.md", results2["bad_run_ceiling"])
    assert named == over, f"models at or above {results2['bad_run_ceiling']} bpb: {over}; named in the README: {named}"


def test_the_v2_publication_names_its_command_commit_machine_and_time() -> None:
    text = (PUBLISHED2 / "README.md").read_text(encoding="utf-8")
    for needle in (f"dormouse ab {NAME2}", "commit", "torch", "cores", "wall", "design card", "tune"):
        assert needle in text, f"docs/results/{NAME2}/README.md does not say {needle!r}"
    prov = json.loads((PUBLISHED2 / "provenance.json").read_text(encoding="utf-8"))
    assert prov["command"] == f"dormouse ab {NAME2} --jobs 2" and not prov["commit"].endswith("+dirty")
    assert prov["running_s"] <= prov["wall_s"] and prov["sittings"]
    published.assert_report_plots_exist(PUBLISHED2)


_PAIRED_SDS = re.compile(r"observed paired sds were (\d\.\d+)–(\d\.\d+) \(([^)]*)\)")
_README_ARM = {"GR": "gr", "ReZero": "rezero", "Block": "attnres_block", "Full": "attnres_full", "A/A": "prenorm_aa"}


def test_the_v2_publication_states_the_paired_sds_the_runs_measured(results2: dict[str, Any]) -> None:
    """The README's "observed paired sds were LO–HI (GR s, …)" are each arm's sd of its paired differences in
    results.json, and LO–HI their range (it once said 0.009, a per-arm seed sd, for the lower end)."""
    text = " ".join((PUBLISHED2 / "README.md").read_text(encoding="utf-8").split())
    m = _PAIRED_SDS.search(text)
    assert m, "the README no longer states the observed paired sds"
    stated = {_README_ARM[name]: float(sd) for name, sd in (p.rsplit(" ", 1) for p in m.group(3).split(", "))}
    measured = {arm: results2["arms"][arm]["diff_sd"] for arm in stated}
    assert stated == {arm: pytest.approx(sd, abs=5e-5) for arm, sd in measured.items()}
    assert (float(m.group(1)), float(m.group(2))) == pytest.approx(
        (min(measured.values()), max(measured.values())), abs=5e-5)
