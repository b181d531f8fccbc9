"""An advisory lock naming its holder (pid, host, start, command): one process at a time per comparison, run or
run. It is ``flock`` on a file, released by the kernel whenever the holder dies (content without a flock is a
stale lock, taken over); per open file description, and across NFS nodes."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from dormouse.errors import DormouseError
from dormouse.run.files import ComparisonFiles

# What a refused process is told to do when the lock's user says nothing more specific.
DEFAULT_ADVICE = "wait for it to finish, or stop it and rerun"


class LockHeld(DormouseError, RuntimeError, exit_code=2):
    """Another live process holds the lock; ``holder`` is what it wrote; ``advice`` says what to do."""

    def __init__(self, path: Path, what: str, holder: dict[str, Any], advice: str = DEFAULT_ADVICE) -> None:
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        super().__init__(
            f"{what} is in use by another process (pid {pid} on host {host}, started "
            f"{holder.get('started', '?')}: {holder.get('command', '?')}; lock {path}); {advice}")
        self.holder = holder


@dataclass
class Holder:
    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def me(cls) -> Holder:
        return cls(os.getpid(), socket.gethostname(), datetime.now().isoformat(timespec="seconds"),
                   " ".join(sys.argv))


def read_holder(path: Path) -> dict[str, Any] | None:
    """What the lock file says (read-only: ``ab status`` uses it); None when absent or unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None


def is_locked(path: Path) -> bool:
    """Whether a live process holds the lock at ``path`` (a shared probe: it never takes the lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared probe lock, if it was granted
    return False


class HolderLock:
    """``with HolderLock(path, what)``: :class:`LockHeld` while a live process holds it; ``took_over``."""

    def __init__(self, path: Path, what: str, advice: str = DEFAULT_ADVICE,
                 where_to_move: str = "the directory") -> None:
        self.path = Path(path)
        self.what = what  # "comparison DIR", "run NAME", "run DIR": for messages
        self.advice = advice  # the refusal's last clause: what the refused user can do
        self.where_to_move = where_to_move  # what to put on a lock-capable filesystem when flock is missing
        self.took_over: dict[str, Any] | None = None
        self._fd: int | None = None

    def acquire(self) -> HolderLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(self.path, self.what, read_holder(self.path) or {}, self.advice) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise OSError(exc.errno, f"cannot lock {self.path}: the filesystem does not support flock "
                                         f"({exc.strerror}); put {self.where_to_move} on a local or "
                                         "lock-capable filesystem") from exc
            raise
        # Granted: any content left in the file is a previous holder that died without releasing it.
        self.took_over = read_holder(self.path)
        me = Holder.me()
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me.__dict__) + "\n").encode("utf-8"), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # an empty file is "free", not stale
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def stale_message(self) -> str | None:
        """The line to show when a stale lock was taken over, else None."""
        h = self.took_over
        if not h:
            return None
        return (f"took over a stale lock on {self.what} ({self.path}): its holder (pid {h.get('pid', '?')} on host "
                f"{h.get('host', '?')}, started {h.get('started', '?')}) is gone without releasing it")

    def __enter__(self) -> HolderLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


# One `dormouse ab` per comparison directory, one process per run: two drivers would train a run twice, and a
# restart deletes a run's folder under the other's run; the run lock lets `ab status` tell a running run from
# an abandoned one on any host.
COMPARISON_ADVICE = ("wait for it to finish, or stop it (Ctrl-C checkpoints its runs in progress) and rerun; "
                     "`dormouse ab status NAME` is safe meanwhile")
_WHERE = "the comparison (--root)"


def comparison_lock(comp_dir: Path) -> HolderLock:
    return HolderLock(ComparisonFiles(Path(comp_dir)).lock, f"comparison {Path(comp_dir)}", COMPARISON_ADVICE,
                      _WHERE)


def run_lock(comp_dir: Path, run: str) -> HolderLock:
    """A run's lock, held by the process that trains it, so an orphaned job and a new driver's job never train the
    same run at once."""
    return HolderLock(ComparisonFiles(Path(comp_dir)).run_lock(run), f"run {run}", COMPARISON_ADVICE, _WHERE)
