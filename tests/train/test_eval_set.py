"""The eval set: eval reads the validation split and only it, and
asks for no more than the val split holds.

Gate 6 plants two corpora whose train halves are identical and whose val halves differ: every train byte is
'A'; one val half is 'A' too, the other 'B'. Training never sees the val half, so both runs train
bit-identically (same losses); a model that has only ever seen 'A' predicts 'A' almost surely, so the bpb of
the val half that repeats the train half is near 0 and the bpb of the 'B' half is several bits. An eval that
read the train split (or a split that trained on the tail) would make the two runs agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dormouse.ab.comparison.registry import ComparisonError, load_spec
from dormouse.ab.comparison.runner import plan_runs
from dormouse.config.schema import DataConfig, load_config
from dormouse.data import DataError
from dormouse.train.batches import load_corpus
from dormouse.train.loop import train

N_TRAIN, N_VAL = 3000, 1000  # val_fraction 0.25 of 4000 bytes: the last 1000 bytes are val


def _run(tmp_path: Path, name: str, val_byte: bytes) -> dict:
    corpus = tmp_path / f"{name}.txt"
    corpus.write_bytes(b"A" * N_TRAIN + val_byte * N_VAL)
    cfg = load_config(["preset=tiny", "train.steps=20", "train.eval_every=20", "train.lr=1e-2",
                       f"data.path={corpus}", "data.val_fraction=0.25", f"data.eval_bytes={N_VAL}",
                       "train.device=cpu", "logging.progress=off", f"run.dir={tmp_path}", f"run.name={name}"])
    result = train(cfg)
    return {"losses": result.losses, "bpb": result.metrics[-1]["bpb"]}


def test_eval_reads_the_val_split_and_training_never_does(tmp_path: Path) -> None:
    same = _run(tmp_path, "val_like_train", b"A")
    other = _run(tmp_path, "val_unlike_train", b"B")
    # Training reads the train half only, which the two corpora share byte for byte.
    assert same["losses"] == other["losses"], "the training losses differ: training read the val half"
    # 20 steps at lr 1e-2 on a constant stream: P('A' | 'A...') ~ 0.96, measured 0.054 bpb.
    assert same["bpb"] < 1.0, f"val half = train half, yet bpb (deviation={same['bpb']:.3f} bound=1.0)"
    # The 'B' val half: bytes this model never saw as targets; measured 7.5 bpb. An eval reading the train
    # split scores both runs on the same 'A' bytes: a gap of exactly 0. Bound: half the uniform 8 bits.
    gap = other["bpb"] - same["bpb"]
    assert gap > 4.0, (f"the val halves differ ('A' vs 'B') but bpb moved by {gap:.3f} "
                       f"(deviation={gap:.3e} bound=>4.0): eval did not read the val split")


def _cfg(eval_bytes: int, path: Path) -> DataConfig:
    return DataConfig(path=str(path), seq_len=8, val_fraction=0.25, eval_bytes=eval_bytes)


def test_eval_bytes_larger_than_the_val_split_is_refused_naming_it(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"x" * 4000)
    assert load_corpus(_cfg(N_VAL, corpus)).val.numel() == N_VAL  # exactly the val split: accepted
    with pytest.raises(DataError) as err:
        load_corpus(_cfg(N_VAL + 1, corpus))
    msg = str(err.value)
    assert "data.eval_bytes=1001" in msg and "1000 bytes" in msg and "data.val_fraction" in msg, msg


def test_a_registered_comparison_that_asks_for_more_eval_than_val_is_refused_before_any_run(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "big.yaml").write_text(
        "name: big\nbaseline: a\nmin_effect: 0.01\nseeds: [1, 2]\n"
        "fixed: [preset=tiny, data.eval_bytes=1048576]\narms:\n  a: []\n  b: [model.use_gr=true]\n")
    with pytest.raises(ComparisonError) as err:
        plan_runs(load_spec("big", registry=reg), [], tmp_path / "never")
    assert "data.eval_bytes=1048576 is larger than the val split" in str(err.value)
    assert not (tmp_path / "never").exists()
    # The shipped registration asks for what the embedded corpus's val split holds (it asked for 1 MiB).
    plan_runs(load_spec("residual"), [], tmp_path / "never")


def test_the_default_eval_size_fits_a_short_val_split_and_says_so_but_an_explicit_one_is_never_cut(
        tmp_path: Path) -> None:
    # nanoGPT's tiny Shakespeare: 1,115,394 bytes, so a 55,769-byte val split at the default val_fraction,
    # shorter than 65,536 (DEFAULT_EVAL_BYTES), so the default fits itself to the split.
    import json

    from dormouse.train.batches import eval_windows

    corpus = tmp_path / "input.txt"
    corpus.write_bytes((b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20000)[:1115394])
    cfg = load_config(["preset=cpu", f"data.path={corpus}"])
    assert cfg.data.eval_bytes is None
    loaded = load_corpus(cfg.data)
    assert loaded.val.numel() == 55769
    x, _ = eval_windows(loaded.val, seq_len=128, eval_bytes=None)
    assert x.shape[0] == (55769 - 1) // 128  # the whole val split, in whole windows
    with pytest.raises(DataError, match="data.eval_bytes=65536 is larger than the val split"):
        load_corpus(DataConfig(path=str(corpus), eval_bytes=65536))
    run = train(load_config(["preset=tiny", f"data.path={corpus}", "data.eval_bytes=null", "train.steps=2",
                             "train.eval_every=2", "logging.progress=off", f"run.dir={tmp_path}", "run.name=r"]))
    provenance = json.loads((run.run_dir / "provenance.json").read_text())
    assert provenance["eval_bytes"] == 55769
    assert provenance["eval_bytes_from"] == "data.eval_bytes=null: min(65536, the val split)"
