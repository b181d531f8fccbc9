"""One ``dormouse ab`` per comparison directory: an advisory lock with the holder's name on it.

Two processes running the same comparison would train the same pair twice, and the runner deletes a
pair's folder before it restarts it, so one would delete the other's run. The lock is the kernel's
``flock`` on ``<comparison>/ab.lock`` (dormouse.runfiles names the files): the kernel releases it when
its holder dies, however it dies (Ctrl-C, SIGKILL, the OOM killer), so a lock can never be held by a
dead process. The file's *content*
names the holder (pid, host, start time, command) for the refusal message. Content left behind with no
flock on it is a stale lock: the previous holder died without cleaning up; it is taken over, and the
caller is told whose it was.

Each pair has a lock of its own too (:func:`pair_lock`), held by whichever process trains the pair, so
``--status`` can tell a running pair from an abandoned one on any host, and an orphaned cluster job can
never train a pair beside a new driver's job.

``flock`` is per open file description, so a second :class:`HolderLock` in the same process is
refused like another process would be. On a shared filesystem (a SLURM cluster's home or scratch) the
Linux NFS client implements ``flock`` with NFS byte-range locks, so drivers on two login nodes exclude
each other as well; a filesystem without lock support makes :meth:`acquire` fail loudly, never pretend.
"""

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

from dormouse.runfiles import ComparisonFiles


class LockHeld(RuntimeError):
    """Another live process holds the comparison's lock; ``holder`` is what it wrote."""

    def __init__(self, path: Path, what: str, holder: dict[str, Any]) -> None:
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        super().__init__(
            f"{what} is in use by another process (pid {pid} on host {host}, started "
            f"{holder.get('started', '?')}: {holder.get('command', '?')}; lock {path}); wait for it to "
            "finish, or stop it (Ctrl-C checkpoints its running pairs) and rerun; `dormouse ab NAME --status` "
            "is safe meanwhile")
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
    """What the lock file says (read-only: ``--status`` uses it); None when absent or unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None


def is_locked(path: Path) -> bool:
    """Whether a live process holds the lock at ``path`` (a shared probe: it never takes the lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared probe lock, if it was granted
    return False


class HolderLock:
    """``with HolderLock(path) as lock:`` — refused with :class:`LockHeld` while another live process
    holds it; ``lock.took_over`` is the stale holder's record when one was taken over."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = Path(path)
        self.what = what  # "comparison" or "pair NAME": for messages
        self.took_over: dict[str, Any] | None = None
        self._fd: int | None = None

    def acquire(self) -> HolderLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(self.path, self.what, read_holder(self.path) or {}) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise OSError(exc.errno, f"cannot lock {self.path}: the filesystem does not support flock "
                                         f"({exc.strerror}); put the comparison (--root) on a local or "
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


def comparison_lock(comp_dir: Path) -> HolderLock:
    """The driver's lock: one `dormouse ab` per comparison directory."""
    return HolderLock(ComparisonFiles(Path(comp_dir)).lock, f"comparison {Path(comp_dir)}")


def pair_lock(comp_dir: Path, pair: str) -> HolderLock:
    """A pair's lock, held by the process that trains it (in-process, a worker or a cluster job): a
    job left running by a dead driver and a new driver's job can never train the same pair at once."""
    return HolderLock(ComparisonFiles(Path(comp_dir)).pair_lock(pair), f"pair {pair}")
