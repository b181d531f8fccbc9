"""`dormouse sample`: bytes from a tiny trained run, at every depth, deterministic, never crashing on bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.cli.sample import Sample, SampleOptions, generate, sample_run
from dormouse.config.schema import load_config
from dormouse.train.loop import train
from dormouse.train.trained import load_model

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset (2 iterations) trained for 20 steps: enough to make the readouts differ."""
    root = tmp_path_factory.mktemp("sample")
    cfg = load_config(["preset=tiny", "train.steps=20", "train.eval_every=20", "data.eval_bytes=512",
                       f"run.dir={root}", "run.name=r", "logging.progress=off"])
    train(cfg)
    return root / "r"


def test_same_seed_same_bytes_other_seed_other_bytes(run_dir: Path):
    opts = SampleOptions(prompt="ROMEO:", n_bytes=40, temperature=1.0, seed=7)
    _, _, a = sample_run(run_dir, opts, depth="all")
    _, _, b = sample_run(run_dir, opts, depth="all")
    _, _, c = sample_run(run_dir, SampleOptions(prompt="ROMEO:", n_bytes=40, temperature=1.0, seed=8), depth="all")
    assert [s.generated for s in a] == [s.generated for s in b]
    assert [s.generated for s in a] != [s.generated for s in c]
    assert [s.depth for s in a] == [1, 2] and all(len(s.generated) == 40 for s in a)


def test_each_depth_reads_out_after_its_own_iteration(run_dir: Path):
    # Independent of the sampler: the greedy next byte at depth k is the argmax of the k-th readout of a
    # plain readouts="all" forward of the prompt.
    model, _, _ = load_model(run_dir / "checkpoints" / "step_00000020.pt")
    with torch.no_grad():  # 20 steps leave both readouts predicting spaces: make iteration 2 count
        model.arm.alpha[2:].fill_(5.0)
    prompts = ["To be, or not", "ROMEO:", "the ", "And ", "What", "\n\n", "KING HENRY", "O, "]
    expected: dict[int, list[int]] = {1: [], 2: []}
    got: dict[int, list[int]] = {1: [], 2: []}
    for prompt in prompts:
        with torch.no_grad():
            readouts = model(torch.tensor([list(prompt.encode())]), readouts="all")
        for k in (1, 2):
            expected[k].append(int(readouts[k - 1][0, -1].argmax()))
            opts = SampleOptions(prompt=prompt, n_bytes=1, temperature=0.0)
            got[k].append(generate(model, k, opts, 32).generated[0])
    assert got == expected
    assert expected[1] != expected[2], "the two readouts agree on every prompt: the test cannot tell depths apart"


def test_top_k_one_is_greedy_at_any_temperature(run_dir: Path):
    model, _, _ = load_model(run_dir / "checkpoints" / "step_00000020.pt")
    greedy = generate(model, 2, SampleOptions(prompt="A", n_bytes=20, temperature=0.0), 32)
    top1 = generate(model, 2, SampleOptions(prompt="A", n_bytes=20, temperature=5.0, top_k=1, seed=3), 32)
    assert greedy.generated == top1.generated


def test_invalid_utf8_becomes_replacement_characters():
    assert Sample(depth=1, prompt=b"x", generated=b"\xff\xfeab\xe2\x82").text == "\ufffd\ufffdab\ufffd"


def test_cli_all_depths_as_labelled_blocks_when_not_a_terminal(run_dir: Path):
    # A barely trained byte model emits invalid UTF-8 at temperature 2 (seed fixed): shown, not a crash.
    result = runner.invoke(app, ["sample", str(run_dir), "--depth", "all", "--bytes", "64", "--temperature", "2",
                                 "--seed", "1", "--prompt", "KING:"])
    assert result.exit_code == 0, result.output
    assert "=== depth 1 ===\nKING:" in result.stdout and "=== depth 2 ===\nKING:" in result.stdout
    assert "\ufffd" in result.stdout


@pytest.mark.parametrize("args,needle", [
    (["--depth", "3"], "--depth 3 is outside 1..2"),
    (["--depth", "x"], "--depth 'x' is not a number"),
    (["--temperature", "-1"], "--temperature -1.0 must be >= 0"),
    (["--top-k", "0", "--bytes", "-2"], "--bytes -2 must be >= 0; --top-k 0 must be in 1..256"),
    (["--checkpoint", "nope.pt"], "--checkpoint nope.pt: no such file"),
])
def test_bad_request_exits_2_naming_the_option(run_dir: Path, args: list[str], needle: str):
    result = runner.invoke(app, ["sample", str(run_dir), *args])
    assert result.exit_code == 2
    assert needle in " ".join(result.output.split()), result.output


def test_run_without_checkpoint_is_refused(tmp_path: Path):
    (tmp_path / "r").mkdir()
    result = runner.invoke(app, ["sample", str(tmp_path / "r")])
    assert result.exit_code == 2 and "has no checkpoint" in result.output


def test_a_prompt_of_invalid_utf8_bytes_is_sampled_not_a_traceback(run_dir: Path):
    # The shell hands Python the bytes \xff\xfe; Python decodes argv with surrogateescape. A real process,
    # so argv goes through that decoding exactly as a user's shell's would.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "dormouse", "sample", str(run_dir), "--prompt", b"\xff\xfe",
                           "--bytes", "8", "--temperature", "0"], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr
    model, _, _ = load_model(run_dir / "checkpoints" / "step_00000020.pt")
    expected = generate(model, 2, SampleOptions(prompt=b"\xff\xfe", n_bytes=8, temperature=0.0), 32)
    assert done.stdout.rstrip(b"\n").endswith(expected.text.encode("utf-8").rstrip(b"\n"))
    assert SampleOptions(prompt="\udcff\udcfe").prompt_bytes == b"\xff\xfe"  # argv's str of those bytes


def test_a_prompt_file_gives_its_bytes_and_num_samples_gives_consecutive_seeds(run_dir: Path, tmp_path: Path):
    (tmp_path / "p.bin").write_bytes(b"KING\xff:")
    result = runner.invoke(app, ["sample", str(run_dir), "--prompt-file", str(tmp_path / "p.bin"), "--bytes", "16",
                                 "--temperature", "1", "--seed", "4", "--num-samples", "2", "--depth", "1"])
    assert result.exit_code == 0, result.output
    _, _, seed4 = sample_run(run_dir, SampleOptions(prompt=b"KING\xff:", n_bytes=16, temperature=1.0, seed=4),
                             depth="1")
    _, _, seed5 = sample_run(run_dir, SampleOptions(prompt=b"KING\xff:", n_bytes=16, temperature=1.0, seed=5),
                             depth="1")
    first, second = result.stdout.split("=== depth 1, sample 2 ===\n")
    assert first.startswith("=== depth 1, sample 1 ===\n")
    assert first.endswith(seed4[0].text + "\n") and second.endswith(seed5[0].text + "\n")
    both = runner.invoke(app, ["sample", str(run_dir), "--prompt", "x", "--prompt-file", str(tmp_path / "p.bin")])
    assert both.exit_code == 2 and "choose one" in both.output


def test_the_cli_defaults_are_the_sample_options_defaults():
    import inspect

    from dormouse.cli.app import sample

    params = inspect.signature(sample).parameters
    defaults = SampleOptions()
    for cli_name, field in [("n_bytes", "n_bytes"), ("temperature", "temperature"), ("top_k", "top_k"),
                            ("seed", "seed"), ("num_samples", "num_samples")]:
        assert params[cli_name].default.default == getattr(defaults, field), cli_name


@pytest.mark.parametrize("what,needle", [
    ("checkpoint_file", "is a file, not a run directory; to sample a checkpoint file"),
    ("comparison", "is a comparison, not one run; sample one of its runs"),
    ("not_a_checkpoint", "is unreadable (UnpicklingError: Weights only load failed: Unsupported operand"),
])
def test_a_path_that_is_not_a_run_is_refused_saying_what_it_is(run_dir: Path, tmp_path: Path, what: str,
                                                                needle: str):
    ckpt = run_dir / "checkpoints" / "step_00000020.pt"
    if what == "checkpoint_file":
        args = [str(ckpt)]
    elif what == "comparison":
        (tmp_path / "registration.json").write_text("{}")
        args = [str(tmp_path)]
    else:
        (tmp_path / "notes.txt").write_text("not a checkpoint\n" * 50)
        args = [str(run_dir), "--checkpoint", str(tmp_path / "notes.txt")]
    result = runner.invoke(app, ["sample", *args])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert needle in text, text
    assert "weights_only" not in text and len(text) < 400, text


class _Recorder:
    """A text stream that records every flush: what had been written by then."""

    def __init__(self) -> None:
        self.text = ""
        self.flushed: list[str] = []

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        self.flushed.append(self.text)


def test_one_sample_streams_each_byte_as_it_is_generated_flushed(run_dir: Path):
    """One sample is written as it is drawn, so `sample --bytes 100000` is not minutes of nothing."""
    opts = SampleOptions(prompt="ROMEO:", n_bytes=30, temperature=0.0)
    out = _Recorder()
    _, _, (one,) = sample_run(run_dir, opts, stream=out)
    assert out.text == "ROMEO:" + one.text + "\n"
    # the prompt, then one flush per generated byte that completes a character (greedy here: ASCII or U+FFFD)
    assert len(out.flushed) >= 1 + len(one.text) and out.flushed[0] == "ROMEO:"
    assert one == sample_run(run_dir, opts)[2][0]  # streaming does not change the bytes


def test_streamed_text_decodes_split_and_invalid_utf8_like_the_whole_sample():
    from dormouse.cli.sample import TextStream

    out = _Recorder()
    stream = TextStream(out)
    data = "é€".encode() + b"\xff" + b"a"
    for i in range(len(data)):
        stream.write(data[i:i + 1])
    stream.close()
    assert out.text == data.decode("utf-8", errors="replace") + "\n"
    assert out.flushed[0] == "é"  # a two-byte character appears when its second byte arrives, not before


def test_the_cli_streams_one_sample_and_prints_the_same_text(run_dir: Path):
    result = runner.invoke(app, ["sample", str(run_dir), "--prompt", "ROMEO:", "--bytes", "20", "--temperature",
                                 "0"])
    assert result.exit_code == 0, result.output
    _, _, (one,) = sample_run(run_dir, SampleOptions(prompt="ROMEO:", n_bytes=20, temperature=0.0))
    assert result.stdout == "ROMEO:" + one.text + "\n"


@pytest.mark.parametrize("command", [["eval"], ["sample", "--bytes", "4", "--temperature", "0"]])
def test_eval_and_sample_print_the_models_parameter_counts_as_train_does(run_dir: Path, command: list[str]):
    """A user checks that the checkpoint is the model they built: the counts its run recorded, as train prints."""
    counts = json.loads((run_dir / "provenance.json").read_text())
    result = runner.invoke(app, [command[0], str(run_dir), *command[1:]])
    assert result.exit_code == 0, result.output
    assert f"params={counts['params']:,} arm_params={counts['arm_params']:,}" in result.output, result.output
