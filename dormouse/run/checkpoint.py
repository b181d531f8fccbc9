"""Checkpoints: atomic writes, the newest readable one, nothing lost to a kill or a full disk. Each is one
``torch.save`` of plain values (loads with ``weights_only=True``) at ``checkpoints/step_XXXXXXXX.pt``, written
to a temporary file, fsynced and renamed; an older one goes only after a newer is on disk."""

from __future__ import annotations

import io
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from dormouse.errors import DormouseError

_NAME = re.compile(r"^step_(\d{8})\.pt$")


class CheckpointError(DormouseError, RuntimeError, exit_code=1):
    """A checkpoint could not be written or no readable one exists."""


def checkpoint_path(ckpt_dir: Path, step: int) -> Path:
    return ckpt_dir / f"step_{step:08d}.pt"


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Checkpoint files, oldest first (by the step in the name)."""
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def atomic_save(obj: dict[str, Any], path: Path) -> None:
    """``torch.save`` ``obj`` to ``path`` atomically; on failure the previous file at ``path`` is untouched."""
    import torch  # only a checkpoint's bytes need torch: the files, names and text writes here do not

    try:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        atomic_save_bytes(buffer.getvalue(), path)
    except OSError as exc:
        raise CheckpointError(
            f"could not write checkpoint {path}: {exc.strerror or exc} — free disk space or fix the run "
            f"directory's permissions; {left_intact(path)}"
        ) from exc


def left_intact(path: Path) -> str:
    """What a failed atomic write of ``path`` left: the file it would replace, the newest checkpoint, or none."""
    if path.exists():
        return f"the previous {path.name} is intact"
    earlier = list_checkpoints(path.parent)
    if earlier:
        return f"the previous checkpoint {earlier[-1]} is intact"
    return "no checkpoint was written before it, so none is left to resume from"


def atomic_write_text(path: Path, text: str) -> None:
    """A text file (config, provenance, a report) written whole or not at all."""
    atomic_save_bytes(text.encode(), path)


def _current_umask() -> int:
    """The process umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode_for(path: Path) -> int:
    """The mode ``open(path, "w")`` would leave (``mkstemp`` makes 0600, which would make shared reports private)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_current_umask()


def atomic_save_bytes(data: bytes, path: Path) -> None:
    """Write to a temporary file beside ``path``, fsync, rename over it, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = file_mode_for(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)  # the rename itself must reach the disk
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        Path(tmp_name).unlink(missing_ok=True)
        if exc.filename is None:  # a write to the open file names none: say which file could not be written
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def save_checkpoint(obj: dict[str, Any], ckpt_dir: Path, step: int, keep: int) -> Path:
    """Write step ``step``'s checkpoint, then drop later steps' files and all but the newest ``keep``."""
    path = checkpoint_path(ckpt_dir, step)
    atomic_save(obj, path)
    current = [p for p in list_checkpoints(ckpt_dir) if int(p.stem.split("_")[1]) <= step]
    stale = [p for p in list_checkpoints(ckpt_dir) if int(p.stem.split("_")[1]) > step]
    for old in stale + current[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load one checkpoint (``weights_only=True``); a truncated or corrupt file is a CheckpointError."""
    import torch  # only a checkpoint's bytes need torch: the files, names and text writes here do not

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, bad pickle, wrong type: all mean "unreadable"
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(exc).__name__}: "
                              f"{_short_reason(str(exc))})") from exc


def _short_reason(message: str) -> str:
    """torch.load's reason without its weights_only advice: the first sentence and the unpickler's finding."""
    first = message.strip().split(". ")[0].splitlines()[0] if message.strip() else "unreadable"
    _, found, rest = message.partition("WeightsUnpickler error:")
    detail = next((line.strip() for line in rest.splitlines() if line.strip()), "") if found else ""
    return f"{first}: {detail}" if detail else first[:200]


def load_newest(ckpt_dir: Path, warn: Any = print) -> tuple[Path, dict[str, Any]] | None:
    """The newest readable checkpoint; each unreadable newer one is reported by path and skipped."""
    for path in reversed(list_checkpoints(ckpt_dir)):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as exc:
            warn(f"warn {exc}; falling back to the previous checkpoint")
    return None
