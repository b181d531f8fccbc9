"""``python -m pytest -p tests.helpers.extra_arm TESTS``: run tests with one arm more than dormouse ships.

At configuration the session loads the example plugin (docs/examples/scalar_gate.py, arm ``sgate``) as
``DORMOUSE_PLUGINS`` loads it, so the registry holds it after the built-in arms from the first test on, and
every child process a test starts loads it too. A test that reads the arm set from the registry passes
either way; one that writes the arms out (a list, an order, an eval line's counters) fails here."""

from __future__ import annotations

import os


def pytest_configure(config: object) -> None:
    # Imported here, not at the top: pytest imports a -p plugin before tests/conftest.py, which must set
    # TRITON_INTERPRET before dormouse (the arms, the kernels) is first imported; pytest_configure runs after it.
    from dormouse.arms.plugins import ENV_VAR, activate
    from dormouse.arms.registry import ARMS
    from tests.helpers.plugin_arms import EXAMPLE

    os.environ[ENV_VAR] = str(EXAMPLE)
    activate()
    assert ARMS[-1] == "sgate", ARMS
