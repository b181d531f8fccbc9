"""The AttnRes score forms (arXiv:2603.15031 Eq. 2-3 and an ablation), defined once for the project: the fused
kernel dispatches on them (kernels/depth_attend.py) and ``dormouse.ops.attnres`` re-exports them. Plain Python:
importing it needs no triton.

* ``"paper"``: ``s = w . RMSNorm(v)`` with the mean-form RMSNorm (Eq. 2, no temperature);
* ``"sqrt_d"``: the ablation ``w . v / ||v||_2 / sqrt(d)`` (= paper with ``w / d``).
"""

from __future__ import annotations

FORMS: tuple[str, ...] = ("paper", "sqrt_d")
