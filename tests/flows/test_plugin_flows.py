"""A researcher's own arm, end to end through the commands a user types, with no edit to dormouse: a plugin
file in their own folder (``--plugin``, anywhere on the line, or a registration's ``plugins:``) and an
installed package's entry point. Each trains, validates, is checked, sampled, evaluated and resumed (the
readers load the plugin the run recorded, with no ``--plugin``), and runs a registered comparison written in
the researcher's folder (``--jobs`` and submitit's executor); a bad plugin is one ``error:`` line, exit 2.

Each command runs in this process as a fresh one would see it: in the researcher's folder, and with every
plugin the command loaded forgotten when it returns, so a reader that does not load the run's plugin finds
no arm of that name (the runs' workers and submitit's jobs are still processes of their own).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from dormouse.arms import builtin  # noqa: F401  (registered before plugins_forgotten reads the arms)
from dormouse.cli.app import app
from tests.helpers.plugin_arms import plugins_forgotten
from tests.helpers.plugin_files import forget_plugins, write_plugin_file, write_plugin_package

__all__ = ["forget_plugins"]
REPO = Path(__file__).resolve().parents[2]
TINY = ["preset=tiny", "model.d_model=32", "model.n_heads=2", "data.seq_len=32", "data.eval_bytes=1024",
        "train.batch_size=4", "train.warmup=2", "train.device=cpu"]

STUDY = """\
protocol: 2
name: {name}
description: "{arm} against pre-norm, from the researcher's folder"
baseline: prenorm
sesoi: 0.05
looks: [2]
init_seed_base: 1
data_seed_base: 1
pilot_sd: 0.03
expected_effect: -0.1
fixed: [{fixed}, train.steps=20, train.eval_every=10]
{plugins}arms:
  prenorm: [model.use_prenorm=true]
  {arm}: [model.use_{arm}=true]
"""


def dormouse(args: list[str], cwd: Path, site: Path | None = None) -> Result:
    """``dormouse ARGS`` typed in ``cwd`` (``site`` holds 'installed' packages): run in this process, then every
    plugin it loaded forgotten (its arms, modules, ``sys.path`` and ``DORMOUSE_PLUGINS``)."""
    here, env = Path.cwd(), {"DORMOUSE_PLUGINS": "", "COLUMNS": "200"}
    with plugins_forgotten():
        if site is not None:  # on this process's path, and on the path of the processes it starts
            sys.path.insert(0, str(site))
            env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
        os.chdir(cwd)
        try:
            return CliRunner().invoke(app, args, env=env)
        finally:
            os.chdir(here)


def ok(done: Result) -> str:
    assert done.exit_code == 0, done.output[-2000:] + done.stderr[-2000:] + repr(done.exception)
    return done.output


def refused(done: Result) -> str:
    """The one ``error:`` line of a command refused with exit 2, no traceback (an exception other than the
    exit would have been one)."""
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.exit_code == 2 and len(errors) == 1 and isinstance(done.exception, SystemExit), done.stderr[-2000:]
    return errors[0]


def final_bpb(run: Path) -> float:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()][-1]["bpb"]


@pytest.mark.slow
def test_a_plugin_file_arm_trains_validates_checks_samples_evaluates_and_resumes(tmp_path: Path) -> None:
    work = tmp_path / "research"
    write_plugin_file(work, "my_arms", "fgate")
    arm = ["model.use_fgate=true", "model.fgate.init=0.5", *TINY]
    assert "use_fgate: true" in ok(dormouse(["validate", *arm, "--plugin", "my_arms.py"], work))
    assert "model.fgate.init=25.0 is invalid" in refused(
        dormouse(["--plugin", "my_arms.py", "validate", *arm, "model.fgate.init=25"], work))
    out = ok(dormouse(["train", *arm, "train.steps=20", "train.eval_every=10", "train.ckpt_every=10",
                       "train.keep_ckpts=3", "run.name=r", "logging.wandb=offline", "--plugin=my_arms.py"], work))
    assert "arm=fgate" in out and "fgate=" in out
    run = work / "runs" / "r"
    assert (run / "wandb_id.txt").is_file()  # wandb logged it (offline), its probes as named scalars
    recorded = json.loads((run / "provenance.json").read_text())["plugins"]
    assert [(p["module"], p["file"]) for p in recorded] == [("my_arms", str((work / "my_arms.py").resolve()))]
    # the readers load what the run recorded: no --plugin
    assert "no findings" in ok(dormouse(["logs", "--check", "runs/r"], work))
    assert "arm=fgate" in ok(dormouse(["eval", "runs/r"], work))
    ok(dormouse(["sample", "runs/r", "--bytes", "8", "--prompt", "AB"], work))
    ok(dormouse(["train", "run.name=r2", "train.resume=runs/r/checkpoints/step_00000010.pt"], work))
    assert final_bpb(work / "runs" / "r2") == final_bpb(run)  # the resumed run is the same run
    # the plugin gone: the readers refuse naming it
    (work / "my_arms.py").rename(work / "moved.py")
    assert "used plugin my_arms" in refused(dormouse(["eval", "runs/r"], work))
    checked = dormouse(["logs", "--check", "runs/r"], work)
    assert checked.exit_code == 1 and "missing-plugin: run runs/r used plugin my_arms" in checked.stderr


@pytest.mark.usefixtures("forget_plugins")
def test_a_bad_plugin_is_one_error_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    (tmp_path / "empty.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    for args, words in ((["validate", "--plugin", "broken.py"], "plugin broken.py (--plugin) failed to import"),
                        (["validate", "--plugin", "empty.py"], "plugin empty.py (--plugin) defines no arm"),
                        (["--plugin", "nothere.py", "validate"], "plugin nothere.py (--plugin): no such file"),
                        (["validate", "model.use_nosuch=true"], "model.use_nosuch")):  # an unknown switch
        result = CliRunner().invoke(app, args)
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
        assert result.exit_code == 2 and len(errors) == 1 and words in errors[0], (args, result.stderr)


@pytest.mark.slow
def test_a_registration_in_the_researchers_folder_runs_its_plugin_arm_and_pins_its_code(tmp_path: Path) -> None:
    work = tmp_path / "research"
    write_plugin_file(work / "arms", "study_arms", "sgate")
    (work / "study.yaml").write_text(STUDY.format(name="study", arm="sgate", fixed=", ".join(TINY),
                                                  plugins="plugins: [arms/study_arms.py]\n"))
    ok(dormouse(["ab", "study.yaml", "--root", "ab", "--jobs", "2"], work))
    report = (work / "ab" / "study" / "report.md").read_text()
    assert "arms from plugins: `study_arms`" in report and "sgate" in report
    # the plugin's source is part of the comparison's code: an edit is refused, naming the file, and the way
    # back names the source the runs used by what `sha256sum arms/study_arms.py` printed before the edit
    used = hashlib.sha256((work / "arms" / "study_arms.py").read_bytes()).hexdigest()
    with (work / "arms" / "study_arms.py").open("a") as f:
        f.write("\n# an edit after the comparison started\n")
    again = dormouse(["ab", "study.yaml", "--root", "ab"], work)  # refused in three error lines, no traceback
    assert again.exit_code == 2 and isinstance(again.exception, SystemExit), again.stderr[-2000:]
    assert "computed by other code" in again.stderr and "changed: plugin/study_arms/study_arms.py" in again.stderr
    assert f"sha256 is {used}" in again.stderr and "git worktree" not in again.stderr, again.stderr[-2000:]


@pytest.mark.slow
def test_an_installed_packages_arm_needs_no_option_anywhere(tmp_path: Path) -> None:
    site, work = tmp_path / "site", tmp_path / "research"
    write_plugin_package(site, "gatepkg", "pgate", dist="dormouse-gate-arms")
    work.mkdir()
    ok(dormouse(["train", "model.use_pgate=true", *TINY, "train.steps=10", "run.name=p"], work, site))
    assert "arm=pgate" in ok(dormouse(["eval", "runs/p"], work, site))
    (work / "study.yaml").write_text(STUDY.format(name="pstudy", arm="pgate", fixed=", ".join(TINY), plugins=""))
    ok(dormouse(["ab", "study.yaml", "--root", "ab", "--launcher", "slurm", "launcher.cluster=local",
                "launcher.poll_s=0.2"], work, site))  # polled often: the test waits on the jobs, not the clock
    results = json.loads((work / "ab" / "pstudy" / "results.json").read_text())
    assert [p["module"] for p in results["code"]["plugins"]] == ["gatepkg.arms"]


# --- one arm by two routes, names taken, defaults and switches no loaded code knows -----------------------------


def test_an_arm_from_its_file_and_from_its_installed_package_is_one_arm(tmp_path: Path) -> None:
    """A researcher packages the arm file they trained with (same bytes, now also an entry point): the runs,
    registrations and --plugin lines made from the file still work beside the installed package."""
    site, work = tmp_path / "site", tmp_path / "research"
    write_plugin_file(work, "highway", "highway")
    ok(dormouse(["train", "--plugin", "highway.py", "model.use_highway=true", *TINY, "train.steps=2",
                 "train.eval_every=2", "run.name=h"], work))
    (work / "study.yaml").write_text(STUDY.format(name="hstudy", arm="highway", fixed=", ".join(TINY),
                                                  plugins="plugins: [highway.py]\n"))
    write_plugin_package(site, "hwpkg", "highway", dist="dormouse-highway")
    assert (site / "hwpkg" / "arms.py").read_bytes() == (work / "highway.py").read_bytes()
    assert "arm=highway" in ok(dormouse(["eval", "runs/h"], work, site))
    ok(dormouse(["logs", "runs/h"], work, site))
    assert "use_highway: true" in ok(dormouse(["--plugin", "highway.py", "validate", "model.use_highway=true"],
                                             work, site))
    ok(dormouse(["ab", "plan", "study.yaml", "--root", "ab"], work, site))
    status = dormouse(["ab", "status", "study.yaml", "--root", "ab"], work, site)  # read; nothing started yet
    assert "hstudy: not started" in status.output and "plugin" not in status.output, status.output


def test_two_sources_under_one_arm_name_are_refused_naming_both_and_how_to_choose(tmp_path: Path) -> None:
    site, work = tmp_path / "site", tmp_path / "research"
    write_plugin_file(work, "highway", "highway")
    package = write_plugin_package(site, "hwpkg", "highway", dist="dormouse-highway")
    with (package / "arms.py").open("a") as f:
        f.write("\n# tuned in the package only\n")
    line = refused(dormouse(["--plugin", "highway.py", "validate", "model.use_highway=true"], work, site))
    for words in ("arm 'highway'", "module highway", str((work / "highway.py").resolve()), "hwpkg.arms",
                  str((package / "arms.py").resolve()), "dormouse-highway", "drop a --plugin", "pip uninstall"):
        assert words in line, (words, line)


BUILT_IN_NAME_COMMANDS = [("gr", ["arms"]), ("prenorm", ["validate"]),
                          ("attnres", ["train", "preset=tiny", "train.steps=1"]),
                          ("rezero", ["ab", "plan", "residual"])]


@pytest.mark.parametrize(("name", "command"), BUILT_IN_NAME_COMMANDS, ids=[n for n, _ in BUILT_IN_NAME_COMMANDS])
def test_a_plugin_arm_named_like_a_built_in_is_refused_in_one_line(tmp_path: Path, name: str,
                                                                   command: list[str]) -> None:
    """In a fresh process the plugin loads before the built-in arms are imported: still one line, exit 2."""
    import subprocess

    write_plugin_file(tmp_path, "my_arms", name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "DORMOUSE_PLUGINS": ""}
    done = subprocess.run([sys.executable, "-m", "dormouse", "--plugin", "my_arms.py", *command], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and len(errors) == 1, done.stderr[-3000:]
    for words in (f"taken by dormouse's built-in arm {name!r}", "the plugin must choose another name",
                  "my_arms.py", "module my_arms"):
        assert words in errors[0], (words, errors[0])


def test_a_plugin_option_whose_default_fails_its_check_is_refused_at_load_naming_it(tmp_path: Path) -> None:
    path = write_plugin_file(tmp_path, "bad_default", "bdgate")
    path.write_text(path.read_text().replace("init: float = 0.0", "init: float = 25.0"))
    for command in (["validate"], ["arms"], ["validate", "model.use_bdgate=true", "model.bdgate.init=1"]):
        line = refused(dormouse(["--plugin", "bad_default.py", *command], tmp_path))
        assert line.startswith("error: the default of plugin bad_default's option model.bdgate.init is invalid"), line
        assert "must be within (-20, 20)" in line and str(path.resolve()) in line


def test_a_switch_for_an_arm_no_loaded_code_defines_says_it_may_be_a_plugin(tmp_path: Path) -> None:
    from dormouse.arms.plugins import PLUGIN_HINT

    line = refused(dormouse(["validate", "model.use_highway=true"], tmp_path))
    assert "model.use_highway" in line and PLUGIN_HINT in line and "--plugin FILE" in line
