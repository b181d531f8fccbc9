"""Test-session setup.

Triton kernels are tested on CPU through Triton's interpreter (the brief's rule 5): TRITON_INTERPRET must
be set before any kernel is defined, so it is set here, at collection time, unless a GPU is present (then
the same tests run the compiled kernels natively).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
