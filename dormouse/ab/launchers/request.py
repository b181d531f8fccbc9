"""How the runs of a comparison are asked to run (``--jobs``, ``--threads``, ``--launcher``,
``launcher.KEY=VALUE``) and the one place a request becomes a launcher. :func:`resolve_launch` checks it before any
run; ``ab plan`` shows :meth:`ResolvedLaunch.settings` and a run gets :meth:`ResolvedLaunch.launcher`, both from the
same resolution, except that ``ab plan`` (``machine=False``, no torch) leaves CUDA's presence and devices to the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dormouse.ab.launchers.base import Launcher, LaunchError, Slot
from dormouse.ab.launchers.local import InProcessLauncher, ProcessLauncher, cluster_share, plan_slots, ranks_per_node
from dormouse.ab.runs.job import Run

if TYPE_CHECKING:  # only for the annotation: the cluster module (submitit) is loaded for --launcher slurm only
    from dormouse.ab.launchers.cluster import SlurmLauncherConfig

LOCAL = "local"


@dataclass
class LaunchRequest:
    """``jobs`` at once on this machine (``threads`` each, one GPU each on CUDA), or ``launcher`` ``slurm`` with
    ``launcher_overrides`` (``KEY=VALUE``, prefix stripped)."""

    jobs: int = 1
    threads: int | None = None
    launcher: str = LOCAL
    launcher_overrides: list[str] = field(default_factory=list)


def split_overrides(args: list[str]) -> tuple[list[str], list[str]]:
    """``launcher.KEY=VALUE`` arguments (the launcher's, prefix stripped) apart from the Hydra overrides."""
    launcher = [a[len("launcher."):] for a in args if a.startswith("launcher.")]
    return [a for a in args if not a.startswith("launcher.")], launcher


def config_cuda(runs: list[Run]) -> bool | None:
    """Whether the runs' config asks for CUDA (``train.device`` cuda); None when auto leaves it to the machine."""
    devices = {str(p.cfg.train.device) for p in runs}
    return True if any(d.startswith("cuda") for d in devices) else (None if "auto" in devices else False)


def uses_cuda(runs: list[Run]) -> bool:
    """Whether the runs train on CUDA (``train.device`` cuda, or auto on a machine with CUDA)."""
    import torch  # here, not at import: `dormouse ab --help`, `ab plan` and `ab status` need no torch

    asked = config_cuda(runs)
    return asked if asked is not None else torch.cuda.is_available()


@dataclass(frozen=True)
class ResolvedLaunch:
    """A checked launch request: the local slots (``jobs`` of them), or the cluster launcher's config."""

    request: LaunchRequest
    cuda: bool | None = False  # None: left to the run (``ab plan`` with train.device=auto)
    slots: tuple[Slot, ...] = ()
    cluster: SlurmLauncherConfig | None = None
    devices_at_run: bool = False  # ``ab plan``: the CUDA devices are counted when the comparison runs

    def settings(self) -> dict[str, Any]:
        """What the launcher would be, without creating one (``ab plan``)."""
        r = self.request
        if self.cluster is None:
            return {"launcher": "sequential" if r.jobs == 1 else "local-processes", "jobs": r.jobs,
                    "threads_per_pair": self.slots[0].threads if r.jobs > 1 or r.threads else "torch default",
                    "cuda_devices": self._cuda_devices()}
        c = self.cluster
        jobs, threads = cluster_share(c)
        return {"launcher": r.launcher, "jobs": jobs or c.array_parallelism, "threads_per_pair": threads,
                "cluster": c.cluster, "partition": c.partition, "time_min": c.time_min,
                "gpus_per_run": c.gpus_per_run, "cpus_per_task": c.cpus_per_task,
                **({"ranks_per_run": ranks} if (ranks := c.nodes_per_run * ranks_per_node(c)) > 1 else {})}

    def _cuda_devices(self) -> Any:
        if self.devices_at_run and self.cuda is not False:
            return "one per job, counted when the comparison runs" + (" (if train.device=auto finds CUDA)"
                                                                        if self.cuda is None else "")
        return [s.cuda_devices for s in self.slots] if self.cuda else None

    def launcher(self, comp_dir: Path, name: str) -> Launcher:
        """The launcher itself (:class:`LaunchError` when the cluster cannot be reached)."""
        if self.cluster is None:
            if self.request.jobs == 1:  # in this process: torch's own threads unless --threads says
                return InProcessLauncher(Slot(0, self.request.threads))
            return ProcessLauncher(self.slots)
        from dormouse.ab.launchers.cluster import SubmititLauncher, default_folder  # submitit is loaded for slurm only

        return SubmititLauncher(self.cluster, default_folder(comp_dir, self.cluster), f"ab-{name}", comp_dir)


def resolve_launch(request: LaunchRequest, runs: list[Run], *, machine: bool = True) -> ResolvedLaunch:
    """Check a request against the runs and this machine; :class:`LaunchError` when it cannot be honoured.
    ``machine=False`` (``ab plan``): CUDA from the runs' config alone, its devices counted when the comparison runs."""
    if request.launcher == LOCAL:
        if request.launcher_overrides:
            raise LaunchError([f"launcher overrides {request.launcher_overrides} need --launcher slurm"])
        cuda = uses_cuda(runs) if machine else config_cuda(runs)
        if cuda is False or machine:
            return ResolvedLaunch(request, cuda, tuple(plan_slots(request.jobs, cuda=bool(cuda),
                                                                  threads=request.threads)))
        placeholders = range(max(request.jobs, 0))  # one device per job: whether there are enough, the run says
        slots = plan_slots(request.jobs, cuda=True, threads=request.threads, devices=placeholders)
        return ResolvedLaunch(request, cuda, tuple(slots), devices_at_run=True)
    if request.jobs != 1 or request.threads is not None:
        raise LaunchError([f"--jobs/--threads are for the local launcher; with --launcher {request.launcher} "
                           "set launcher.array_parallelism and launcher.cpus_per_task instead"])
    from dormouse.ab.launchers.cluster import load_launcher_config  # submitit is loaded for slurm only

    return ResolvedLaunch(request, cluster=load_launcher_config(request.launcher, request.launcher_overrides))
