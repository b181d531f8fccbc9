"""An independent oracle for a published protocol-2 comparison (a folder under docs/results/, or a study's
point): the registration it came from, the replicates its looks needed, the tune stage's choice, and every
look's verdict, recomputed from the carried runs' own files with the rules written out from docs/ab-protocol.md
and scipy's distributions, without calling ``dormouse.ab.rule.sequential``, ``dormouse.ab.tune.stage`` or
``dormouse.ab.rule.stats``.

Used by tests/flows/test_published_results.py (residual_cpu2) and tests/flows/test_published_study.py (each
point of a published study). ``results`` is the comparison's ``results.json``; ``carried`` the folder that holds
each finished run's config, metrics and provenance (``<publication>/carry[/<point>]``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

_CEILING_LINE = re.compile(r"^- `(\w+)` seed (\d+): ([\d.]+)", re.MULTILINE)


def final_bpb_from_metrics(run_dir: Path) -> float:
    """The last eval row's bpb of a carried run (its metrics.jsonl, as the run wrote it)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    return float([r for r in rows if r.get("bpb") is not None][-1]["bpb"])


def config_lr(run_dir: Path) -> float:
    """train.lr of a carried run's config.yaml (the config the run trained with)."""
    text = (run_dir / "config.yaml").read_text(encoding="utf-8")
    train = text.split("\ntrain:\n", 1)[1]
    return float(re.search(r"^  lr: (\S+)$", train, re.MULTILINE).group(1))


def replicate_seeds(spec: Any, k: int, arm: str) -> tuple[int, int]:
    """Replicate k (1-based): (train.seed, train.data_seed), from docs/ab-protocol.md."""
    data = spec.aa_data_seed_base if arm == spec.aa_arm else spec.data_seed_base
    return spec.init_seed_base + k - 1, data + k - 1


def check_results_match_spec(results: dict[str, Any], spec: Any) -> None:
    """results.json states the registered design: name, baseline, SESOI, α, looks, family, fixed, arms."""
    assert results["protocol"] == 2 and results["name"] == spec.name
    assert results["baseline"] == spec.baseline and results["aa_arm"] == spec.aa_arm
    assert (results["sesoi"], results["alpha"], results["looks"]) == (spec.sesoi, spec.alpha, list(spec.looks))
    assert results["family"] == [a for a in spec.arms if a not in (spec.baseline, spec.aa_arm)]
    assert results["n_arms"] == len(results["family"])
    assert results["fixed"] == list(spec.fixed)
    assert {a: r["overrides"] for a, r in results["arms"].items()} == {a: list(o) for a, o in spec.arms.items()}


def check_replicates(results: dict[str, Any], spec: Any, carried: Path) -> None:
    """Each arm ran exactly the replicates its looks needed, at the registered seeds, complete, its counter check
    passing; the carried copy of each run is the run the report read (same final bpb, same seeds)."""
    assert results["complete"] is True and results["next_look"] is None
    n_last = results["looks_taken"][-1]["n"]
    need = {spec.baseline: n_last, spec.aa_arm: n_last}
    for arm in results["family"]:
        need[arm] = results["arms"][arm]["decision"]["n"]
    ran: dict[str, list[int]] = {}
    for run in results["runs"]:
        assert run["complete"] and run["final"]["step"] == run["steps"], run["run_dir"]
        ran.setdefault(run["arm"], []).append(run["replicate"])
        assert run["seed"] == replicate_seeds(spec, run["replicate"], run["arm"])[0]
    assert {a: sorted(r) for a, r in ran.items()} == {a: list(range(1, n + 1)) for a, n in need.items()}
    for arm, r in results["arms"].items():
        assert r["counter_check"] == "pass", (arm, r["findings"])
    for run in results["runs"]:
        name = Path(run["run_dir"]).name
        assert final_bpb_from_metrics(carried / name) == pytest.approx(run["final"]["bpb"], rel=0, abs=1e-12), name
        cfg = (carried / name / "config.yaml").read_text(encoding="utf-8")
        seed, data_seed = replicate_seeds(spec, run["replicate"], run["arm"])
        assert f"\n  seed: {seed}\n" in cfg and f"\n  data_seed: {data_seed}\n" in cfg, name


def _tune_mean(spec: Any, carried: Path, arm: str, lr: float, table: dict[str, Any]) -> float:
    finals = []
    for j in range(spec.tune.replicates):
        run = carried / f"tune-{arm}-lr{lr:g}-s{spec.tune.init_seed_base + j}"
        bpb = final_bpb_from_metrics(run)
        finals.append(bpb if math.isfinite(bpb) else math.inf)
        published = next(v for k, v in table[arm].items() if math.isclose(float(k), lr, rel_tol=1e-9))
        assert published[j] == pytest.approx(bpb, rel=0, abs=1e-12), run.name
        assert config_lr(run) == pytest.approx(lr, rel=1e-12), run.name
    return math.fsum(finals) / len(finals)


def check_tune_choice(results: dict[str, Any], spec: Any, carried: Path) -> dict[str, float]:
    """The tune stage, recomputed: the lr with the lowest mean final bpb over the tune replicates (a diverged run
    as +inf, ties to the smaller lr); with registered ``extensions``, while the best lr is the highest (lowest)
    one the arm ran, the grid point beyond it (× / ÷ the grid ratio) runs, at most ``extensions`` per arm, a
    diverged one stopping that side; the A/A arm takes the baseline's choice. The carried tune runs must be
    exactly the ones this rule runs, and every confirmatory run must have trained at its arm's choice."""
    tune = results["tune"]
    assert tune["lrs"] == [float(x) for x in spec.tune.lrs] and tune["rule"] == spec.tune.rule
    assert tune.get("second_seed_gap") is None, "this oracle has no second-seed rule; extend it first"
    grid = sorted(float(x) for x in spec.tune.lrs)
    ratio = grid[1] / grid[0]
    extensions = int(getattr(spec.tune, "extensions", 0) or 0)
    chosen: dict[str, float] = {}
    expected_runs: set[str] = set()
    for arm in [a for a in spec.arms if a != spec.aa_arm]:
        means = {lr: _tune_mean(spec, carried, arm, lr, tune["table"]) for lr in grid}
        stopped: set[str] = set()
        for _ in range(extensions):
            best = min(sorted(means), key=lambda lr: means[lr])
            if best == max(means) and "high" not in stopped:
                new, side = max(means) * ratio, "high"
            elif best == min(means) and "low" not in stopped:
                new, side = min(means) / ratio, "low"
            else:
                break
            means[new] = _tune_mean(spec, carried, arm, new, tune["table"])
            if not math.isfinite(means[new]):
                stopped.add(side)
        chosen[arm] = min(sorted(means), key=lambda lr: means[lr])  # min keeps the first (smaller) on a tie
        expected_runs |= {f"tune-{arm}-lr{lr:g}-s{spec.tune.init_seed_base + j}"
                          for lr in means for j in range(spec.tune.replicates)}
    chosen[spec.aa_arm] = chosen[spec.baseline]
    assert {p.name for p in carried.glob("tune-*")} == expected_runs, "tune runs other than the rule's"
    assert {a: float(v) for a, v in tune["chosen"].items()} == {a: pytest.approx(chosen[a], rel=1e-12)
                                                               for a in tune["chosen"]}
    for run in results["runs"]:
        name = Path(run["run_dir"]).name
        assert config_lr(carried / name) == pytest.approx(chosen[run["arm"]], rel=1e-12), name
    return chosen


def _obf_spent(t: float, a: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending: alpha*(t; a) = 2 (1 - Phi(z_{1-a/2} / sqrt t)); alpha*(0) = 0."""
    return 2.0 * sps.norm.sf(sps.norm.isf(a / 2.0) / math.sqrt(t)) if t > 0 else 0.0


def paired_diffs(results: dict[str, Any], arm: str, n: int) -> list[float]:
    """The arm's first n paired differences bpb(arm) − bpb(baseline), by replicate, from the runs' final bpb."""
    final = {(r["arm"], r["replicate"]): r["final"]["bpb"] for r in results["runs"]}
    return [final[(arm, i)] - final[(results["baseline"], i)] for i in range(1, n + 1)]


def mean_sd(xs: list[float]) -> tuple[float, float]:
    """Mean and sd (ddof 1)."""
    m = math.fsum(xs) / len(xs)
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def four_way(m: float, se: float, t_sup: float, t_eq: float, margin: float,
             words: tuple[str, str, str, str] = ("better", "worse", "tie", "undecided")) -> str:
    """The registered ladder (docs/ab-protocol.md): below 0 (m + t_sup se < 0), above 0, inside ±margin by both
    TOST tests (−margin < m − t_eq se and m + t_eq se < margin), else undecided; the first that holds."""
    if m + t_sup * se < 0:
        return words[0]
    if m - t_sup * se > 0:
        return words[1]
    if -margin < m - t_eq * se and m + t_eq * se < margin:
        return words[2]
    return words[3]


def replay_looks(results: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Replay every look: the undecided arms' paired differences so far, this look's critical t for
    better/worse (two-sided, alpha/(2 n_arms) per direction) and for each TOST test (alpha), decided arms
    stopping; asserts the published verdicts, intervals and looks, and returns arm -> (verdict, deciding look,
    1-based)."""
    assert results.get("alpha_holdback") in (None, 1.0), "this oracle has no hold-back; extend it first"
    alpha, sesoi = results["alpha"], results["sesoi"]
    looks, family, n_arms = results["looks"], results["family"], results["n_arms"]
    verdict: dict[str, tuple[str, int]] = {}
    taken = []
    for k, n in enumerate(looks):
        todo = [a for a in family if a not in verdict or verdict[a][0] == "undecided"]
        if not todo or k >= len(results["looks_taken"]):
            break
        t_now, t_before = n / looks[-1], looks[k - 1] / looks[-1] if k else 0.0
        sup_p = 2 * (_obf_spent(t_now, alpha / (2 * n_arms)) - _obf_spent(t_before, alpha / (2 * n_arms)))
        eq_p = _obf_spent(t_now, alpha) - _obf_spent(t_before, alpha)
        t_sup, t_eq = sps.t.isf(sup_p / 2, n - 1), sps.t.isf(eq_p, n - 1)
        for arm in todo:
            m, sd = mean_sd(paired_diffs(results, arm, n))
            se = sd / math.sqrt(n)
            v = four_way(m, se, t_sup, t_eq, sesoi)
            verdict[arm] = (v, k + 1)
            published = results["arms"][arm]["decision"]
            if published["look"] == k:
                assert published["interval"] == pytest.approx([m - t_sup * se, m + t_sup * se], rel=1e-9)
                assert published["eq_interval"] == pytest.approx([m - t_eq * se, m + t_eq * se], rel=1e-9)
        taken.append({"look": k + 1, "n": n, "verdicts": {a: verdict[a][0] for a in todo}})
    assert [{"look": x["look"], "n": x["n"], "verdicts": x["verdicts"]} for x in results["looks_taken"]] == taken
    for arm in family:
        assert (results["arms"][arm]["verdict"], results["arms"][arm]["look"]) == verdict[arm], arm
    return verdict


def readme_section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next ``## `` heading ("" when the heading is not there)."""
    return text.split(heading, 1)[1].split("\n## ", 1)[0] if heading in text else ""


def named_at_or_above_the_ceiling(readme: Path, ceiling: float) -> dict[tuple[str, int], float]:
    """(arm, seed) -> bpb of each model listed under the README's "Models at or above the C bpb ceiling"."""
    section = readme_section(readme.read_text(encoding="utf-8"), f"## Models at or above the {ceiling:g} bpb ceiling")
    return {(m.group(1), int(m.group(2))): float(m.group(3)) for m in _CEILING_LINE.finditer(section)}


def over_the_ceiling(results: dict[str, Any]) -> dict[tuple[str, int], float]:
    ceiling = results["bad_run_ceiling"]
    return {(r["arm"], r["seed"]): round(r["final"]["bpb"], 4) for r in results["runs"]
            if not r["final"]["bpb"] < ceiling}


def assert_report_plots_exist(published: Path) -> None:
    for line in (published / "report.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("![") and "](" in line:
            assert (published / line.split("](", 1)[1].rstrip(")")).is_file(), line
