"""The ways a training run ends early, shared by the loop, the run directory and the CLI."""

from __future__ import annotations


class TrainError(RuntimeError):
    """A run that cannot start or continue; the message says what and how to fix it. ``diverged``: training
    stopped on a non-finite loss, gradient or eval (``train.nonfinite=stop``), a fact the caller records
    (a comparison's tune stage counts such a run as +inf)."""

    def __init__(self, message: str, *, diverged: bool = False) -> None:
        super().__init__(message)
        self.diverged = diverged


class StartRefused(TrainError):
    """Bad input ``train`` refuses before it creates anything, as ``validate`` does (exit 2): a config that
    cannot fit in memory, wandb online without credentials, a run directory that refuses this start."""


class RunDirRefused(StartRefused):
    """The run directory refuses this start or resume (it holds another run, its checkpoint is unreadable
    or was made with another config): bad input, refused before step 0 by `train` and `validate` alike."""


class Interrupted(Exception):
    """SIGINT/SIGTERM: a checkpoint was written; ``exit_code`` is 130 or 143."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
