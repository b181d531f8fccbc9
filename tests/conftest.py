"""Test-session setup.

Triton kernels are tested on CPU through Triton's interpreter: TRITON_INTERPRET must be set before any kernel
is defined, so it is set here, at collection time, unless a GPU is present (then the same tests run the
compiled kernels natively).

Under pytest-xdist (``addopts`` in pyproject.toml) each worker gives torch its share of the cores, so that
the workers do not oversubscribe the machine, and the tests of a module that share a module-scoped fixture
(a comparison run once, then read by each test) go to one worker, so that the fixture is built once.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    _WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, torch.get_num_threads() // _WORKERS))

SHARED_SCOPES = ("class", "module", "package")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n logical``: one worker per CPU this process may run on; none (0: in-process) for a pytest that a test
    starts from inside a worker, which would otherwise start its own workers on cores already taken."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return 0
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group each test that uses a fixture shared across tests with the rest of its module (``--dist
    loadgroup`` sends a group to one worker); a test that names its own group keeps it."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d[-1].scope in SHARED_SCOPES for d in defs if d):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
