"""One process composes a set of overrides once and hands out copies: a caller's edit never reaches another
caller's config, and whatever the composition read (a user's preset file, a file of ``conf/``) composes again
when it changes."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from dormouse.config.schema import compose_config, files_signature


def test_a_composed_config_is_the_callers_own_copy():
    for _ in range(2):  # the first composes, the second is the memo's: each caller edits its own
        mine = compose_config(["preset=tiny", "train.steps=7"])
        with open_dict(mine):
            mine.train.steps = 99
            mine.run.name = "edited"
    theirs = compose_config(["preset=tiny", "train.steps=7"])
    assert theirs.train.steps == 7 and theirs.run.name != "edited"
    assert OmegaConf.is_struct(theirs)


def test_an_edited_user_preset_file_composes_again(tmp_path: Path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("train:\n  steps: 3\n")
    assert compose_config([f"preset={preset}"]).train.steps == 3
    preset.write_text("train:\n  steps: 5\n")
    assert compose_config([f"preset={preset}"]).train.steps == 5


def test_the_conf_files_signature_moves_with_an_edit(tmp_path: Path):
    (tmp_path / "preset").mkdir()
    default = tmp_path / "preset" / "tiny.yaml"
    default.write_text("train:\n  steps: 3\n")
    before = files_signature([tmp_path])
    default.write_text("train:\n  steps: 30\n")
    os.utime(default, ns=(1, 1))  # a coarse clock could give the edit the same mtime: the size still moves
    assert files_signature([tmp_path]) != before
