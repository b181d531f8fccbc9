"""The comparison lock: a live holder is named and refused, a dead holder's lock is taken over with a
message, a released lock is neither. Holders are real processes (the kernel's flock is per process)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dormouse.run.lock import LockHeld, comparison_lock, is_locked, read_holder, run_lock

_HOLD = """
import sys, time
from pathlib import Path
from dormouse.run.lock import comparison_lock
lock = comparison_lock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(120)
"""


def _holder(comp_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(comp_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_held_by_a_live_process_is_refused_naming_its_pid_and_host(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    try:
        assert is_locked(tmp_path / "ab.lock")
        with pytest.raises(LockHeld) as info:
            comparison_lock(tmp_path).acquire()
        assert f"pid {proc.pid} on host {socket.gethostname()}" in str(info.value)
        assert info.value.holder["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_stale_lock_from_a_dead_process_is_taken_over_with_a_message(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)  # dies without releasing: its record stays in the file
    proc.wait(timeout=30)
    assert read_holder(tmp_path / "ab.lock")["pid"] == proc.pid
    assert not is_locked(tmp_path / "ab.lock")
    with comparison_lock(tmp_path) as lock:
        message = lock.stale_message()
        assert message is not None and f"pid {proc.pid}" in message and "is gone" in message
        assert read_holder(tmp_path / "ab.lock")["pid"] == os.getpid()
        assert is_locked(tmp_path / "ab.lock")
    assert read_holder(tmp_path / "ab.lock") is None  # released: empty, neither held nor stale


def test_a_second_lock_in_the_same_process_is_refused_and_a_released_one_is_not_stale(tmp_path: Path) -> None:
    with comparison_lock(tmp_path):
        with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
            comparison_lock(tmp_path).acquire()
    with comparison_lock(tmp_path) as again:
        assert again.stale_message() is None
    with run_lock(tmp_path, "gr-s1") as a:
        with pytest.raises(LockHeld, match="run gr-s1"):
            run_lock(tmp_path, "gr-s1").acquire()
        with run_lock(tmp_path, "gr-s2"):  # another run: independent
            assert a.took_over is None


def test_the_lock_holds_until_the_holder_exits_however_it_exits(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    proc.terminate()
    proc.wait(timeout=30)
    deadline = time.time() + 10
    while is_locked(tmp_path / "ab.lock") and time.time() < deadline:
        time.sleep(0.05)
    assert not is_locked(tmp_path / "ab.lock")
