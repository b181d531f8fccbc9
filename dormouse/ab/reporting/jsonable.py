"""What a JSON document holds of a Python value: the one conversion every results file uses (results.json, a
study's decisions), torch-free so that the statistics modules can call it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np


def jsonable(x: Any) -> Any:
    """NaN/inf become null (JSON has no NaN), tuples lists, Paths strings, numpy scalars Python ones."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, np.generic):
        return jsonable(x.item())
    return x
