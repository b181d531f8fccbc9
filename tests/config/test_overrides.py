"""Overrides are refused in dormouse's words: one line each, no Hydra advice that dormouse contradicts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dormouse.arms.registry import arm_classes
from dormouse.cli.app import app
from dormouse.config.overrides import check_overrides, did_you_mean, schema_keys
from dormouse.config.schema import DormouseConfig

runner = CliRunner()

# Hydra's own text that must never reach the user: advice dormouse refuses, templates, internals.
HYDRA_TEXT = ("To append", "$VALUE", "--multirun", "search path", "provider=", "full_key", "Exception")


def refused(*overrides: str) -> str:
    result = runner.invoke(app, ["validate", *overrides])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == len(overrides), result.output  # one line per bad override
    for text in HYDRA_TEXT:
        assert text not in result.output, (text, result.output)
    return " ".join(result.output.split())


def test_unknown_key_offers_the_closest_valid_key_and_no_plus():
    out = refused("model.use_atnres=true")
    assert "'model.use_atnres' is not in dormouse's config" in out
    assert "did you mean model.use_attnres?" in out and "+model" not in out


def test_unknown_key_under_the_wrong_group_is_matched_by_its_leaf_name():
    assert "did you mean model.use_attnres" in refused("train.use_attnres=true")  # first (a plugin's use_* may follow)


def test_unknown_key_with_no_near_key_points_to_validate():
    out = refused("colour=blue")
    assert "'colour' is not in dormouse's config" in out and "dormouse validate" in out


def test_adding_an_unknown_key_is_refused_with_a_suggestion():
    out = refused("+model.use_atnres=true")
    assert "adds a key" in out and "did you mean model.use_attnres?" in out


def test_adding_an_existing_key_says_to_drop_the_plus():
    assert "set it without the '+': model.use_attnres=true" in refused("+model.use_attnres=true")


def test_bad_type_names_the_field_the_value_and_the_type():
    assert "model.d_model=abc is invalid: model.d_model takes an integer" in refused("model.d_model=abc")
    assert "model.use_gr=maybe is invalid: model.use_gr takes true or false" in refused("model.use_gr=maybe")
    assert "model.attnres.block_size=x is invalid: model.attnres.block_size takes an integer or null" in \
        refused("model.attnres.block_size=x")


def test_comma_value_is_one_config_not_a_sweep():
    out = refused("model.d_model=64,128")
    assert "gives several values" in out and "model.d_model='a,b'" in out and "dormouse ab" in out


def test_missing_preset_lists_the_available_presets():
    out = refused("preset=gpu")
    assert "preset=gpu: no such preset; available: 9m, cpu, tiny" in out


def test_deleting_a_key_and_a_bare_key_are_refused():
    assert "deletes a key" in refused("~model.d_model")
    assert "is not key=value" in refused("model.d_model")


def test_a_group_is_not_a_value():
    assert "model is a group of settings" in refused("model=3")


def test_every_bad_override_is_reported_at_once():
    refused("model.use_atnres=true", "preset=gpu", "train.lr=fast")


def test_valid_overrides_pass_the_check():
    assert check_overrides(["model.use_attnres=true", "model.attnres.block_size=null", "preset=9m",
                            "train.lr=1", "data.path='a,b.txt'", "model.use_gr=yes"], DormouseConfig) == []


def test_schema_keys_cover_nested_fields():
    leaves, nodes = schema_keys(DormouseConfig)
    assert "model.attnres.block_size" in leaves and "train.steps" in leaves
    arm_options = [f"model.{name}" for name, cls in arm_classes().items() if cls.options]  # attnres, a plugin's
    assert "model.attnres" in arm_options
    assert nodes == ["model", *arm_options, "data", "train", "logging", "run"]
    assert did_you_mean("modl.d_model", leaves) == ["model.d_model"]


@pytest.mark.parametrize("override", ["train.stepz=3", "data.seqlen=64", "model.attnres.blok_size=2"])
def test_one_typo_is_recovered(override: str):
    assert "did you mean" in refused(override)


def test_a_value_the_grammar_takes_only_quoted_says_how_to_quote_it():
    out = refused("run.name=ромео_éè")
    assert "is not key=value" not in out
    assert "quote the value (run.name='ромео_éè')" in out and "\"run.name='ромео_éè'\"" in out
    assert check_overrides(["run.name='ромео_éè'"], DormouseConfig) == []  # the quoted form is taken
    assert "is not key=value" in refused("model.d_model")  # no '=': quoting is not the fix
