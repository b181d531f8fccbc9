"""Hugging Face datasets as people use them: a config name, the dataset's own validation split, folders
saved by ``save_to_disk``; streaming is refused. No network: datasets saved to a local folder, and
monkeypatched loaders for the Hub."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import datasets
import pytest
from typer.testing import CliRunner

from dormouse.cli.app import app
from dormouse.config.schema import DataConfig
from dormouse.data import DataError
from dormouse.train.batches import load_corpus

TRAIN = [f"train row {i} " + "t" * 30 for i in range(40)]
VALID = [f"valid row {i} " + "v" * 30 for i in range(10)]


def _cfg(**kw: object) -> DataConfig:
    return replace(DataConfig(seq_len=8, val_fraction=0.25, eval_bytes=9), **kw)


def _text(tensor) -> str:
    return tensor.numpy().tobytes().decode("utf-8")


@pytest.fixture
def saved_dict(tmp_path: Path) -> Path:
    folder = tmp_path / "saved_dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": TRAIN}),
                          "validation": datasets.Dataset.from_dict({"text": VALID})}).save_to_disk(str(folder))
    return folder


def test_a_saved_dataset_folder_uses_its_own_validation_split_and_says_so(saved_dict: Path):
    corpus = load_corpus(_cfg(path=str(saved_dict)))
    assert _text(corpus.train) == "\n".join(TRAIN) and _text(corpus.val) == "\n".join(VALID)
    assert "val split: the dataset's own 'validation' split (10 rows)" in corpus.source


def test_hf_val_split_tail_takes_the_tail_of_train_even_when_validation_exists(saved_dict: Path):
    corpus = load_corpus(_cfg(path=str(saved_dict), hf_val_split="tail"))
    assert _text(corpus.train) + _text(corpus.val) == "\n".join(TRAIN)
    assert "val split: the last" in corpus.source and "train stream" in corpus.source


def test_a_saved_single_dataset_takes_the_tail_of_its_rows(tmp_path: Path):
    folder = tmp_path / "saved_one"
    datasets.Dataset.from_dict({"text": TRAIN}).save_to_disk(str(folder))
    corpus = load_corpus(_cfg(path=str(folder)))
    assert _text(corpus.train) + _text(corpus.val) == "\n".join(TRAIN)
    assert corpus.source.startswith(f"hf:{folder} (split train, field text, 40 rows)")


def test_a_val_split_the_dataset_lacks_is_refused_naming_the_splits(saved_dict: Path):
    with pytest.raises(DataError, match=r"data.hf_val_split='test'.*splits: train, validation"):
        load_corpus(_cfg(path=str(saved_dict), hf_val_split="test"))


def test_hf_config_reaches_load_dataset_and_its_validation_split_is_used(monkeypatch: pytest.MonkeyPatch):
    calls: list[tuple] = []
    data = {"train": TRAIN, "validation": VALID}

    def fake_load(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict({"text": data[split]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    monkeypatch.setattr(datasets, "get_dataset_split_names", lambda path, name=None, **kw: ["train", "validation",
                                                                                             "test"])
    monkeypatch.setattr("dormouse.data._hub_reachable", lambda: True)
    corpus = load_corpus(_cfg(hf_dataset="Salesforce/wikitext", hf_config="wikitext-103-raw-v1"))
    assert calls == [("Salesforce/wikitext", "wikitext-103-raw-v1", "train"),
                     ("Salesforce/wikitext", "wikitext-103-raw-v1", "validation")]
    assert _text(corpus.val) == "\n".join(VALID)
    assert corpus.source.startswith("hf:Salesforce/wikitext, config wikitext-103-raw-v1 (split train")


def test_hf_options_on_a_text_source_are_refused_not_ignored(tmp_path: Path):
    text = tmp_path / "input.txt"
    text.write_text("\n".join(TRAIN))
    with pytest.raises(DataError, match="data.hf_config='wikitext-103-raw-v1' applies to a Hugging Face"):
        load_corpus(_cfg(path=str(text), hf_config="wikitext-103-raw-v1"))


def test_streaming_is_refused_before_any_work_with_the_way_out(tmp_path: Path):
    result = CliRunner().invoke(app, ["validate", "data.hf_dataset=roneneldan/TinyStories",
                                      "data.hf_streaming=true", f"run.dir={tmp_path}"])
    assert result.exit_code == 2 and "data.hf_streaming=true is not supported" in result.output
    assert "save_to_disk" in result.output


def test_validate_names_a_saved_folders_val_split(saved_dict: Path, tmp_path: Path):
    result = CliRunner().invoke(app, ["validate", "preset=tiny", f"data.path={saved_dict}", "data.seq_len=8",
                                      "data.eval_bytes=64", f"run.dir={tmp_path}"])
    assert result.exit_code == 0, result.output
    assert "the dataset's own 'validation' split" in result.output


def test_a_saved_folder_given_as_hf_dataset_loads_from_disk_too(saved_dict: Path):
    corpus = load_corpus(_cfg(hf_dataset=str(saved_dict)))
    assert _text(corpus.val) == "\n".join(VALID)
