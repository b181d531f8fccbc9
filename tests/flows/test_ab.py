"""`dormouse ab`: registration (protocol 2), the runner end to end look by look (with a fake train function
writing planted run directories), resumption, refusal of a changed registration or of other code, and the
report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from dormouse.ab.command import ab_command
from dormouse.ab.pairjob import pair_state
from dormouse.ab.registration import STAMP_NAME
from dormouse.ab.registry import ABSpecError, ComparisonError, list_comparisons, load_spec
from dormouse.ab.runner import plan_pairs, run_comparison
from dormouse.arms.registry import ARMS
from dormouse.config.schema import arm_name
from dormouse.run.checkpoint import CheckpointError
from tests.helpers.planted_run import append_eval, append_log, done_line, eval_rows, write_run_header

SPEC = """\
protocol: 2
name: t
description: a test comparison
baseline: rezero
aa_arm: rezero_aa
sesoi: 0.01
alpha: 0.05
looks: [3]
init_seed_base: 1
data_seed_base: 101
aa_data_seed_base: 201
pilot_sd: 0.01
expected_effect: -0.02
bad_run_ceiling: 2.15
fixed: [preset=tiny, train.steps=20, train.eval_every=10, train.device=cpu, logging.progress=off]
arms:
  rezero: []
  gr: [model.use_gr=true]
  attnres_full: [model.use_attnres=true]
  attnres_block: [model.use_attnres=true, model.attnres.block_size=2]
  rezero_aa: []
"""
# Two looks: 2 replicates, then 4.
SEQUENTIAL = SPEC.replace("looks: [3]", "looks: [2, 4]")

# Planted final-bpb effects vs the baseline: gr clearly better, attnres_block clearly worse, attnres_full
# and the A/A arm within noise.
EFFECT = {"rezero": 0.0, "gr": -0.10, "attnres_full": 0.002, "attnres_block": 0.08, "rezero_aa": 0.0}
JITTER = {1: 0.0015, 2: -0.001, 3: 0.0004}


class FakeTrain:
    """Stands in for dormouse.train.loop.train: writes the run directory a real run writes (config.yaml,
    provenance.json, train.log with eval and done lines, metrics.jsonl, a checkpoint) with planted bpb."""

    def __init__(self, *, dead: tuple[str, ...] = (), fail: tuple[str, ...] = (),
                 fail_resume: bool = False, stop_at: dict[str, int] | None = None,
                 exact: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, str]] = []  # (run name, train.resume)
        self.configs: list[DictConfig] = []
        self.dead, self.fail, self.fail_resume = dead, fail, fail_resume
        self.stop_at = stop_at or {}
        self.exact = exact  # arms whose difference from the baseline is the planted effect, no jitter

    def final_bpb(self, arm: str, seed: int) -> float:
        jitter = JITTER[(seed - 1) % 3 + 1] * (1 + (0 if arm in self.exact else list(EFFECT).index(arm)))
        return 2.0 + 0.05 * seed + EFFECT[arm] + jitter

    def __call__(self, cfg: DictConfig) -> None:
        name = str(cfg.run.name)
        arm, seed = name.rsplit("-s", 1)[0], int(cfg.train.seed)
        assert name == f"{arm}-s{seed}"
        run_dir = Path(cfg.run.dir) / name
        resume = str(cfg.train.resume)
        self.calls.append((name, resume))
        self.configs.append(cfg)
        if name in self.fail:
            raise RuntimeError("planted failure")
        start = 0
        if resume == "auto":
            if self.fail_resume:  # the trainer's refusal; FakeTrain's checkpoints (b"fake") do not load
                raise CheckpointError("planted: checkpoint unreadable")
            ckpts = sorted((run_dir / "checkpoints").glob("step_*.pt"))
            start = int(ckpts[-1].stem[5:]) if ckpts else 0
        else:
            assert not run_dir.exists(), "the runner must hand a fresh run an empty directory"
        params = 10_000 + 100 * len(arm)
        write_run_header(run_dir, cfg, {"params": params, "arm_params": 100 * len(arm)})
        append_log(run_dir, f"resume step={start} from=ckpt" if start else "# dormouse: fake")
        for row in eval_rows(cfg, self.final_bpb(arm, seed), start=start, tok_s=5000.0 - 100 * len(arm),
                             params=params, dead=arm in self.dead):
            if self.stop_at.get(name) is not None and row["step"] > self.stop_at[name]:
                return  # "killed": no done line
            append_eval(run_dir, cfg, row)
            (run_dir / "checkpoints").mkdir(exist_ok=True)
            (run_dir / "checkpoints" / f"step_{row['step']:08d}.pt").write_bytes(b"fake")
        append_log(run_dir, done_line(cfg))


@pytest.fixture()
def registry(tmp_path: Path) -> Path:
    reg = tmp_path / "registry"
    reg.mkdir()
    (reg / "t.yaml").write_text(SPEC)
    return reg


def run(registry: Path, root: Path, fake: FakeTrain, overrides: list[str] | None = None, **kw: Any) -> Path:
    return run_comparison("t", overrides or [], root=root, console=Console(record=True, width=200),
                          train_fn=fake, registry=registry, **kw).plan.comp_dir


# --- the registered files -------------------------------------------------------------------------------

def test_shipped_comparisons_load_and_compose() -> None:
    assert {"residual", "residual_cpu", "smoke"} <= set(list_comparisons())
    for name in ("residual", "smoke"):
        reg = load_spec(name)
        assert reg.protocol == 2 and reg.spec.baseline == "rezero" and reg.spec.aa_arm == "rezero_aa"
        assert set(reg.spec.arms) == {"rezero", "gr", "attnres_full", "attnres_block", "rezero_aa"}
        assert len(reg.spec.looks) >= 2 and reg.spec.sesoi > 0
        pairs = plan_pairs(reg, [], Path("/tmp/never-written"))  # every pair composes and validates
        kinds = {p.arm: arm_name(p.cfg) for p in pairs}
        assert kinds == {"rezero": "rezero", "gr": "gr", "attnres_full": "attnres",
                         "attnres_block": "attnres", "rezero_aa": "rezero"}
        block = next(p for p in pairs if p.arm == "attnres_block")
        assert block.cfg.model.attnres.block_size == 2
        assert len(pairs) == 5 * reg.spec.looks[-1]
    assert load_spec("residual").spec.fixed[0] == "preset=9m"
    assert "preset=tiny" in load_spec("smoke").spec.fixed
    assert load_spec("residual_cpu").protocol == 1  # the published result's registration: read only


def test_each_replicate_has_its_own_seed_streams_and_the_aa_arm_its_own_data(
        tmp_path: Path, registry: Path) -> None:
    """Replicate k trains every arm with train.seed = init base + k and train.data_seed = data base + k; the
    A/A arm, the baseline again, with the A/A data base + k. Extending the looks extends the streams and
    renumbers nothing."""
    pairs = plan_pairs(load_spec("t", registry), [], tmp_path / "t")
    seeds = {(p.arm, p.replicate): (int(p.cfg.train.seed), int(p.cfg.train.data_seed)) for p in pairs}
    for k in (1, 2, 3):
        assert {seeds[(a, k)] for a in ("rezero", "gr", "attnres_full", "attnres_block")} == {(k, 100 + k)}
        assert seeds[("rezero_aa", k)] == (k, 200 + k)
    (registry / "t.yaml").write_text(SEQUENTIAL.replace("looks: [2, 4]", "looks: [2, 4, 6]"))
    longer = {(p.arm, p.replicate): (int(p.cfg.train.seed), int(p.cfg.train.data_seed))
              for p in plan_pairs(load_spec("t", registry), [], tmp_path / "t")}
    assert all(longer[key] == value for key, value in seeds.items()) and len(longer) == 30


def test_a_protocol_1_registration_is_read_but_never_run(tmp_path: Path, registry: Path) -> None:
    err = Console(record=True, width=200)
    assert ab_command("residual_cpu", [], root=tmp_path / "ab", console=Console(record=True),
                      err_console=err, train_fn=FakeTrain()) == 2
    assert "protocol-1 registration" in err.export_text() and not (tmp_path / "ab").exists()


@pytest.mark.parametrize(("text", "field"), [
    (SPEC.replace("sesoi: 0.01", "sesoi: lots"), "sesoi"),
    (SPEC.replace("sesoi: 0.01", "sesoi: 0"), "sesoi"),
    (SPEC.replace("looks: [3]", "looks: [3, 2]"), "looks"),
    (SPEC.replace("looks: [3]", "looks: [1, 3]"), "looks"),
    (SPEC.replace("alpha: 0.05", "alpha: 0.7"), "alpha"),
    (SPEC.replace("baseline: rezero", "baseline: nope"), "baseline"),
    (SPEC.replace("aa_arm: rezero_aa", "aa_arm: gr"), "arms.gr"),  # the A/A arm is the baseline again
    (SPEC.replace("aa_data_seed_base: 201", "aa_data_seed_base: 102"), "aa_data_seed_base"),  # shares data
    (SPEC.replace("aa_data_seed_base: 201\n", ""), "aa_data_seed_base"),
    (SPEC + "colour: blue\n", "colour"),
    (SPEC.replace("pilot_sd: 0.01\n", ""), "pilot_sd"),
    (SPEC.replace("rezero_aa: []", "rezero_aa: [train.data_seed=5]"), "arms.rezero_aa"),
    (SPEC.replace("gr: [model.use_gr=true]", "gr: [model.use_gr=true, train.seed=5]"), "arms.gr"),
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
    (registry / "t.yaml").write_text(SPEC.replace("model.attnres.block_size=2", "model.attnres.block_size=0"))
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", FakeTrain())
    assert any("attnres_block" in line and "block_size" in line for line in info.value.lines)


def test_what_this_machine_cannot_run_is_refused_before_any_pair(tmp_path: Path, registry: Path) -> None:
    """A kernel the arm cannot run here (the fused read on a CPU) is refused for the arm, before any run, as
    `dormouse train` refuses it before step 0: composing the config no longer asks the machine, the plan does."""
    fused_on_gr = SPEC.replace("gr: [model.use_gr=true]", "gr: [model.use_gr=true, model.kernel=triton]")
    (registry / "t.yaml").write_text(fused_on_gr)
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

def test_end_to_end_report_results_and_plots_agree(tmp_path: Path, registry: Path) -> None:
    fake = FakeTrain()
    out = run(registry, tmp_path / "ab", fake)
    assert out == (tmp_path / "ab" / "t").resolve()
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
    diffs = [fake.final_bpb("gr", s) - fake.final_bpb("rezero", s) for s in (1, 2, 3)]
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
    from dormouse.ab.command import status_command

    (registry / "t.yaml").write_text(SEQUENTIAL)
    console = Console(record=True, width=250)
    assert ab_command("t", [], root=tmp_path / "ab", console=console, registry=registry, design=True) == 0
    card = json.loads((tmp_path / "ab" / "t" / "design.json").read_text())
    assert card["card"]["design"] == {"alpha": 0.05, "sesoi": 0.01, "looks": [2, 4], "n_arms": 3, "alpha_holdback": 1.0}
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
    """Every pair records the fingerprint of the code it ran on; a later invocation on other code adds no
    run, says what differs and how to proceed; --restart starts over on the new code."""
    from dormouse.ab import fingerprint

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


def test_the_code_fingerprint_covers_the_configs_where_the_installed_package_has_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The configs a run is composed from are part of what computes it. In an editable install the
    dormouse.conf package is the repository's top-level conf/, not dormouse/conf: the fingerprint looked
    there, found nothing, and left every config out (a changed preset went unseen, and a checkout without
    that folder could not resume a comparison started where it existed)."""
    import sys
    import types

    from dormouse.ab import fingerprint

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


def test_a_pair_whose_job_runs_other_code_is_failed_not_trained(tmp_path: Path, registry: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The code can change between the driver's check and a job (an edit, a node with another checkout):
    the job compares its own fingerprint with the comparison's and trains nothing."""
    from dormouse.ab import pairjob
    from dormouse.ab.launch import FAILED

    (registry / "t.yaml").write_text(SPEC)
    plan_ = plan_pairs(load_spec("t", registry), [], tmp_path / "t")
    fake = FakeTrain()
    task = pairjob.PairTask(plan_[0], tmp_path / "t", fake, "sequential", fingerprint="0" * 64)
    outcome = pairjob.run_pair(task)
    assert outcome.status == FAILED and "not the comparison's" in outcome.note and fake.calls == []


class CacheSpy(FakeTrain):
    """A FakeTrain that records the compile-cache directory each run sees."""

    def __init__(self) -> None:
        super().__init__()
        self.cache_dirs: dict[str, str | None] = {}

    def __call__(self, cfg: DictConfig) -> None:
        import os

        self.cache_dirs[str(cfg.run.name)] = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        super().__call__(cfg)


def test_compiling_pairs_share_one_compile_cache_in_the_comparison(tmp_path: Path, registry: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23: with train.compile=true every pair (any process, any resume) points torch's compile caches
    at <comparison>/compile_cache, so an arm's graph is built once; the attempt record says where; the
    variable is unset again afterwards; eager pairs are left alone; a directory the user set is kept."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # what importing torch._dynamo leaves in the environment (every pair worker imports it): not the user's
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    spy = CacheSpy()
    out = run(registry, tmp_path / "ab", spy, ["train.compile=true"])
    expected = str((out / "compile_cache").resolve())
    assert len(spy.cache_dirs) == 15 and set(spy.cache_dirs.values()) == {expected}
    record = json.loads((out / "launch" / "gr-s1.json").read_text())
    assert record["attempts"][-1]["compile_cache"] == expected
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()  # torch's default is back
    eager = CacheSpy()
    run(registry, tmp_path / "ab_eager", eager)
    assert set(eager.cache_dirs.values()) == {default_cache_dir()}  # an eager pair is left alone
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    own = CacheSpy()
    run(registry, tmp_path / "ab_own", own, ["train.compile=true"])
    assert set(own.cache_dirs.values()) == {str(tmp_path / "mine")}


def test_rerun_does_not_redo_completed_pairs(tmp_path: Path, registry: Path) -> None:
    run(registry, tmp_path / "ab", FakeTrain())
    again = FakeTrain()
    out = run(registry, tmp_path / "ab", again)
    assert again.calls == []
    assert json.loads((out / "results.json").read_text())["arms"]["gr"]["verdict"] == "better"


def test_interrupted_pair_with_checkpoint_is_resumed(tmp_path: Path, registry: Path) -> None:
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


def test_interrupted_pair_without_checkpoint_is_restarted(tmp_path: Path, registry: Path) -> None:
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
    """A resume refused for a checkpoint none of whose files load starts the pair over, the old run moved
    aside with its reason (tests/flows/test_pair_life.py has the rest of issue 31's rules)."""
    run(registry, tmp_path / "ab", FakeTrain(stop_at={"rezero-s1": 10}))
    fake = FakeTrain(fail_resume=True)
    out = run(registry, tmp_path / "ab", fake)
    assert fake.calls == [("rezero-s1", "auto"), ("rezero-s1", "never")]
    assert json.loads((out / "results.json").read_text())["complete"]
    (aside,) = (out / "set_aside").iterdir()
    assert "planted: checkpoint unreadable" in (aside / "SET_ASIDE.txt").read_text()


def test_a_failed_pair_marks_its_arm_invalid_and_is_retried(tmp_path: Path, registry: Path) -> None:
    out = run(registry, tmp_path / "ab", FakeTrain(fail=("attnres_block-s2",)))
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"]
    assert results["arms"]["attnres_block"]["verdict"] == "invalid"
    assert "planted failure" in results["arms"]["attnres_block"]["sentence"]
    assert results["arms"]["gr"]["verdict"] == "better"  # the other arms are unaffected
    assert (out / "attnres_block-s2" / "ab_error.txt").is_file()
    fake = FakeTrain()
    assert ab_command("t", [], root=tmp_path / "ab", console=Console(record=True), train_fn=fake,
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
    (registry / "t.yaml").write_text(SPEC.replace("sesoi: 0.01", "sesoi: 0.02"))
    fake = FakeTrain()
    with pytest.raises(ComparisonError) as info:
        run(registry, tmp_path / "ab", fake)
    assert any("changed since the first run" in line for line in info.value.lines)
    assert fake.calls == []
    # CLI overrides are part of the registration too.
    (registry / "t.yaml").write_text(SPEC)
    with pytest.raises(ComparisonError, match="CLI overrides changed"):
        run(registry, tmp_path / "ab", fake, ["train.lr=0.001"])
    assert ab_command("t", ["train.lr=0.001"], root=tmp_path / "ab", console=Console(record=True),
                      err_console=Console(record=True), train_fn=fake, registry=registry) == 2
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


def test_wandb_grouping_and_run_names(tmp_path: Path, registry: Path) -> None:
    seen: list[DictConfig] = []
    fake = FakeTrain()

    def recording(cfg: DictConfig) -> None:
        seen.append(cfg)
        fake(cfg)

    run_comparison("t", [], root=tmp_path / "ab", console=Console(record=True), train_fn=recording,
                   registry=registry)
    cfg = next(c for c in seen if c.run.name == "attnres_block-s3")
    assert cfg.logging.wandb_group == "t" and cfg.logging.wandb_job_type == "attnres_block"
    assert Path(cfg.run.dir) == (tmp_path / "ab" / "t").resolve() and cfg.train.seed == 3
    assert cfg.train.data_seed == 103


def pair_state_of(comp_dir: Path, name: str) -> str:
    cfg = OmegaConf.load(comp_dir / name / "config.yaml")
    from dormouse.ab.pairjob import Pair

    arm, seed = re.match(r"(.*)-s(\d+)$", name).groups()
    return pair_state(Pair(arm, int(seed), cfg, comp_dir / name))[0]


# --- one real comparison --------------------------------------------------------------------------------

@pytest.mark.slow
def test_real_smoke_comparison_resumes_and_passes_the_log_check(tmp_path: Path) -> None:
    """The shipped `smoke` registration (protocol 2, looks at 2 and 4) with the real trainer, cut to 4
    steps: every arm's counters are proven by the log check, an interrupted pair resumes from its
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
                          ("rezero", "gr", "attnres_full", "attnres_block", "rezero_aa")]
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"] and results["arms"]["gr"]["verdict"] == "invalid"
    assert all(name != "gr" for name, _ in (c[0].rsplit("-s", 1) for c in calls[10:]))  # invalid: it stopped

    calls.clear()
    out = smoke()
    assert calls[0] == ("gr-s2", "auto")
    assert "resume step=2" in (out / "gr-s2" / "train.log").read_text()
    results = json.loads((out / "results.json").read_text())
    gr = results["arms"]["gr"]
    assert calls[1:] == ([] if gr["look"] == 1 else [("gr-s3", "never"), ("gr-s4", "never")])
    assert results["complete"]
    for name, a in results["arms"].items():
        assert a["counter_check"] == "pass", (name, a["findings"])
        assert a["verdict"] in ("baseline", "aa", "better", "worse", "tie", "undecided"), name
    # The A/A arm trains on its own data-order stream, so its paired differences measure run-to-run noise.
    assert all(d != 0.0 for d in results["arms"]["rezero_aa"]["diffs"])
    assert logs_command([out], check=True, console=Console(record=True)) == 0
    for f in ("report.md", "bpb_vs_tokens.png", "bpb_by_depth.png", "design.json"):
        assert (out / f).is_file()


def test_ctrl_c_stops_the_comparison_and_a_rerun_continues(tmp_path: Path, registry: Path) -> None:
    fake = FakeTrain()

    def interrupt_on_third(cfg: DictConfig) -> None:
        if len(fake.calls) == 2:
            fake.calls.append((str(cfg.run.name), "interrupted"))
            raise KeyboardInterrupt
        fake(cfg)

    code = ab_command("t", [], root=tmp_path / "ab", console=Console(record=True),
                      train_fn=interrupt_on_third, registry=registry)
    assert code == 130 and len(fake.calls) == 3
    again = FakeTrain()
    assert ab_command("t", [], root=tmp_path / "ab", console=Console(record=True), train_fn=again,
                      registry=registry) == 0
    assert len(again.calls) == 13 and again.calls[0] == ("attnres_full-s1", "never")
