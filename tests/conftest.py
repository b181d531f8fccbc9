"""Test-session setup.

Triton kernels are tested on CPU through Triton's interpreter: TRITON_INTERPRET must be set before any kernel
is defined, so it is set here, at collection time, unless a GPU is present (then the same tests run the
compiled kernels natively).

Under pytest-xdist (``addopts`` in pyproject.toml) each worker gives torch its share of the cores, so that
the workers do not oversubscribe the machine, and the tests of a module that share a module-scoped fixture
(a comparison run once, then read by each test) go to one worker, so that the fixture is built once. The
workers take the ``slow`` tests first, then the groups, then the rest (``--no-loadscope-reorder`` keeps this
order), so that the run does not end with one worker on a long test while the other idles.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    _WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, torch.get_num_threads() // _WORKERS))

SHARED_SCOPES = ("class", "module", "package")


@pytest.fixture(autouse=True)
def _plugins_forgotten_after_each_test() -> Iterator[None]:
    """A plugin a test loads (directly, or through an in-process CLI call) is forgotten when it ends. A plugin
    left loaded is part of the next test's code fingerprint in this worker, and not of the fresh processes a
    comparison starts: their runs would be refused as computed by other code, depending on test order."""
    from tests.helpers.plugin_arms import plugins_forgotten

    with plugins_forgotten():
        yield


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n logical``: one worker per CPU this process may run on, and one more where SLURM is installed: the
    cluster tests (tests/flows/test_ab_slurm.py) spend minutes waiting on SLURM's clock (a time limit is at
    least a minute) and would hold a core idle. None (0: in-process) for a pytest that a test starts from
    inside a worker, which would otherwise start its own workers on cores already taken."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return cpus + (shutil.which("sbatch") is not None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group each test that uses a fixture shared across tests with the rest of its module (``--dist
    loadgroup`` sends a group to one worker); a test that names its own group keeps it. Then the ``slow`` tests
    first, the tests of a group next, the rest last, each in collection order (every worker collects the same
    order, as xdist requires): the longest work starts while there is other work to share the cores with."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d[-1].scope in SHARED_SCOPES for d in defs if d):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # in one process (-n 0) a module's tests stay together
        items.sort(key=_start_order(items))


def _start_order(items: list[pytest.Item]) -> Callable[[pytest.Item], tuple[bool, bool]]:
    """Sort key: a ``slow`` test or a group holding one, then the other groups, then the rest."""

    def group(item: pytest.Item) -> str | None:
        mark = item.get_closest_marker("xdist_group")
        return None if mark is None else str(mark.args[0] if mark.args else mark.kwargs.get("name"))

    slow_groups = {group(i) for i in items if i.get_closest_marker("slow") is not None} - {None}
    return lambda item: (item.get_closest_marker("slow") is None and group(item) not in slow_groups,
                         group(item) is None)
