"""A comparison's run travels to a worker (a ``--jobs`` process, a cluster job) as a pickle, and its config
holds the plugin arm's options class: the worker must load the driver's plugins before it unpickles the
config. Pinned in a fresh interpreter that has no plugin loaded and no DORMOUSE_PLUGINS."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from dormouse.ab.runs.job import Run, RunTask
from dormouse.arms.plugins import load_plugin
from dormouse.config.schema import load_config
from dormouse.train.loop import train
from tests.helpers.plugin_files import forget_plugins, write_plugin_file

__all__ = ["forget_plugins"]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.usefixtures("forget_plugins")
def test_a_run_task_unpickles_in_a_fresh_process_with_its_plugin_arm(tmp_path: Path) -> None:
    load_plugin(str(write_plugin_file(tmp_path / "arms", "task_arms", "taskgate")))
    cfg = load_config(["preset=tiny", "model.use_taskgate=true", "model.taskgate.init=0.25"])
    task = RunTask(Run("taskgate", 1, cfg, tmp_path / "ab" / "taskgate-s1"), tmp_path / "ab", train, "local")
    blob = tmp_path / "task.pkl"
    blob.write_bytes(pickle.dumps(task))
    code = ("import pickle, sys; t = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "print(t.run.arm, t.run.cfg.model.use_taskgate, t.run.cfg.model.taskgate.init)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DORMOUSE_PLUGINS": ""}
    done = subprocess.run([sys.executable, "-c", code, str(blob)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.split() == ["taskgate", "True", "0.25"]
