"""Shell completion: `train`/`validate` complete config keys as ``key=``, presets after ``preset=``, booleans'
values; `ab` completes the registered comparison names. Before, only commands and options completed."""

from __future__ import annotations

import os
import subprocess
import sys

from dormouse.ab.comparison.registry import list_comparisons
from dormouse.cli.completion import complete_comparison, complete_override
from dormouse.config.overrides import available, schema_keys
from dormouse.config.schema import schema


def test_override_completion_offers_every_schema_key_as_key_equals():
    leaves, _ = schema_keys(schema())
    everything = complete_override("")
    assert set(everything) == {f"{k}=" for k in leaves} | {"preset="}
    assert complete_override("train.dt") == ["train.dtype="]
    assert complete_override("model.attnres.") == [f"{k}=" for k in leaves if k.startswith("model.attnres.")]
    assert complete_override("nonsense") == []


def test_override_completion_offers_the_preset_files_after_preset_equals():
    assert complete_override("preset=") == [f"preset={p}" for p in available("preset")]
    assert "preset=tiny" in complete_override("preset=t")
    assert complete_override("preset=zzz") == []


def test_override_completion_offers_true_false_for_a_boolean_and_nothing_for_an_open_value():
    assert complete_override("model.use_gr=") == ["model.use_gr=true", "model.use_gr=false"]
    assert complete_override("train.keep_best=f") == ["train.keep_best=false"]
    assert complete_override("train.steps=") == []


def test_ab_name_completion_offers_the_registered_comparisons():
    assert complete_comparison("") == list_comparisons()
    # a registered study completes like a comparison
    assert complete_comparison("sm") == ["smoke", "smoke_field", "smoke_flops", "smoke_robust", "smoke_study"]


def _complete(words: str) -> list[str]:
    env = {**os.environ, "_DORMOUSE_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}
    done = subprocess.run([sys.executable, "-c", "from dormouse.cli.app import main; main()"], env=env,
                          capture_output=True, text=True, timeout=60)
    return done.stdout.split()


def test_shell_completes_keys_presets_and_comparison_names_through_typer():
    assert _complete("dormouse train train.dt") == ["train.dtype="]
    assert _complete("dormouse validate preset=ti") == ["preset=tiny"]
    assert _complete("dormouse ab smo") == ["smoke", "smoke_field", "smoke_flops", "smoke_robust", "smoke_study"]
