"""`dormouse ab`: registration (protocol 2), the runner end to end look by look (with a fake train function
writing planted run directories), resumption, refusal of a changed registration or of other code, and the
report."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from dormouse.ab.comparison.binding import STAMP_NAME
from dormouse.ab.comparison.command import ab_design, ab_run
from dormouse.ab.comparison.registry import ABSpecError, ComparisonError, list_comparisons, load_spec
from dormouse.ab.comparison.runner import plan_runs, run_comparison
from dormouse.ab.runs.job import run_state
from dormouse.arms.registry import ARMS
from dormouse.config.schema import arm_name
from tests.helpers.ab_exit import exit_code
from tests.helpers.fake_train import FakeTrain, comparison_bpb
from tests.helpers.registrations import registration, write_registry


def spec(**kw: Any) -> str:
    """The test comparison's registration, with ``kw`` for the template's parameters."""
    return registration("t", ("rezero", "gr", "attnres_full", "attnres_block", "rezero_aa"),
                        description="a test comparison", fields="bad_run_ceiling: 2.15", **kw)


SPEC = spec()
SEQUENTIAL = spec(looks="[2, 4]")  # two looks: 2 replicates, then 4


@pytest.fixture()
def registry(tmp_path: Path) -> Path:
    return write_registry(tmp_path, "t", SPEC)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, FakeTrain]:
    """(registry, comparison directory, the fake that ran it): the comparison run once to its end; the tests
    that take it read it and change nothing in it (module-scoped)."""
    root = tmp_path_factory.mktemp("t")
    registry = write_registry(root, "t", SPEC)
    fake = FakeTrain()
    return registry, run(registry, root / "ab", fake), fake


def run(registry: Path, root: Path, fake: FakeTrain, overrides: list[str] | None = None, **kw: Any) -> Path:
    return run_comparison("t", overrides or [], root=root, console=Console(record=True, width=200),
                          train_fn=fake, registry=registry, **kw).plan.comp_dir


# --- the registered files -------------------------------------------------------------------------------

@pytest.mark.parametrize("name, base", [("residual", "rezero"), ("smoke", "prenorm")])
def test_shipped_comparisons_load_and_compose(name: str, base: str) -> None:
    assert {"residual", "residual_cpu", "smoke"} <= set(list_comparisons())
    reg = load_spec(name)
    assert reg.protocol == 2 and reg.spec.baseline == base and reg.spec.aa_arm == f"{base}_aa"
    assert set(reg.spec.arms) == {base, "gr", "attnres_full", "attnres_block", f"{base}_aa"}
    assert len(reg.spec.looks) >= 2 and reg.spec.sesoi > 0
    runs = plan_runs(reg, [], Path("/tmp/never-written"))  # every run composes and validates
    kinds = {p.arm: arm_name(p.cfg) for p in runs}
    assert kinds == {base: base, "gr": "gr", "attnres_full": "attnres", "attnres_block": "attnres",
                     f"{base}_aa": base}
    block = next(p for p in runs if p.arm == "attnres_block")
    assert block.cfg.model.attnres.block_size == 2
    assert len(runs) == 5 * reg.spec.looks[-1]
    assert load_spec("residual").spec.fixed[0] == "preset=9m"
    assert "preset=tiny" in load_spec("smoke").spec.fixed
    assert load_spec("residual_cpu").protocol == 1  # the published result's registration: read only


def test_the_smoke_comparison_measures_every_arm_against_the_plain_prenorm_residual() -> None:
    """The first comparison a newcomer runs has the baseline the README names for every comparison: pre-norm."""
    spec = load_spec("smoke").spec
    assert spec.baseline == "prenorm" and spec.arms["prenorm"] == ["model.use_prenorm=true"]
    runs = plan_runs(load_spec("smoke"), [], Path("/tmp/never-written"))
    assert {arm_name(p.cfg) for p in runs if p.arm in (spec.baseline, spec.aa_arm)} == {"prenorm"}


def test_each_replicate_has_its_own_seed_streams_and_the_aa_arm_its_own_data(
        tmp_path: Path, registry: Path) -> None:
    """Replicate k trains every arm with train.seed = init base + k and train.data_seed = data base + k; the
    A/A arm, the baseline again, with the A/A data base + k. Extending the looks extends the streams and
    renumbers nothing."""
    runs = plan_runs(load_spec("t", registry), [], tmp_path / "t")
    seeds = {(p.arm, p.replicate): (int(p.cfg.train.seed), int(p.cfg.train.data_seed)) for p in runs}
    for k in (1, 2, 3):
        assert {seeds[(a, k)] for a in ("rezero", "gr", "attnres_full", "attnres_block")} == {(k, 100 + k)}
        assert seeds[("rezero_aa", k)] == (k, 200 + k)
    (registry / "t.yaml").write_text(spec(looks="[2, 4, 6]"))
    longer = {(p.arm, p.replicate): (int(p.cfg.train.seed), int(p.cfg.train.data_seed))
              for p in plan_runs(load_spec("t", registry), [], tmp_path / "t")}
    assert all(longer[key] == value for key, value in seeds.items()) and len(longer) == 30


def test_a_protocol_1_registration_is_read_but_never_run(tmp_path: Path, registry: Path) -> None:
    err = Console(record=True, width=200)
    assert exit_code(ab_run, "residual_cpu", [], root=tmp_path / "ab", console=Console(record=True),
                     err=err, train_fn=FakeTrain()) == 2
    assert "protocol-1 registration" in err.export_text() and not (tmp_path / "ab").exists()


# A field the template does not take is edited on the line it writes (an edit that missed would be accepted).
@pytest.mark.parametrize(("text", "field"), [
    (SPEC.replace("sesoi: 0.01", "sesoi: lots"), "sesoi"),
    (spec(sesoi=0), "sesoi"),
    (spec(looks="[3, 2]"), "looks"),
    (spec(looks="[1, 3]"), "looks"),
    (SPEC.replace("alpha: 0.05", "alpha: 0.7"), "alpha"),
    (SPEC.replace("baseline: rezero", "baseline: nope"), "baseline"),
    (spec(aa_arm="gr"), "arms.gr"),  # the A/A arm is the baseline again
    (SPEC.replace("aa_data_seed_base: 201", "aa_data_seed_base: 102"), "aa_data_seed_base"),  # shares data
    (SPEC.replace("aa_data_seed_base: 201\n", ""), "aa_data_seed_base"),
    (SPEC + "colour: blue\n", "colour"),
    (SPEC.replace("pilot_sd: 0.01\n", ""), "pilot_sd"),
    (spec(overrides={"rezero_aa": "[train.data_seed=5]"}), "arms.rezero_aa"),
    (spec(overrides={"gr": "[model.use_gr=true, train.seed=5]"}), "arms.gr"),
    (SPEC.replace("name: t", "name: other"), "name"),
    (SPEC.replace("protocol: 2", "protocol: 3"), "protocol"),
])
def test_bad_registered_file_is_refused_before_any_run_naming_the_field(
        tmp_path: Path, registry: Path, text: str, field: str) -> None:
    (registry / "t.yaml").write_text(text)
    fake = FakeTrain()
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", fake)
    assert any(field in line for line in info.value.lines), info.value.lines
    assert fake.calls == [] and not (tmp_path / "ab").exists()


def test_bad_override_value_is_refused_naming_the_arm(tmp_path: Path, registry: Path) -> None:
    zero_block = "[model.use_attnres=true, model.attnres.block_size=0]"
    (registry / "t.yaml").write_text(spec(overrides={"attnres_block": zero_block}))
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", FakeTrain())
    assert any("attnres_block" in line and "block_size" in line for line in info.value.lines)


def test_what_this_machine_cannot_run_is_refused_before_any_run(tmp_path: Path, registry: Path) -> None:
    """A kernel the arm cannot run here (the fused read on a CPU) is refused for the arm, before any run, as
    `dormouse train` refuses it before step 0: the plan asks the machine, composing the config does not."""
    (registry / "t.yaml").write_text(spec(overrides={"gr": "[model.use_gr=true, model.kernel=triton]"}))
    fake = FakeTrain()
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", fake)
    assert any("arm 'gr'" in line and "model.kernel=triton" in line for line in info.value.lines), info.value.lines
    assert fake.calls == [] and not (tmp_path / "ab").exists()


def test_cli_overrides_may_not_set_arm_or_runner_keys(tmp_path: Path, registry: Path) -> None:
    for bad in (["model.use_gr=true"], ["train.seed=3"], ["run.dir=/x"]):
        with pytest.raises(ComparisonError):
            run(registry, tmp_path / "ab", FakeTrain(), bad)
    with pytest.raises(ABSpecError):
        run_comparison("no_such_comparison", [], registry=registry, train_fn=FakeTrain())


# --- the runner end to end ------------------------------------------------------------------------------

def test_end_to_end_report_results_and_plots_agree(finished: tuple[Path, Path, FakeTrain]) -> None:
    registry, out, fake = finished
    assert out == (registry.parent / "ab" / "t").resolve()
    assert len(fake.calls) == 15 and all(r == "never" for _, r in fake.calls)
    assert [c[0] for c in fake.calls[:5]] == ["rezero-s1", "gr-s1", "attnres_full-s1", "attnres_block-s1",
                                             "rezero_aa-s1"]  # replicate-major
    for f in ("results.json", "report.md", "bpb_vs_tokens.png", "bpb_by_depth.png", "forest.png", STAMP_NAME,
              "design.json"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    assert (out / "bpb_vs_tokens.png").read_bytes()[:4] == b"\x89PNG"

    results = json.loads((out / "results.json").read_text())
    arms = results["arms"]
    assert results["complete"] is True and results["protocol"] == 2
    verdicts = {a: arms[a]["verdict"] for a in arms}
    assert verdicts == {"rezero": "baseline", "gr": "better", "attnres_full": "tie", "attnres_block": "worse",
                        "rezero_aa": "aa"}
    assert arms["attnres_full"]["kept"] == "rezero"  # tie: the simpler arm is kept
    assert arms["gr"]["kept"] == "gr" and arms["attnres_block"]["kept"] == "rezero"
    assert results["n_arms"] == 3 and results["family"] == ["gr", "attnres_full", "attnres_block"]

    # The numbers are the planted ones, and each decision carries what a reader needs to redo it by hand.
    diffs = [comparison_bpb("gr", s) - comparison_bpb("rezero", s) for s in (1, 2, 3)]
    assert arms["gr"]["diffs"] == pytest.approx(diffs)
    d = arms["gr"]["decision"]
    assert d["mean"] == pytest.approx(sum(diffs) / 3) and d["n"] == 3 and d["look"] == 0 and arms["gr"]["look"] == 1
    half = d["boundary"]["sup_t"] * d["se"]
    assert d["interval"] == pytest.approx([d["mean"] - half, d["mean"] + half])
    assert d["interval"][1] < 0 and d["n_arms"] == 3
    assert arms["gr"]["params_ratio"] == pytest.approx((10_000 + 200) / (10_000 + 600))
    assert arms["gr"]["tok_s_ratio"] == pytest.approx((5000 - 200) / (5000 - 600))
    assert arms["gr"]["peak_mem_ratio"] is None  # CPU RSS: not comparable in-process
    assert all(a["counter_check"] == "pass" for a in arms.values())
    assert set(arms["gr"]["bpb_by_depth"]) == {"bpb@1", "bpb@2"}
    assert arms["gr"]["bpb_by_depth"]["bpb@2"]["diff_mean"] == pytest.approx(sum(diffs) / 3)
    assert results["aa_calibration"]["agrees"] in (True, False)
    assert results["design_card"]["card"]["design"]["looks"] == [3]
    assert results["code"]["commits"] and len(results["code"]["fingerprints"]) == 1

    # report.md states the same verdicts and numbers, each sentence as the rule wrote it.
    report = (out / "report.md").read_text()
    for name, a in arms.items():
        line = next(ln for ln in report.splitlines() if ln.startswith(f"| `{name}`"))
        assert f"**{a['verdict']}**" in line
        assert f"{a['bpb_mean']:.4f}" in line
        if a["role"] == "arm":
            assert f"{a['diff_mean']:+.4f}" in line and f"{a['decision']['interval'][0]:+.4f}" in line
            assert a["sentence"] in report
    assert f"the simpler arm is kept (the registry's order: {', then '.join(ARMS)})" in report
    assert "bpb_vs_tokens.png" in report and "bpb_by_depth.png" in report
    assert "## Design card" in report and "A/A calibration check" in report
    assert results["code"]["commits"][0][:12] in report


def test_the_driver_says_what_the_previous_look_decided_before_the_next_look_starts(tmp_path: Path,
                                                                                   registry: Path) -> None:
    """One line per look taken, before the next look's runs: each arm's verdict, the numbers, stop or continue."""
    (registry / "t.yaml").write_text(SEQUENTIAL)
    console = Console(record=True, width=200)
    run_comparison("t", [], root=tmp_path / "ab", console=console, train_fn=FakeTrain(exact=("gr",)),
                   registry=registry)
    lines = console.export_text().splitlines()
    (said,) = [i for i, ln in enumerate(lines) if ln.startswith("ab t: look 1 of 2 (2 replicates per arm) decided: ")]
    assert lines[said + 1].startswith("ab t: look 2 of 2 (4 replicates per arm"), lines[said:said + 2]
    assert "gr better (Δ -" in lines[said] and ": stops" in lines[said], lines[said]
    assert "attnres_full undecided (Δ " in lines[said] and ": continues" in lines[said], lines[said]


def test_sequential_looks_stop_decided_arms_and_resume_continues_the_schedule(tmp_path: Path,
                                                                            registry: Path) -> None:
    """Looks at 2 and 4 replicates: gr's planted effect has no jitter, so look 1 decides it and it runs no
    more; the others (and the baseline and the A/A arm) run on to look 2. Interrupted during look 2, a rerun
    continues there and decides what the first invocation would have."""
    (registry / "t.yaml").write_text(SEQUENTIAL)
    fake = FakeTrain(exact=("gr",))
    out = run(registry, tmp_path / "ab", fake)
    names = [c[0] for c in fake.calls]
    assert len(names) == 10 + 8 and "gr-s3" not in names and "gr-s4" not in names
    assert set(names[10:]) == {f"{a}-s{k}" for a in ("rezero", "attnres_full", "attnres_block", "rezero_aa")
                               for k in (3, 4)}
    results = json.loads((out / "results.json").read_text())
    gr = results["arms"]["gr"]
    assert gr["verdict"] == "better" and gr["look"] == 1 and gr["replicates"] == [1, 2]
    assert results["arms"]["attnres_block"]["look"] == 2 and len(results["arms"]["rezero"]["replicates"]) == 4
    assert [lk["look"] for lk in results["looks_taken"]] == [1, 2]

    again = tmp_path / "again"
    first = FakeTrain(exact=("gr",), stop_at={"attnres_full-s4": 10})
    run(registry, again, first)
    assert json.loads(((again / "t") / "results.json").read_text())["complete"] is False
    second = FakeTrain(exact=("gr",))
    resumed = run(registry, again, second)
    assert second.calls == [("attnres_full-s4", "auto")]
    redo = json.loads((resumed / "results.json").read_text())
    assert {a: r["verdict"] for a, r in redo["arms"].items()} == {a: r["verdict"] for a, r in results["arms"].items()}


def test_status_shows_the_looks_and_design_prints_and_saves_the_card(tmp_path: Path, registry: Path) -> None:
    from dormouse.ab.comparison.questions import status_command

    (registry / "t.yaml").write_text(SEQUENTIAL)
    console = Console(record=True, width=250)
    assert ab_design("t", [], root=tmp_path / "ab", console=console, registry=registry) == 0
    card = json.loads((tmp_path / "ab" / "t" / "design.json").read_text())
    assert card["card"]["design"] == {"alpha": 0.05, "sesoi": 0.01, "looks": [2, 4], "n_arms": 3, "alpha_holdback": 1.0,
                                     "multiplicity": "bonferroni"}
    assert card["text"].splitlines()[0] in console.export_text()
    run(registry, tmp_path / "ab", FakeTrain(exact=("gr",)))
    console = Console(record=True, width=250)
    assert status_command("t", root=tmp_path / "ab", registry=registry, console=console) == 0
    text = console.export_text()
    assert "looks (2, 4 replicates per arm)" in text and "every look this comparison needs is taken" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("│ 1 ") or ln.startswith("│ 2 ")]
    assert any("gr" in r and "better" in r for r in rows) and any("attnres_full" in r for r in rows[3:])


def test_runs_computed_by_other_code_are_refused_until_restart(tmp_path: Path, registry: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run records the fingerprint of the code it ran on; a later invocation on other code adds no
    run, says what differs and how to proceed; --restart starts over on the new code."""
    from dormouse.ab.comparison import fingerprint

    run(registry, tmp_path / "ab", FakeTrain(stop_at={"gr-s3": 10}))
    real = fingerprint.compute()
    edited = {**real.files, "dormouse/model/looped.py": "0" * 64}
    # An uncommitted edit: the commit string ("sha+dirty") need not change, what computes a run does.
    other = fingerprint.Fingerprint("f" * 64, real.torch, real.python, real.commit, edited)
    monkeypatch.setattr(fingerprint, "compute", lambda: other)
    fake = FakeTrain()
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", fake)
    text = "\n".join(info.value.lines)
    assert fake.calls == [] and "computed by other code" in text and "changed: dormouse/model/looped.py" in text
    assert "--restart" in text and real.commit.split("+")[0] in text
    out = run(registry, tmp_path / "ab", fake, restart=True)
    assert len(fake.calls) == 15
    assert json.loads((out / "results.json").read_text())["code"]["fingerprints"] == ["f" * 64]


def test_runs_computed_by_another_plugin_source_say_to_restore_it_by_its_sha256(
        tmp_path: Path, registry: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin lies outside dormouse's repository, so a checkout of the runs' commit cannot bring its source
    back: the refusal gives the sha256 of the source the runs used (``sha256sum`` of a file plugin) and the way
    on, restoring it or registering a new comparison."""
    from dormouse.ab.comparison import fingerprint

    real = fingerprint.compute()
    then = fingerprint.Fingerprint("a" * 64, real.torch, real.python, real.commit,
                                   {**real.files, "plugin/my_arms/my_arms.py": "1" * 64})
    monkeypatch.setattr(fingerprint, "compute", lambda: then)
    run(registry, tmp_path / "ab", FakeTrain(stop_at={"gr-s3": 10}))
    edited = fingerprint.Fingerprint("b" * 64, real.torch, real.python, real.commit,
                                     {**real.files, "plugin/my_arms/my_arms.py": "2" * 64})
    monkeypatch.setattr(fingerprint, "compute", lambda: edited)
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", FakeTrain())
    way_on = info.value.lines[-1]
    assert "changed: plugin/my_arms/my_arms.py" in info.value.lines[1]
    assert "restore plugin my_arms's source" in way_on and "sha256 is " + "1" * 64 in way_on
    assert "register a new comparison" in way_on and "git worktree" not in way_on


def test_the_code_fingerprint_covers_the_configs_where_the_installed_package_has_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The configs a run is composed from are part of what computes it, read where the installed dormouse.conf
    package has them: in an editable install that is the repository's top-level conf/, not dormouse/conf (a
    fingerprint that looked beside the sources would leave every config out: a changed preset unseen, and a
    checkout without that folder unable to resume a comparison started where it existed)."""
    import sys
    import types

    from dormouse.ab.comparison import fingerprint

    real = fingerprint.compute().files
    assert {"conf/config.yaml", "conf/preset/cpu.yaml"} <= set(real), sorted(k for k in real if "conf" in k)
    assert not any(k.startswith(("conf/ab/", "conf/launcher/")) for k in real)  # registrations, launchers
    elsewhere = tmp_path / "installed_conf"  # the package found somewhere else than beside the sources
    (elsewhere / "preset").mkdir(parents=True)
    (elsewhere / "config.yaml").write_text("model: {}\n")
    (elsewhere / "preset" / "cpu.yaml").write_text("# another preset\n")
    fake = types.ModuleType("dormouse.conf")
    fake.__file__ = str(elsewhere / "__init__.py")
    monkeypatch.setitem(sys.modules, "dormouse.conf", fake)
    moved = {k: v for k, v in fingerprint.compute().files.items() if k.startswith("conf/")}
    assert set(moved) == {"conf/config.yaml", "conf/preset/cpu.yaml"}
    assert moved["conf/preset/cpu.yaml"] != real["conf/preset/cpu.yaml"]
    (elsewhere / "config.yaml").unlink()  # no configs where the package is: said, not skipped
    with pytest.raises(RuntimeError, match="no config.yaml"):
        fingerprint.compute()


def test_a_run_whose_job_runs_other_code_is_failed_not_trained(tmp_path: Path, registry: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The code can change between the driver's check and a job (an edit, a node with another checkout):
    the job compares its own fingerprint with the comparison's and trains nothing."""
    from dormouse.ab.launchers.base import FAILED
    from dormouse.ab.runs import job as runjob

    (registry / "t.yaml").write_text(SPEC)
    plan_ = plan_runs(load_spec("t", registry), [], tmp_path / "t")
    fake = FakeTrain()
    task = runjob.RunTask(plan_[0], tmp_path / "t", fake, "sequential", fingerprint="0" * 64)
    outcome = runjob.train_run(task)
    assert outcome.status == FAILED and "not the comparison's" in outcome.note and fake.calls == []


def test_compiling_runs_share_one_compile_cache_in_the_comparison(tmp_path: Path, registry: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With train.compile=true every run (any process, any resume) points torch's compile caches
    at <comparison>/compile_cache, so an arm's graph is built once; the attempt record says where; the
    variable is unset again afterwards; eager runs are left alone; a directory the user set is kept."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # what importing torch._dynamo leaves in the environment (every run worker imports it): not the user's
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    fake = FakeTrain()
    out = run(registry, tmp_path / "ab", fake, ["train.compile=true"])
    expected = str((out / "compile_cache").resolve())
    assert len(fake.cache_dirs) == 15 and set(fake.cache_dirs.values()) == {expected}
    record = json.loads((out / "launch" / "gr-s1.json").read_text())
    assert record["attempts"][-1]["compile_cache"] == expected
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()  # torch's default is back
    eager = FakeTrain()
    run(registry, tmp_path / "ab_eager", eager)
    assert set(eager.cache_dirs.values()) == {default_cache_dir()}  # an eager run is left alone
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    own = FakeTrain()
    run(registry, tmp_path / "ab_own", own, ["train.compile=true"])
    assert set(own.cache_dirs.values()) == {str(tmp_path / "mine")}


def test_rerun_does_not_redo_completed_runs(finished: tuple[Path, Path, FakeTrain]) -> None:
    registry, comp, _ = finished
    again = FakeTrain()
    out = run(registry, comp.parent, again)
    assert again.calls == []
    assert json.loads((out / "results.json").read_text())["arms"]["gr"]["verdict"] == "better"


def test_interrupted_run_with_checkpoint_is_resumed(tmp_path: Path, registry: Path) -> None:
    first = FakeTrain(stop_at={"gr-s2": 10})  # gr-s2 "killed" after its step-10 eval and checkpoint
    out = run(registry, tmp_path / "ab", first)
    assert pair_state_of(out, "gr-s2") == "resume"
    assert json.loads((out / "results.json").read_text())["arms"]["gr"]["verdict"] == "invalid"

    second = FakeTrain()
    out = run(registry, tmp_path / "ab", second)
    assert second.calls == [("gr-s2", "auto")]
    log = (out / "gr-s2" / "train.log").read_text()
    assert "resume step=10" in log
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and results["arms"]["gr"]["verdict"] == "better"
    assert results["arms"]["gr"]["counter_check"] == "pass"


def test_interrupted_run_without_checkpoint_is_restarted(tmp_path: Path, registry: Path) -> None:
    run(registry, tmp_path / "ab", FakeTrain())
    partial = (tmp_path / "ab" / "t" / "attnres_full-s3")
    # Plant a partial run: its metrics stop at step 10, no done line, no checkpoint.
    rows = (partial / "metrics.jsonl").read_text().splitlines()[:1]
    (partial / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    log = [ln for ln in (partial / "train.log").read_text().splitlines() if not ln.startswith("done")]
    (partial / "train.log").write_text("\n".join(log[:2]) + "\n")
    for ck in (partial / "checkpoints").iterdir():
        ck.unlink()
    fake = FakeTrain()
    out = run(registry, tmp_path / "ab", fake)
    assert fake.calls == [("attnres_full-s3", "never")]  # FakeTrain asserts the directory was emptied
    assert json.loads((out / "results.json").read_text())["complete"]


def test_failed_resume_falls_back_to_a_restart(tmp_path: Path, registry: Path) -> None:
    """A resume refused for a checkpoint none of whose files load starts the run over, the old run moved
    aside with its reason (tests/flows/test_run_life.py has the rest of a run's life)."""
    run(registry, tmp_path / "ab", FakeTrain(stop_at={"rezero-s1": 10}))
    fake = FakeTrain(fail_resume=True)
    out = run(registry, tmp_path / "ab", fake)
    assert fake.calls == [("rezero-s1", "auto"), ("rezero-s1", "never")]
    assert json.loads((out / "results.json").read_text())["complete"]
    (aside,) = (out / "set_aside").iterdir()
    assert "planted: checkpoint unreadable" in (aside / "SET_ASIDE.txt").read_text()


def test_a_failed_run_marks_its_arm_invalid_and_is_retried(tmp_path: Path, registry: Path) -> None:
    out = run(registry, tmp_path / "ab", FakeTrain(fail=("attnres_block-s2",)))
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"]
    assert results["arms"]["attnres_block"]["verdict"] == "invalid"
    assert "planted failure" in results["arms"]["attnres_block"]["sentence"]
    assert results["arms"]["gr"]["verdict"] == "better"  # the other arms are unaffected
    assert (out / "attnres_block-s2" / "ab_error.txt").is_file()
    fake = FakeTrain()
    assert ab_run("t", [], root=tmp_path / "ab", console=Console(record=True), train_fn=fake,
                  registry=registry) == 0
    assert fake.calls == [("attnres_block-s2", "never")]


def test_dead_arm_is_invalid_never_a_tie(tmp_path: Path, registry: Path) -> None:
    out = run(registry, tmp_path / "ab", FakeTrain(dead=("attnres_full",)))
    a = json.loads((out / "results.json").read_text())["arms"]["attnres_full"]
    assert a["verdict"] == "invalid" and a["counter_check"] == "fail"
    assert any("dead-arm" in f for f in a["findings"])
    assert "dead-arm" in (out / "report.md").read_text()


def test_changed_registration_is_refused_and_restart_starts_over(tmp_path: Path, registry: Path) -> None:
    run(registry, tmp_path / "ab", FakeTrain())
    (registry / "t.yaml").write_text(spec(sesoi=0.02))
    fake = FakeTrain()
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", fake)
    assert any("changed since the first run" in line for line in info.value.lines)
    assert fake.calls == []
    # CLI overrides are part of the registration too.
    (registry / "t.yaml").write_text(SPEC)
    with pytest.raises(ComparisonError, match="CLI overrides changed"):
        run(registry, tmp_path / "ab", fake, ["train.lr=0.001"])
    assert exit_code(ab_run, "t", ["train.lr=0.001"], root=tmp_path / "ab", console=Console(record=True),
                     train_fn=fake, registry=registry) == 2
    assert fake.calls == []

    out = run(registry, tmp_path / "ab", fake, ["train.lr=0.001"], restart=True)
    assert len(fake.calls) == 15 and all(r == "never" for _, r in fake.calls)
    stamp = json.loads((out / STAMP_NAME).read_text())
    assert stamp["overrides"] == ["train.lr=0.001"]
    assert OmegaConf.load(out / "gr-s1" / "config.yaml").train.lr == 0.001


def test_a_foreign_directory_is_not_taken_over(tmp_path: Path, registry: Path) -> None:
    (tmp_path / "ab" / "t").mkdir(parents=True)
    (tmp_path / "ab" / "t" / "notes.txt").write_text("mine")
    with pytest.raises(ComparisonError, match="no registration.json"):
        run(registry, tmp_path / "ab", FakeTrain())


def test_wandb_grouping_and_run_names(finished: tuple[Path, Path, FakeTrain]) -> None:
    _, comp, fake = finished
    cfg = next(c for c in fake.configs if c.run.name == "attnres_block-s3")
    assert cfg.logging.wandb_group == "t" and cfg.logging.wandb_job_type == "attnres_block"
    assert Path(cfg.run.dir) == comp and cfg.train.seed == 3
    assert cfg.train.data_seed == 103


def pair_state_of(comp_dir: Path, name: str) -> str:
    cfg = OmegaConf.load(comp_dir / name / "config.yaml")
    from dormouse.ab.runs.job import Run

    arm, seed = re.match(r"(.*)-s(\d+)$", name).groups()
    return run_state(Run(arm, int(seed), cfg, comp_dir / name))[0]


# --- one real comparison --------------------------------------------------------------------------------

@pytest.mark.slow
def test_real_smoke_comparison_resumes_and_passes_the_log_check(tmp_path: Path) -> None:
    """The shipped `smoke` registration (protocol 2, looks at 2 and 4) with the real trainer, cut to 4
    steps: every arm's counters are proven by the log check, an interrupted run resumes from its
    checkpoint and its arm rejoins the schedule where it stood, and the A/A arm, on its own data order,
    differs from the baseline (it calibrates something)."""
    from dormouse.cli.logs import logs_command
    from dormouse.train.loop import train

    calls: list[tuple[str, str]] = []

    def interrupted_once(cfg: DictConfig) -> Any:
        calls.append((str(cfg.run.name), str(cfg.train.resume)))
        stop = 2 if cfg.run.name == "gr-s2" and cfg.train.resume == "never" else None
        return train(cfg, stop_at_step=stop)

    overrides = ["train.steps=4", "train.eval_every=2", "data.eval_bytes=512"]

    def smoke() -> Path:
        return run_comparison("smoke", overrides, root=tmp_path / "ab", console=Console(record=True),
                              train_fn=interrupted_once).plan.comp_dir

    out = smoke()
    assert calls[:10] == [(f"{a}-s{k}", "never") for k in (1, 2) for a in
                          ("prenorm", "gr", "attnres_full", "attnres_block", "prenorm_aa")]
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"] and results["arms"]["gr"]["verdict"] == "invalid"
    assert all(name != "gr" for name, _ in (c[0].rsplit("-s", 1) for c in calls[10:]))  # invalid: it stopped
    trained = {name for name, _ in calls}

    calls.clear()
    out = smoke()
    assert calls[0] == ("gr-s2", "auto")
    assert "resume step=2" in (out / "gr-s2" / "train.log").read_text()
    results = json.loads((out / "results.json").read_text())
    gr = results["arms"]["gr"]
    # gr rejoins at look 1; only if it goes on does look 2 train its runs, and the baseline's and the A/A
    # arm's second-look runs where no other arm needed them in the first call; nothing is trained twice
    later = calls[1:]
    assert all(r == "never" and name not in trained for name, r in later), later
    if gr["look"] == 1:
        assert later == []
    else:
        assert {"gr-s3", "gr-s4"} <= {name for name, _ in later}
        assert {name.rsplit("-s", 1)[0] for name, _ in later} <= {"gr", "prenorm", "prenorm_aa"}, later
    assert results["complete"]
    for name, a in results["arms"].items():
        assert a["counter_check"] == "pass", (name, a["findings"])
        assert a["verdict"] in ("baseline", "aa", "better", "worse", "tie", "undecided"), name
    # The A/A arm trains on its own data-order stream, so its paired differences measure run-to-run noise.
    assert all(d != 0.0 for d in results["arms"]["prenorm_aa"]["diffs"])
    assert logs_command([out], check=True, console=Console(record=True)) == 0
    for f in ("report.md", "bpb_vs_tokens.png", "bpb_by_depth.png", "design.json"):
        assert (out / f).is_file()


def test_a_sigterm_between_two_runs_says_interrupted_and_releases_the_lock(
        tmp_path: Path, registry: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TERM at a run boundary (after one run's end, outside any training loop) stops the driver as TERM during a
    run does: its interrupted line, exit 143, its lock released (no stale lock for the next driver)."""
    from dormouse.ab.runs.board import RunBoard

    finish = RunBoard.finish

    def finish_then_term(self: RunBoard, outcome: Any) -> None:
        finish(self, outcome)
        if outcome.key == "rezero-s1":
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(RunBoard, "finish", finish_then_term)
    # Where the driver installs no handler of its own, this one stands in for the default (which ends pytest).
    swallowed: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: swallowed.append(signum))
    console, fake = Console(record=True, width=200), FakeTrain()
    try:
        code = exit_code(ab_run, "t", [], root=tmp_path / "ab", console=console, train_fn=fake, registry=registry)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (code, swallowed, [c[0] for c in fake.calls]) == (143, [], ["rezero-s1"])
    assert "interrupted: rerun `dormouse ab t`" in console.export_text()
    assert (tmp_path / "ab" / "t" / "ab.lock").read_text() == ""  # released: empty is free, not stale


def test_ctrl_c_stops_the_comparison_and_a_rerun_continues(tmp_path: Path, registry: Path) -> None:
    fake = FakeTrain()
    interrupted: list[str] = []

    def interrupt_on_third(cfg: DictConfig) -> None:
        if len(fake.calls) == 2:
            interrupted.append(str(cfg.run.name))
            raise KeyboardInterrupt
        fake(cfg)

    code = exit_code(ab_run, "t", [], root=tmp_path / "ab", console=Console(record=True),
                     train_fn=interrupt_on_third, registry=registry)
    assert code == 130 and len(fake.calls) == 2 and interrupted == ["attnres_full-s1"]
    again = FakeTrain()
    assert ab_run("t", [], root=tmp_path / "ab", console=Console(record=True), train_fn=again,
                  registry=registry) == 0
    assert len(again.calls) == 13 and again.calls[0] == ("attnres_full-s1", "never")
