"""Config composition and validation: every bad value is refused before any work, naming the field."""

from __future__ import annotations

import dataclasses
import importlib.resources
import zipfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.config.schema import ConfigError, DormouseConfig, compose_config, load_config, validate

runner = CliRunner()


def run_cli(*args: str):
    return runner.invoke(app, list(args))


BAD_INPUTS = [
    (["model.use_attnres=true", "model.use_gr=true"], ["model.use_attnres", "model.use_gr"]),
    (["model.max_iter=0"], ["model.max_iter=0", ">= 1"]),
    (["model.d_model=30", "model.n_heads=4"], ["model.n_heads=4", "model.d_model=30"]),
    (["train.lr=0"], ["train.lr=0", "> 0"]),
    (["train.lr=-1e-3"], ["train.lr=-0.001"]),
    (["train.steps=0"], ["train.steps=0"]),
    (["train.batch_size=-2"], ["train.batch_size=-2"]),
    (["data.seq_len=0"], ["data.seq_len=0"]),
    (["train.eval_every=0"], ["train.eval_every=0"]),
    (["train.device=tpu"], ["train.device='tpu'", "auto, cpu, cuda"]),
    (["data.path=/no/such/corpus"], ["data.path='/no/such/corpus'", "no such file"]),
    (["model.attnres.block_size=2"], ["model.attnres.block_size=2", "model.use_attnres=false"]),
    (["model.use_attnres=true", "model.attnres.block_size=0"], ["model.attnres.block_size=0"]),
    (["model.use_attnres=true", "model.attnres.block_size=2", "model.attnres.query=input"],
     ["model.attnres.query=input", "block_size"]),
    (["model.kernel=cuda"], ["model.kernel='cuda'"]),
    (["model.use_attnres=true", "model.attnres.query=input", "model.kernel=triton"],
     ["model.kernel=triton", "model.attnres.query=input"]),
    (["logging.wandb=yes"], ["logging.wandb='yes'"]),
    (["train.beta1=1.5"], ["train.beta1=1.5", "[0, 1)"]),
    (["model.use_attnres=true", "model.attnres.eps=nan"], ["model.attnres.eps=nan", "finite"]),
    (["train.weight_decay=nan"], ["train.weight_decay=nan"]),
    (["train.grad_clip=inf"], ["train.grad_clip=inf"]),
    (["model.rope_base=0"], ["model.rope_base=0.0"]),
    (["model.kernel=triton"], ["model.kernel=triton", "model.use_attnres=false"]),
]


@pytest.mark.parametrize(("overrides", "expected"), BAD_INPUTS, ids=[" ".join(o) for o, _ in BAD_INPUTS])
def test_bad_value_is_refused_with_the_field_named_and_no_run_dir(tmp_path: Path, overrides, expected):
    result = run_cli("train", f"run.dir={tmp_path / 'runs'}", *overrides)
    assert result.exit_code == 2, result.output
    for text in expected:
        assert text in result.output, (text, result.output)
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists(), "a refused config must not create a run directory"


def test_validate_refuses_both_arms_naming_both_fields():
    result = run_cli("validate", "model.use_attnres=true", "model.use_gr=true")
    assert result.exit_code == 2
    assert "model.use_attnres" in result.output and "model.use_gr" in result.output


def test_cuda_asked_without_cuda_is_a_loud_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = run_cli("validate", "train.device=cuda")
    assert result.exit_code == 2
    assert "train.device='cuda'" in result.output and "CUDA is not available" in result.output


def test_eval_every_beyond_steps_is_accepted():
    assert validate(compose_config(["train.steps=10", "train.eval_every=100"])) == []


# Unknown keys, '+key', bad types, sweeps and missing presets: tests/config/test_overrides.py.


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(["train.lr=0", "train.steps=0", "model.max_iter=0"])
    assert len(info.value.lines) == 3


def test_validate_prints_the_resolved_config():
    result = run_cli("validate", "model.use_attnres=true", "model.attnres.block_size=2")
    assert result.exit_code == 0, result.output
    assert "use_attnres: true" in result.output and "block_size: 2" in result.output


def test_presets_and_overrides_compose():
    cpu = compose_config([])
    big = compose_config(["preset=9m", "train.steps=7"])
    assert cpu.model.d_model == 128 and big.model.d_model == 768
    assert big.train.steps == 7  # a command-line override wins over the preset
    assert compose_config(["preset=tiny"]).model.max_iter == 2


def test_help_of_every_command_shows_examples():
    for command in ("train", "validate", "ab", "logs", "sample"):
        result = run_cli(command, "--help")
        assert result.exit_code == 0
        assert "Examples" in result.output and "dormouse " + command in result.output


def test_wheel_ships_the_configs_kernels_and_corpus(tmp_path: Path):
    """`pip install .` must find Hydra's configs outside the repo: they travel inside the wheel."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(repo)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("dormouse-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("dormouse/conf/config.yaml", "dormouse/conf/preset/cpu.yaml", "dormouse/conf/preset/9m.yaml",
                     "dormouse_kernels/__init__.py", "dormouse/corpus/shakespeare.txt.gz",
                     "dormouse/corpus/PROVENANCE.json"):
        assert required in names, f"{required} missing from the wheel"
    # ... and a wheel installed elsewhere composes its configs with no repo in sight.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    probe = ("import dormouse.config.schema as c, sys; assert c.__file__.startswith(sys.argv[1]), c.__file__; "
             "cfg = c.load_config(['preset=9m']); print(cfg.model.d_model)")
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe, str(target)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "768"


def test_triton_kernel_where_it_cannot_run_is_refused_before_any_work(tmp_path: Path):
    """Without CUDA and without Triton's interpreter, model.kernel=triton is a loud exit-2 error with the fix."""
    import os
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: triton can run")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "dormouse", "train", "model.use_attnres=true", "model.kernel=triton",
                          f"run.dir={tmp_path / 'runs'}"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "model.kernel='triton'" in out.stderr and "TRITON_INTERPRET=1" in out.stderr
    assert not (tmp_path / "runs").exists()


PRESETS = ("cpu", "9m", "tiny")


def resolved_config(output: str) -> str:
    """`dormouse validate`'s YAML without the dry run's findings (the trailing ``# data: ...`` comments)."""
    return "".join(line for line in output.splitlines(keepends=True) if not line.startswith("# "))


# Keys the record lacks, each at the default that keeps the recorded behaviour (wandb as teams use it,
# gradient accumulation, the best checkpoint, HF datasets' configs and val splits, the compute dtype, what
# train.compile compiles, which changes nothing while train.compile=false, and µP's base, read only under µP).
ADDED_SINCE = {"model": {"parametrization": "standard", "mup_base_width": 64, "mup_base_head_dim": 16},
               "logging": {"wandb_entity": None, "wandb_tags": []},
               "train": {"grad_accum": 1, "keep_best": False, "dtype": "auto", "compile_scope": "regional"},
               "data": {"hf_config": None, "hf_val_split": "auto", "hf_streaming": False}}


def assert_same_values_but_new_arm_switches(got_yaml: str, recorded_yaml: str) -> None:
    """Every recorded value is unchanged; the only keys added since are switches of arms registered since
    (``model.use_<arm>: false``) and their options at their defaults (``model.<arm>``, e.g. a plugin's): the
    schema grows them per arm (dormouse.config.schema.schema), in registry order, so the text's key order is
    not the record's; and the keys of ADDED_SINCE at their defaults."""
    from dormouse.arms.registry import arm_classes, arm_switch

    got, recorded = (OmegaConf.to_container(OmegaConf.create(text)) for text in (got_yaml, recorded_yaml))
    for section, added_keys in ADDED_SINCE.items():
        assert {k: got[section].pop(k) for k in added_keys} == added_keys
    may_add = {arm_switch(a): False for a in arm_classes()}
    may_add.update({a: dataclasses.asdict(cls.options()) for a, cls in arm_classes().items() if cls.options})
    added = {k: v for k, v in got["model"].items() if k not in recorded["model"]}
    assert added == {k: may_add.get(k, "not an arm's switch or options") for k in added}, added
    got["model"] = {k: v for k, v in got["model"].items() if k not in added}
    assert got == recorded


@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_composes_to_the_config_recorded_before_defaults_moved(preset: str):
    """The schema's defaults are the CPU default and a preset holds only what differs; the composed configs
    must stay value-identical to the ones `dormouse validate preset=NAME` printed at commit ea582a6, when
    every preset repeated its values (tests/data/validate_preset_NAME.yaml, recorded then). One deliberate
    change since: the 9m preset's data.eval_bytes is 249345 (1048576 would exceed the val split, which is
    refused, never cut)."""
    expected = (Path(__file__).parents[1] / "data" / f"validate_preset_{preset}.yaml").read_text()
    result = run_cli("validate", f"preset={preset}")
    assert result.exit_code == 0, result.output
    assert_same_values_but_new_arm_switches(resolved_config(result.output), expected)


def test_the_default_is_the_cpu_preset_and_the_schema_defaults():
    expected = (Path(__file__).parents[1] / "data" / "validate_preset_cpu.yaml").read_text()
    assert_same_values_but_new_arm_switches(resolved_config(run_cli("validate").output), expected)
    assert_same_values_but_new_arm_switches(OmegaConf.to_yaml(OmegaConf.structured(DormouseConfig)), expected)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_sets_only_what_differs_from_the_schema(preset: str):

    text = (importlib.resources.files("dormouse.conf") / "preset" / f"{preset}.yaml").read_text()
    values = OmegaConf.create(text)
    schema = OmegaConf.structured(DormouseConfig)
    repeated = [f"{group}.{key}" for group, node in values.items() for key, value in node.items()
                if schema[group][key] == value]
    assert repeated == [], f"conf/preset/{preset}.yaml repeats schema defaults: {repeated}"
