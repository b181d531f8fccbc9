"""Plugin files and packages written into a temporary folder, and a fixture that forgets them afterwards.

A plugin's arm is the scalar gate ``x <- x + sigmoid(g_s) f(x)`` under a name of the test's choosing; a package
is declared the way an installed distribution declares it: a ``*.dist-info`` folder with ``METADATA`` and an
``entry_points.txt`` naming the module in the ``dormouse.arms`` group, on ``sys.path`` (importlib.metadata
finds it like a pip-installed one).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.plugin_arms import plugins_forgotten

ARM_SOURCE = '''"""A scalar-gated residual for the tests: x <- x + sigmoid(g_s) f(x)."""
from dataclasses import dataclass

import torch
from torch import nn

from dormouse.arms.base import ResidualArm


@dataclass
class {cls}Options:
    init: float = 0.0  # g_s at initialisation


class {cls}(ResidualArm):
    """Scalar gate (test plugin): ``x <- x + sigmoid(g_s) f(x)``, one g_s per slot."""

    name = "{name}"
    options = {cls}Options
    slot_fields = ("gate",)

    @classmethod
    def config_problems(cls, model_cfg, selected):
        init = model_cfg.{name}.init
        return [] if abs(init) < 20 else [f"model.{name}.init={{init!r}} is invalid: must be within (-20, 20)"]

    @classmethod
    def from_config(cls, model_cfg, kernel):
        return cls(int(model_cfg.d_model), int(model_cfg.max_iter), float(model_cfg.{name}.init))

    def __init__(self, d_model, max_iter, init=0.0):
        super().__init__(d_model, max_iter)
        self.g = nn.Parameter(torch.full((self.n_slots,), init))

    def begin(self, embedding):
        return embedding

    def sublayer_input(self, state, slot):
        return state

    def absorb(self, state, slot, output):
        self.counters.count_ran(self.name)
        return state + torch.sigmoid(self.g[slot]).to(output.dtype) * output

    def readout_input(self, state, k):
        return state

    def learned(self, traces):
        return {{"gate": [float(x) for x in torch.sigmoid(self.g.detach().float())]}}

    @classmethod
    def summarize(cls, fields):
        return "gate", sum(fields["gate"]) / len(fields["gate"])
'''


def arm_source(name: str) -> str:
    """A plugin module's text defining the scalar-gate arm ``name``."""
    return ARM_SOURCE.format(name=name, cls=name.capitalize() + "Gate")


def write_plugin_file(folder: Path, module: str, arm: str) -> Path:
    """``folder/module.py`` defining arm ``arm``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}.py"
    path.write_text(arm_source(arm), encoding="utf-8")
    return path


def write_plugin_package(site: Path, package: str, arm: str, dist: str = "dormouse-test-arms") -> Path:
    """An 'installed' distribution in ``site``: package ``package`` (its arm in ``package/arms.py``) and its
    ``dist-info`` declaring ``[dormouse.arms] <arm> = <package>.arms``. Put ``site`` on the path to install it."""
    pkg = site / package
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "arms.py").write_text(arm_source(arm), encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[dormouse.arms]\n{arm} = {package}.arms\n", encoding="utf-8")
    return pkg


@pytest.fixture
def forget_plugins() -> Iterator[None]:
    """Whatever a test loads as a plugin is forgotten afterwards (:func:`plugins_forgotten`)."""
    with plugins_forgotten():
        yield
