"""The CLI as a new user meets it: --version, `ab list`, `ab NAME` and `ab PATH.yaml` (a comparison to run, beside
the verbs), a question asked as a flag, shell completion."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dormouse.ab.comparison.registry import list_comparisons
from dormouse.cli.ab import ab_app
from dormouse.cli.app import app
from tests.helpers.registrations import registration

runner = CliRunner()


def test_version_is_the_installed_distribution_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"dormouse {importlib.metadata.version('dormouse')}"


def test_ab_list_shows_every_registered_comparison_with_its_description():
    result = runner.invoke(app, ["ab", "list"])
    assert result.exit_code == 0, result.output
    assert "\nresidual\tlooks at 3, 6, 9 replicates, SESOI 0.02 bpb; arms rezero, gr, " in result.output
    assert "\nresidual_cpu\t5 seeds (protocol 1, read only)" in result.output
    assert "\nsmoke\t" in result.output and "Smoke test of the A/B machinery" in result.output
    # a registered study is listed as one, with its axis and points
    assert result.output.startswith("depth_cpu\tstudy of model.max_iter at 2, 4, 8: one comparison each ")
    assert "\nsmoke_study\tstudy of model.max_iter at 1, 2" in result.output


def test_ab_without_a_name_shows_its_verbs_and_how_to_find_a_comparison():
    result = runner.invoke(app, ["ab"])
    assert result.exit_code == 2 and "dormouse ab list" in result.output
    assert all(verb in result.output for verb in ("run", "plan", "status", "design", "publish", "carry", "rerun"))


@pytest.mark.parametrize(("args", "said"), [
    (["smoke", "--plan"], "--plan is not an option of dormouse ab: ask `dormouse ab plan smoke`"),
    (["smoke", "--status"], "--status is not an option of dormouse ab: ask `dormouse ab status smoke`"),
    (["smoke", "train.steps=4", "--design"],
     "--design is not an option of dormouse ab: ask `dormouse ab design smoke`"),
    (["--list"], "--list is not an option of dormouse ab: ask `dormouse ab list`"),
    (["--jobs", "2", "smoke", "--status"], "--status is not an option of dormouse ab: ask `dormouse ab status smoke`"),
])
def test_a_question_asked_as_a_flag_is_refused_naming_its_verb(args: list[str], said: str, tmp_path: Path):
    result = runner.invoke(app, ["ab", *args, "--root", str(tmp_path / "ab")])
    assert (result.exit_code, result.stderr) == (2, f"error: {said}\n")
    assert not (tmp_path / "ab").exists()


def _verbs() -> set[str]:
    return set(typer.main.get_command(ab_app).commands)


def test_no_registered_comparison_is_named_like_a_verb():
    """`dormouse ab NAME` runs NAME only when NAME is no verb; `dormouse ab run NAME` reaches any."""
    assert not _verbs() & set(list_comparisons()), _verbs() & set(list_comparisons())


def _mine(name: str = "mine") -> str:
    return registration(name, ("rezero", "gr"), looks="[2]", aa_arm=None,
                        description="two arms, two replicates, four steps",
                        fixed="[preset=tiny, train.steps=4, train.eval_every=4, data.eval_bytes=256, "
                              "logging.progress=off, train.device=cpu]")


def test_a_comparison_named_like_a_verb_is_run_by_the_run_verb(tmp_path: Path):
    spec = tmp_path / "status.yaml"  # named `status`: `dormouse ab status ...` asks the verb
    spec.write_text(_mine("status"))
    result = runner.invoke(app, ["ab", "run", str(spec), "--root", str(tmp_path / "ab"), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ab" / "status" / "report.md").is_file()
    result = runner.invoke(app, ["ab", "status", str(spec), "--root", str(tmp_path / "ab")])
    assert result.exit_code == 0 and "gr" in result.output, result.output


@pytest.mark.parametrize("options_first", [False, True], ids=["name-then-options", "options-then-name"])
def test_ab_runs_a_registration_file_given_by_path(tmp_path: Path, options_first: bool):
    spec = tmp_path / "mine.yaml"
    spec.write_text(_mine())
    root = ["--root", str(tmp_path / "ab")]
    result = runner.invoke(app, ["ab", *root, str(spec)] if options_first else ["ab", str(spec), *root])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ab" / "mine" / "report.md").is_file()


def test_shell_completion_is_installable_and_completes_commands_and_options():
    env = {**os.environ, "_DORMOUSE_COMPLETE": "complete_bash", "COMP_WORDS": "dormouse sample x --de",
           "COMP_CWORD": "3"}
    cmd = [sys.executable, "-c", "from dormouse.cli.app import main; main()"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["--depth", "--device"], done.stdout + done.stderr
    # Typer detects the shell from the process tree (shellingham), which fails under nohup or a detached CI
    # runner ("Shell  not supported"); with detection disabled --show-completion takes the shell by name.
    shell_env = {k: v for k, v in os.environ.items() if not k.startswith("_DORMOUSE")}
    shell_env["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"
    shown = subprocess.run([*cmd, "--show-completion", "bash"], capture_output=True, text=True, timeout=60,
                           env=shell_env)
    assert shown.returncode == 0 and "_dormouse_completion" in shown.stdout, shown.stderr
