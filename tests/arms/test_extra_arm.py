"""No test writes out the list or the order of the arms: the tests that read the arm set (counters on the eval
line, the tie rule's order, the schema's switches and options, ``dormouse arms``) pass with an arm registered
beyond the built-in ones (the example plugin, loaded before collection by tests/helpers/extra_arm.py).

Adding an arm (built-in or plugin) must keep the suite green; a test that hard-codes
``prenorm, rezero, gr, attnres`` would fail here instead of when the next arm lands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the fast tests that read the registry's arm set or order
READERS = [
    "tests/run/test_loglines.py",
    "tests/run/test_logs_format.py",
    "tests/flows/test_logs.py",
    "tests/config/test_overrides.py",
    "tests/config/test_config.py::test_the_default_is_the_cpu_preset_and_the_schema_defaults",
    "tests/ab/test_ab_verdict.py::test_each_verdict_states_what_was_tested_and_keeps_by_the_registry_order",
    "tests/arms/test_arms.py::test_selected_arm_counts_ran_equal_asked_and_others_zero",
    "tests/flows/test_arms_command.py",
]


def test_the_tests_that_read_the_arm_set_pass_with_an_extra_arm_registered():
    env = {k: v for k, v in os.environ.items() if k != "DORMOUSE_PLUGINS"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-p",
                           "tests.helpers.extra_arm", *READERS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1] and "failed" not in done.stdout.splitlines()[-1]
