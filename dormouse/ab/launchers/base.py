"""The launcher seam: what every launcher takes (:class:`Job` s, each in a :class:`Slot`) and gives back
(:class:`Outcome` s), whether it runs them in this process, in worker processes (:mod:`.local`) or as cluster jobs
(:mod:`.cluster`). The runner sees only :class:`Launcher`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dormouse.errors import DormouseError

# Outcome statuses a job function returns.
DONE, FAILED, INTERRUPTED = "done", "failed", "interrupted"


class LaunchError(DormouseError, ValueError, exit_code=2):
    """A launch request that cannot be honoured (too many jobs for the devices, no SLURM, ...)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Slot:
    """What one job may use. ``threads=None`` leaves torch's default; ``cuda_devices=None`` inherits the
    parent's ``CUDA_VISIBLE_DEVICES`` (a cluster job: the scheduler set it)."""

    index: int = 0
    threads: int | None = None
    cuda_devices: tuple[int, ...] | None = None

    def describe(self) -> str:
        parts = [f"slot {self.index}"]
        if self.threads is not None:
            parts.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        if self.cuda_devices is not None:
            parts.append("CUDA " + (",".join(map(str, self.cuda_devices)) or "none"))
        return ", ".join(parts)


@dataclass
class Outcome:
    """What a job returned. ``exit_code`` is 128 + the signal for an interrupted job (130, 143, 140 SIGUSR2)."""

    key: str
    status: str  # done | failed | interrupted
    note: str = ""
    exit_code: int | None = None
    where: dict[str, Any] = field(default_factory=dict)  # host, pid, threads, CUDA devices it ran with


@dataclass
class Job:
    """``fn(*args)`` returns an :class:`Outcome` with ``key``; ``fn`` is module-level so it pickles."""

    key: str
    fn: Callable[..., Outcome]
    args: tuple[Any, ...] = ()
    # whether the job's work is already on disk: a job lost without a result after finishing it is done, not
    # waited on (read by the driver, never pickled)
    complete: Callable[[], bool] | None = None


StartFn = Callable[[str, str], None]  # (job key, where it runs)
FinishFn = Callable[[Outcome], None]


class Launcher(Protocol):
    """Runs jobs, reporting each start and outcome. Once one comes back interrupted it starts no more, lets the
    running ones checkpoint, and returns every outcome."""

    name: str

    def settings(self) -> dict[str, Any]:
        """What the report records about how the runs were run."""
        ...

    def run(self, jobs: Sequence[Job], on_start: StartFn, on_finish: FinishFn) -> list[Outcome]: ...

    def adoptable(self, keys: Sequence[str]) -> dict[str, str]:
        """The jobs among ``keys`` still running from an earlier driver, which ``run`` waits for rather than
        starting again: key -> what to say."""
        ...

    @property
    def stopped_by(self) -> int | None:
        """130/143 when a signal (Ctrl-C, SIGTERM) stopped the launch, else None."""
        ...
