"""Every `dormouse ...` command in the code blocks of the README and of docs/usage.md runs as written, at tiny size.

The rule that makes them tiny (and the only edits made to a command):

* ``train``, ``validate`` and ``ab`` get :data:`TINY` appended (a ``preset=...`` of the README's is replaced by
  ``preset=tiny``; Hydra's later value of a key wins, so ``train.steps=2000`` becomes 2); ``ab`` gets
  :data:`AB_TINY` instead (a registered comparison takes only budget overrides);
* what follows a pipe or a redirection (``| tail -3``, ``> samples.txt; head ...``) is not run;
* each command runs in a fresh folder holding the README's runs made first at tiny size (``runs/myrun``
  with ``train.keep_best=true``, ``runs/short-attnres``, ``runs/ab/smoke``) and its data (``my_corpus/``,
  ``input.txt``, ``my_saved_dataset/``), except the run a ``train`` without ``train.resume`` (or an ``ab``)
  writes, which starts absent;
* a command the README shows refused (its next line is ``error: ...`` or its comment says ``refused``)
  runs exactly as written and must exit 2; every other one must exit 0.

Skipped, each with its reason (:func:`skip_reason`): what needs the network, a GPU, a cluster, several
processes (torchrun) or changes the user's shell.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormouse.cli.app import app
from tests.helpers.plugin_arms import plugins_forgotten

README = Path(__file__).resolve().parents[2] / "README.md"
GUIDES = [README, README.parent / "docs" / "usage.md"]  # the user's door, then the commands in full
TINY = ["preset=tiny", "train.steps=2", "train.eval_every=2", "data.eval_bytes=256", "logging.progress=off"]
AB_TINY = ["train.steps=2", "train.eval_every=2"]
FIXTURE_COMPARISON = ["ab", "smoke", *AB_TINY]  # the comparison the fixture runs once, as the README writes it
RUNS = {"myrun": ["train.keep_best=true"], "short-attnres": ["model.use_attnres=true"]}
AB_READS = ("plan", "status", "list")  # `dormouse ab` verbs that write nothing: run as written
AB_NAMED = ("run", "design")  # `dormouse ab VERB NAME` verbs that write runs/ab/NAME, as `dormouse ab NAME` does
runner = CliRunner()
SUBCOMMANDS = {"train", "validate", "ab", "logs", "sample", "eval", "arms", "version", "install-completion"}


@dataclass(frozen=True)
class Example:
    file: str
    line: int
    text: str  # as the README writes it, without a leading "$ "
    refused: bool


def readme_examples() -> list[Example]:
    """The `dormouse ...` lines of the guides' ```bash blocks and indented blocks (continuations joined)."""
    return [e for guide in GUIDES for e in guide_examples(guide)]


def guide_examples(guide: Path) -> list[Example]:
    """The `dormouse ...` lines of one guide's ```bash blocks and indented blocks (continuations joined)."""
    lines = guide.read_text().splitlines()
    out: list[Example] = []
    fenced = False
    i = 0
    while i < len(lines):
        raw = lines[i]
        if raw.startswith("```"):
            fenced = not fenced and raw.strip() != "```"
            i += 1
            continue
        body = raw.strip() if fenced else (raw[4:] if raw.startswith("    ") else "")
        body = body[2:] if body.startswith("$ ") else body
        start = i
        while body.endswith("\\") and i + 1 < len(lines):
            i += 1
            body = body[:-1] + " " + lines[i].strip()
        if body.startswith("dormouse ") and body.split()[1].lstrip("-") in SUBCOMMANDS:
            after = lines[i + 1].strip() if i + 1 < len(lines) else ""
            comment = body.partition(" # ")[2]
            out.append(Example(guide.name, start + 1, body, after.startswith("error:") or "refused" in comment))
        i += 1
    return out


def skip_reason(text: str) -> str | None:
    if "hf_dataset=" in text:
        return "needs the network (a Hugging Face Hub dataset); tests/train/test_hf_datasets.py loads saved datasets"
    if "logging.wandb=online" in text:
        return "needs wandb credentials and the network; tests/flows/test_wandb_team.py fakes wandb"
    if "--install-completion" in text:
        return "changes the user's shell start-up files"
    if "--launcher slurm" in text and "launcher.cluster=local" not in text:
        return "needs a SLURM cluster; the local submitit executor runs the same jobs (tests/flows/test_ab_launch.py)"
    if "launcher.cluster=local" in text or "--jobs" in text:
        return "worker processes (each imports torch): tests/flows/test_ab_launch.py runs both launch paths"
    if re.search(r"dormouse ab (?:run |status |design )?(residual|my_comparison|depth_cpu)\b", text):
        return ("a registered comparison or study of many hours (or a placeholder file), never started here, so "
                "its `ab status` has nothing to read (exit 2); `ab plan` runs")
    return None


def command(example: Example) -> list[str]:
    words = shlex.split(example.text.partition(" # ")[0])[1:]
    for stop in ("|", ">", ";"):
        if stop in words:
            words = words[: words.index(stop)]
    sub = words[0] if words else ""
    if example.refused:  # refused before any work: run exactly as written
        return words
    if sub in ("train", "validate"):
        words = [w for w in words if not w.startswith("preset=")] + TINY
    elif sub == "ab" and len(words) > 1 and not words[1].startswith("-") and words[1] not in AB_READS:
        words += AB_TINY
    return words


def writes(words: list[str]) -> str | None:
    """The run folder a command creates (absent from its starting folder), if any."""
    if words[:1] == ["train"] and not any(w.startswith("train.resume=") for w in words):
        name = next((w.partition("=")[2] for w in words if w.startswith("run.name=")), None)
        return f"runs/{name}" if name else "runs/<new>"
    if words[:1] == ["ab"] and len(words) > 1 and not words[1].startswith("-") and words[1] not in AB_READS:
        return f"runs/ab/{words[2] if words[1] in AB_NAMED else words[1]}"
    return None


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's runs, corpora and comparison, made once at tiny size."""
    import datasets

    root = tmp_path_factory.mktemp("readme")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        (root / "my_corpus").mkdir()
        text = (Path(__file__).parents[1] / "data").glob("*.yaml")
        corpus = "\n".join(p.read_text() for p in text) * 4
        (root / "my_corpus" / "a.txt").write_text(corpus)
        (root / "input.txt").write_text(corpus)
        shutil.copytree(README.parent / "docs" / "examples", root / "docs" / "examples")  # the plugin example
        rows = corpus.splitlines()
        datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": rows}),
                              "validation": datasets.Dataset.from_dict({"text": rows[:200]})}
                             ).save_to_disk(str(root / "my_saved_dataset"))
        for name, extra in RUNS.items():
            result = runner.invoke(app, ["train", *TINY, *extra, f"run.name={name}"])
            assert result.exit_code == 0, result.output
        result = runner.invoke(app, FIXTURE_COMPARISON)
        assert result.exit_code == 0, result.output
    finally:
        os.chdir(cwd)
    return root


EXAMPLES = readme_examples()


def test_the_readme_has_examples_to_run():
    assert len(EXAMPLES) > 30 and sum(e.refused for e in EXAMPLES) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.file}:L{e.line}" for e in EXAMPLES])
def test_each_readme_example_runs_as_written(example: Example, fixtures: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch):
    reason = skip_reason(example.text)
    if reason:
        pytest.skip(reason)
    words = command(example)
    work = tmp_path / "work"
    shutil.copytree(fixtures, work)
    created = writes(words)
    # The fixture ran `ab smoke` as the README writes it, from a folder without it: the same command again
    # here is its rerun (nothing retrained), not a third and fourth tiny comparison.
    if created and (work / created).exists() and words != FIXTURE_COMPARISON:
        shutil.rmtree(work / created)
    monkeypatch.chdir(work)
    with plugins_forgotten():  # an example's --plugin arm is not a fifth arm in every later test
        result = runner.invoke(app, words)
    expected = 2 if example.refused else 0
    assert result.exit_code == expected, f"{example.file} line {example.line}: {' '.join(words)}\n{result.output}"


def test_the_readme_test_command_collects_the_suite_as_written() -> None:
    """`pytest`, bare, as the README writes it: unlike `python -m pytest` it does not put the working folder
    on sys.path, so the tests' helpers (``tests.helpers.model_hooks``, ...) must import through the project's own
    pytest settings. ``python -P -m pytest`` is the bare command's path (``-P``: no working folder on it)."""
    import subprocess
    import sys

    root = README.parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-P", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/arms/test_arms.py", "tests/flows/test_readme_examples.py"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "error" not in proc.stdout.lower().splitlines()[-1], proc.stdout[-2000:]
