"""A registered contrast: two tested arms compared directly, paired by replicate, decided at every look by the
sequential rule as a family of one test with its own SESOI; its two arms run on while it is undecided, and the
arms' verdicts against the baseline stay as decided at their own look."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from dormouse.ab.comparison.registry import ABSpecError, load_spec
from dormouse.ab.comparison.runner import run_comparison
from dormouse.ab.rule.contrast import ContrastState, contrast_design, decide_look
from dormouse.ab.rule.sequential import BETTER, TIE, UNDECIDED, WORSE
from tests.helpers.fake_train import FakeTrain, PlantedRun
from tests.helpers.registrations import registration, write_registry

ARMS = ("prenorm", "gr", "attnres_full", "attnres_block", "prenorm_aa")
CONTRAST = """contrast:
  arm: gr
  against: attnres_full
  sesoi: 0.01
  pilot_sd: 0.003
  expected_effect: -0.01"""
# Replicate k (init seed k): GR and Full AttnRes both sit 0.2 below the baseline with small jitters of their own, so
# both are decided better at look 1, while their contrast (jitter against jitter, sd ~0.003) is undecided at 3
# replicates and a tie within ±0.01 at 6. Block AttnRes sits 0.2 above: worse at look 1.
GR_JITTER = [0.001, -0.002, 0.0015, -0.001, 0.002, -0.0005]
FULL_JITTER = [-0.001, 0.001, -0.002, 0.002, -0.0015, 0.0005]


def planted(run: PlantedRun) -> float:
    k = run.seed - 1
    base = 2.0 + 0.01 * k
    return {"prenorm": base, "prenorm_aa": base + 0.001 * (-1) ** k, "gr": base - 0.2 + GR_JITTER[k],
            "attnres_full": base - 0.2 + FULL_JITTER[k], "attnres_block": base + 0.2 + 0.001 * k}[run.arm]


def _spec(contrast: str = CONTRAST, **kw: str) -> str:
    return registration("c", ARMS, looks="[3, 6]", sesoi=0.02, tail=contrast + "\n", **kw)


def test_a_contrast_keeps_its_arms_running_after_their_verdicts_and_decides_them_paired(tmp_path: Path) -> None:
    train = FakeTrain(planted)
    results = run_comparison("c", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                             train_fn=train, registry=write_registry(tmp_path, "c", _spec()))
    late = sorted(name for name in train.names if name.endswith(("-s4", "-s5", "-s6")))
    assert late == sorted(f"{a}-s{k}" for a in ("gr", "attnres_full") for k in (4, 5, 6))  # only the contrast's arms
    for arm, verdict in (("gr", BETTER), ("attnres_full", BETTER), ("attnres_block", WORSE)):
        outcome = results.arms[arm].outcome
        assert (outcome.verdict, outcome.look, results.arms[arm].replicates) == (verdict, 1, [1, 2, 3])
    c = results.contrast
    assert [d["verdict"] for d in c["looks"]] == [UNDECIDED, TIE] and c["verdict"] == TIE
    assert c["diffs"] == pytest.approx([g - f for g, f in zip(GR_JITTER, FULL_JITTER)], abs=1e-12)
    report = (results.plan.comp_dir / "report.md").read_text()
    assert "## The registered contrast" in report and "gr and attnres_full differ by less than the SESOI" in report


def test_without_a_contrast_decided_arms_stop_at_their_look(tmp_path: Path) -> None:
    train = FakeTrain(planted)
    results = run_comparison("c", [], root=tmp_path / "ab", console=Console(record=True, width=200),
                             train_fn=train, registry=write_registry(tmp_path, "c", _spec(contrast="")))
    assert not any(name.endswith("-s4") for name in train.names) and results.contrast is None


@pytest.mark.parametrize("old, new, field, why", [
    ("arm: gr", "arm: prenorm", "contrast.arm", "is not a tested arm"),
    ("against: attnres_full", "against: gr", "contrast.against", "a contrast needs two arms"),
    ("sesoi: 0.01", "sesoi: 0", "contrast.sesoi", "must be a finite number > 0"),
    ("pilot_sd: 0.003", "pilot_sd: -1", "contrast.pilot_sd", "must be a finite number > 0"),
    ("expected_effect: -0.01", "expected_effect: 0", "contrast.expected_effect", "finite non-zero"),
])
def test_a_bad_contrast_is_refused_naming_the_field(tmp_path: Path, old: str, new: str, field: str,
                                                    why: str) -> None:
    with pytest.raises(ABSpecError) as exc:
        load_spec("c", write_registry(tmp_path, "c", _spec(contrast=CONTRAST.replace(old, new))))
    assert any(f"field '{field}'" in ln and why in ln for ln in exc.value.lines), exc.value.lines


def test_a_contrast_beside_spare_replicates_is_refused(tmp_path: Path) -> None:
    text = _spec(fields="bad_run_ceiling: 5.0\nbad_run_replacements: 1")
    with pytest.raises(ABSpecError) as exc:
        load_spec("c", write_registry(tmp_path, "c", text))
    assert any("field 'contrast'" in ln and "spare replicate" in ln for ln in exc.value.lines), exc.value.lines


def _simulated_contrasts(delta: float, sd: float, n_sim: int, seed: int) -> list[str]:
    """Verdicts of ``n_sim`` contrasts decided look by look through ``decide_look`` (the runner's own call) on
    normal paired differences of mean ``delta``."""
    spec = load_spec("field_cpu").spec
    rng = np.random.default_rng(seed)
    looks = contrast_design(spec).looks
    out = []
    for _ in range(n_sim):
        xs = list(delta + sd * rng.standard_normal(looks[-1]))
        state = ContrastState("a", "b")
        for i, n in enumerate(looks):
            decide_look(spec, state, i, xs[:n])
            if not state.open:
                break
        out.append(state.verdict)
    return out


N_SIM = 3000  # Monte-Carlo se of a rate near 0.05: 0.004; the bound below is the rate + 3 se


def test_the_registered_contrast_holds_its_error_rates_as_one_test_at_alpha() -> None:
    """At Δ = 0 the contrast claims better or worse at most α of the time, and a tie at |Δ| = SESOI at most α: its
    own family of one test, however many arms the comparison compares with the baseline."""
    spec = load_spec("field_cpu").spec
    sd, alpha, sesoi = float(spec.contrast.pilot_sd), float(spec.alpha), float(spec.contrast.sesoi)
    bound = alpha + 3 * np.sqrt(alpha * (1 - alpha) / N_SIM)
    null = _simulated_contrasts(0.0, sd, N_SIM, seed=1)
    assert np.mean([v in (BETTER, WORSE) for v in null]) <= bound
    at_margin = _simulated_contrasts(sesoi, sd, N_SIM, seed=2)
    assert np.mean([v == TIE for v in at_margin]) <= bound
    # and it is not the arms' family: at the expected effect it decides better most of the time
    assert np.mean([v == BETTER for v in _simulated_contrasts(float(spec.contrast.expected_effect), sd, 1000,
                                                              seed=3)]) >= 0.6
