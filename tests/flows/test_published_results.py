"""The published comparisons (docs/results/residual_cpu/, issue 14; docs/results/residual_cpu2/, issue 25) are
the registered ones, and their verdicts follow the registered rules.

For residual_cpu (protocol 1), these read two committed files and nothing else: the registration
``conf/ab/residual_cpu.yaml`` and the outcome ``docs/results/residual_cpu/results.json`` that
``dormouse ab residual_cpu`` wrote. They fail when
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

from dormouse.ab.registration import registration_hash
from dormouse.ab.registry import load_spec

REPO = Path(__file__).resolve().parents[2]
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
    named = _named_at_or_above_the_ceiling(PUBLISHED)
    assert named == over, f"models at or above {BPB_CEILING} bpb: {over}; named in the README: {named}"


def _named_at_or_above_the_ceiling(published: Path) -> dict[tuple[str, int], float]:
    """(arm, seed) -> bpb of each model listed under the results README's ceiling heading."""
    text = (published / "README.md").read_text(encoding="utf-8")
    section = text.split(CEILING_HEADING, 1)[1].split("\n## ", 1)[0] if CEILING_HEADING in text else ""
    return {(m.group(1), int(m.group(2))): float(m.group(3)) for m in _CEILING_LINE.finditer(section)}


def _assert_report_plots_exist(published: Path) -> None:
    for line in (published / "report.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("![") and "](" in line:
            assert (published / line.split("](", 1)[1].rstrip(")")).is_file(), line


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
    _assert_report_plots_exist(PUBLISHED)


# --- residual_cpu2: protocol 2, a tune stage, looks (issue 25) -------------------------------------------------
# The verdicts are replayed look by look from the per-run final bpb with the rule written out from
# docs/ab-protocol.md (O'Brien-Fleming-type spending, Bonferroni over the registered family, TOST for a tie)
# and scipy's normal and Student-t distributions, without calling dormouse.ab.sequential. The tune stage's
# choice is recomputed from the carried tune runs' metrics, and every confirmatory run's carried config is
# checked to have trained at its arm's choice.
NAME2 = "residual_cpu2"
PUBLISHED2 = REPO / "docs" / "results" / NAME2
CARRIED2 = PUBLISHED2 / "carry"  # each finished pair's config, provenance, log and metrics, as it ran


@pytest.fixture(scope="module")
def results2() -> dict[str, Any]:
    return json.loads((PUBLISHED2 / "results.json").read_text(encoding="utf-8"))


def _final_bpb_from_metrics(run: str) -> float:
    rows = [json.loads(line) for line in (CARRIED2 / run / "metrics.jsonl").read_text().splitlines() if line]
    return float([r for r in rows if r.get("bpb") is not None][-1]["bpb"])


def _config_lr(run: str) -> float:
    text = (CARRIED2 / run / "config.yaml").read_text(encoding="utf-8")
    train = text.split("\ntrain:\n", 1)[1]
    return float(re.search(r"^  lr: (\S+)$", train, re.MULTILINE).group(1))


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
    spec = reg.spec
    assert results2["protocol"] == 2 and results2["name"] == spec.name
    assert results2["baseline"] == spec.baseline and results2["aa_arm"] == spec.aa_arm
    assert (results2["sesoi"], results2["alpha"], results2["looks"]) == (spec.sesoi, spec.alpha, list(spec.looks))
    assert results2["family"] == [a for a in spec.arms if a not in (spec.baseline, spec.aa_arm)]
    assert results2["n_arms"] == len(results2["family"])
    assert results2["fixed"] == list(spec.fixed)
    assert {a: r["overrides"] for a, r in results2["arms"].items()} == {a: list(o) for a, o in spec.arms.items()}


def _replicate_seeds(spec: Any, k: int, arm: str) -> tuple[int, int]:
    """Replicate k (1-based): (train.seed, train.data_seed), from docs/ab-protocol.md."""
    data = spec.aa_data_seed_base if arm == spec.aa_arm else spec.data_seed_base
    return spec.init_seed_base + k - 1, data + k - 1


def test_v2_every_arm_ran_the_replicates_its_looks_needed_and_passed_its_counter_check(
        results2: dict[str, Any]) -> None:
    spec = load_spec(NAME2).spec
    assert results2["complete"] is True and results2["next_look"] is None
    taken = results2["looks_taken"]
    n_last = taken[-1]["n"]
    need = {spec.baseline: n_last, spec.aa_arm: n_last}
    for arm in results2["family"]:
        need[arm] = results2["arms"][arm]["decision"]["n"]
    ran: dict[str, list[int]] = {}
    for run in results2["runs"]:
        assert run["complete"] and run["final"]["step"] == run["steps"], run["run_dir"]
        ran.setdefault(run["arm"], []).append(run["replicate"])
        assert run["seed"] == _replicate_seeds(spec, run["replicate"], run["arm"])[0]
    assert {a: sorted(r) for a, r in ran.items()} == {a: list(range(1, n + 1)) for a, n in need.items()}
    for arm, r in results2["arms"].items():
        assert r["counter_check"] == "pass", (arm, r["findings"])
    for run in results2["runs"]:  # the carried copy is the run the report read
        name = Path(run["run_dir"]).name
        assert _final_bpb_from_metrics(name) == pytest.approx(run["final"]["bpb"], rel=0, abs=1e-12), name
        cfg = (CARRIED2 / name / "config.yaml").read_text(encoding="utf-8")
        seed, data_seed = _replicate_seeds(spec, run["replicate"], run["arm"])
        assert f"\n  seed: {seed}\n" in cfg and f"\n  data_seed: {data_seed}\n" in cfg, name


def test_v2_each_arm_trained_at_the_learning_rate_its_tune_runs_chose(results2: dict[str, Any]) -> None:
    """The rule, from docs/ab-protocol.md: the lr with the lowest mean final bpb over the tune replicates, a
    diverged run as +inf, ties to the smaller lr; the A/A arm takes the baseline's choice."""
    spec = load_spec(NAME2).spec
    tune = results2["tune"]
    assert tune["lrs"] == [float(x) for x in spec.tune.lrs] and tune["rule"] == spec.tune.rule
    chosen = {}
    for arm in [a for a in spec.arms if a != spec.aa_arm]:
        means = {}
        for lr in spec.tune.lrs:
            finals = []
            for j in range(spec.tune.replicates):
                run = f"tune-{arm}-lr{lr:g}-s{spec.tune.init_seed_base + j}"
                bpb = _final_bpb_from_metrics(run)
                finals.append(bpb if math.isfinite(bpb) else math.inf)
                assert tune["table"][arm][repr(float(lr))][j] == pytest.approx(bpb, rel=0, abs=1e-12), run
                assert _config_lr(run) == pytest.approx(lr, rel=1e-12), run
            means[float(lr)] = math.fsum(finals) / len(finals)
        chosen[arm] = min(sorted(means), key=lambda lr: means[lr])  # min keeps the first (smaller) on a tie
    chosen[spec.aa_arm] = chosen[spec.baseline]
    assert {a: float(v) for a, v in tune["chosen"].items()} == {a: chosen[a] for a in tune["chosen"]}
    for run in results2["runs"]:
        name = Path(run["run_dir"]).name
        assert _config_lr(name) == pytest.approx(chosen[run["arm"]], rel=1e-12), name


def _obf_spent(t: float, a: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending: alpha*(t; a) = 2 (1 - Phi(z_{1-a/2} / sqrt t)); alpha*(0) = 0."""
    return 2.0 * sps.norm.sf(sps.norm.isf(a / 2.0) / math.sqrt(t)) if t > 0 else 0.0


def test_v2_published_verdicts_follow_the_registered_group_sequential_rule(results2: dict[str, Any]) -> None:
    """Replay every look: the undecided arms' paired differences so far, this look's critical t for
    better/worse (two-sided, alpha/(2 n_arms) per direction) and for each TOST test (alpha), decided arms
    stopping; the verdicts and the looks that decided them must be the published ones."""
    final = {(r["arm"], r["replicate"]): r["final"]["bpb"] for r in results2["runs"]}
    base, alpha, sesoi = results2["baseline"], results2["alpha"], results2["sesoi"]
    looks, family = results2["looks"], results2["family"]
    n_arms = results2["n_arms"]
    verdict: dict[str, tuple[str, int]] = {}
    taken = []
    for k, n in enumerate(looks):
        todo = [a for a in family if a not in verdict or verdict[a][0] == "undecided"]
        if not todo or k >= len(results2["looks_taken"]):
            break
        t_now, t_before = n / looks[-1], looks[k - 1] / looks[-1] if k else 0.0
        sup_p = 2 * (_obf_spent(t_now, alpha / (2 * n_arms)) - _obf_spent(t_before, alpha / (2 * n_arms)))
        eq_p = _obf_spent(t_now, alpha) - _obf_spent(t_before, alpha)
        t_sup, t_eq = sps.t.isf(sup_p / 2, n - 1), sps.t.isf(eq_p, n - 1)
        for arm in todo:
            d = [final[(arm, i)] - final[(base, i)] for i in range(1, n + 1)]
            m = math.fsum(d) / n
            se = math.sqrt(math.fsum((x - m) ** 2 for x in d) / (n - 1)) / math.sqrt(n)
            if m + t_sup * se < 0:
                v = "better"
            elif m - t_sup * se > 0:
                v = "worse"
            elif -sesoi < m - t_eq * se and m + t_eq * se < sesoi:
                v = "tie"
            else:
                v = "undecided"
            verdict[arm] = (v, k + 1)
            published = results2["arms"][arm]["decision"]
            if published["look"] == k:
                assert published["interval"] == pytest.approx([m - t_sup * se, m + t_sup * se], rel=1e-9)
                assert published["eq_interval"] == pytest.approx([m - t_eq * se, m + t_eq * se], rel=1e-9)
        taken.append({"look": k + 1, "n": n, "verdicts": {a: verdict[a][0] for a in todo}})
    assert [{"look": x["look"], "n": x["n"], "verdicts": x["verdicts"]} for x in results2["looks_taken"]] == taken
    for arm in family:
        assert (results2["arms"][arm]["verdict"], results2["arms"][arm]["look"]) == verdict[arm], arm


def test_v2_every_model_at_or_above_the_bpb_ceiling_is_named_in_the_publication(results2: dict[str, Any]) -> None:
    ceiling = results2["bad_run_ceiling"]
    over = {(r["arm"], r["seed"]): round(r["final"]["bpb"], 4) for r in results2["runs"]
            if not r["final"]["bpb"] < ceiling}
    named = _named_at_or_above_the_ceiling(PUBLISHED2)
    assert named == over, f"models at or above {ceiling} bpb: {over}; named in the README: {named}"


def test_the_v2_publication_names_its_command_commit_machine_and_time() -> None:
    text = (PUBLISHED2 / "README.md").read_text(encoding="utf-8")
    for needle in (f"dormouse ab {NAME2}", "commit", "torch", "cores", "wall", "design card", "tune"):
        assert needle in text, f"docs/results/{NAME2}/README.md does not say {needle!r}"
    prov = json.loads((PUBLISHED2 / "provenance.json").read_text(encoding="utf-8"))
    assert prov["command"] == f"dormouse ab {NAME2} --jobs 2" and not prov["commit"].endswith("+dirty")
    assert prov["running_s"] <= prov["wall_s"] and prov["sittings"]
    _assert_report_plots_exist(PUBLISHED2)


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
