"""A compute ladder's scaling law L(C) = E + A·C^(−α): the final loss (bits per byte) against training FLOPs C,
fitted by least squares to each point's mean over its seed replicates, and a stratified percentile bootstrap
over those replicates for E, A, α and the extrapolated loss. Pure numpy/scipy, scipy imported where it fits."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dormouse.errors import DormouseError

ALPHA_MAX = 5.0  # far above any LM compute exponent (~0.05–0.5): a fit that ends on it is a step, not a law
MAX_FAILED = 0.10  # the share of bootstrap fits that may fail before the intervals are refused
_ALPHA_GRID = np.geomspace(1e-3, ALPHA_MAX / 2, 64)  # the starting values' α, see _start


class FitFailed(DormouseError, RuntimeError, exit_code=1):
    """The least-squares fit of L = E + A·C^(−α) did not converge, or α ended on a bound (no power law there)."""


@dataclass(frozen=True)
class PowerLaw:
    """L(C) = E + A·C^(−α): E the irreducible loss, A the scale, α the exponent (C in FLOPs, L in bits per byte)."""

    E: float
    A: float
    alpha: float

    def predict(self, c: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
        """E + A·c^(−α) at training FLOPs c: a float for a number, an array for an array."""
        out = self.E + self.A * np.power(np.asarray(c, dtype=float), -self.alpha)
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class PowerLawFit:
    """A stratified bootstrap of L = E + A·C^(−α): the fit on the points' plain means, percentile intervals at
    `level` for E, A, α and for the loss predicted at each C of `at`; n_failed of the n_boot refits failed
    (dropped, and counted here: the intervals are over the n_boot − n_failed that converged)."""

    estimate: PowerLaw
    E: tuple[float, float]
    A: tuple[float, float]
    alpha: tuple[float, float]
    at: tuple[float, ...]
    predicted: tuple[float, ...]  # estimate.predict(c) for each c of `at`
    predicted_interval: tuple[tuple[float, float], ...]  # its percentile interval, for each c of `at`
    level: float
    n_boot: int
    n_failed: int


def fit_power_law(flops: Sequence[float], loss: Sequence[float]) -> PowerLaw:
    """Least squares of L = E + A·C^(−α) on one mean loss per distinct C, with E ≥ 0, A > 0 and 0 < α < ALPHA_MAX.
    Raises ValueError for bad input (fewer than 3 distinct C: three parameters), FitFailed if the fit fails."""
    c = _positive("flops", flops)
    y = np.asarray(loss, dtype=float)
    if y.shape != c.shape or not np.all(np.isfinite(y)):
        raise ValueError(f"loss: needs one finite value per C of flops ({c.size}), got {np.ravel(y).tolist()}")
    if np.unique(c).size != c.size:
        raise ValueError(f"flops: one mean loss per distinct C, got repeated values in {c.tolist()}")
    _enough("flops", c.size)
    return _fit(np.log(c), y)


def bootstrap_power_law(points: Mapping[float, Sequence[float]], *, n_boot: int = 2000, seed: int,
                        level: float = 0.95, at: Sequence[float] = ()) -> PowerLawFit:
    """L = E + A·C^(−α) fitted to each point's mean, and its percentile intervals from n_boot refits on means of
    replicates resampled within each point (`points`: training FLOPs → the final losses of its replicates).
    Deterministic for a seed; raises FitFailed if the plain fit or more than MAX_FAILED of the refits fail."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot: needs a positive integer, got {n_boot!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: needs a coverage in (0, 1), got {level!r}")
    at_c = _positive("at", at)
    c = np.sort(_positive("points", list(points)))  # sorted: the draws do not depend on the mapping's order
    _enough("points", c.size)
    reps = [np.asarray(points[k], dtype=float) for k in sorted(points)]
    for k, r in zip(c, reps):
        if r.ndim != 1 or r.size < 2 or not np.all(np.isfinite(r)):
            raise ValueError(f"points: C = {k:g} needs 2 or more finite replicate losses to resample, got {r.tolist()}")
    x = np.log(c)
    estimate = _fit(x, np.array([r.mean() for r in reps]))
    rng = np.random.default_rng(seed)
    means = np.empty((n_boot, c.size))
    for j, r in enumerate(reps):  # within each point: its seeds are the exchangeable unit, its C is fixed
        means[:, j] = r[rng.integers(0, r.size, size=(n_boot, r.size))].mean(axis=1)
    fits = []
    for row in means:
        try:
            fits.append(_fit(x, row))
        except FitFailed:  # dropped, and counted in n_failed
            continue
    n_failed = int(n_boot) - len(fits)
    if n_failed > MAX_FAILED * n_boot:
        raise FitFailed(f"{n_failed} of {n_boot} bootstrap fits failed (more than {MAX_FAILED:.0%}): "
                        "the ladder does not pin L = E + A·C^(−α)")
    q = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    e, a, alpha = np.quantile(np.array([[f.E, f.A, f.alpha] for f in fits]), q, axis=0).T
    pred = np.quantile(np.array([f.predict(at_c) for f in fits]).reshape(len(fits), at_c.size), q, axis=0).T
    return PowerLawFit(estimate=estimate, E=_pair(e), A=_pair(a), alpha=_pair(alpha), at=tuple(map(float, at_c)),
                       predicted=tuple(map(float, np.atleast_1d(estimate.predict(at_c)))),
                       predicted_interval=tuple(map(_pair, pred)), level=level, n_boot=int(n_boot), n_failed=n_failed)


def _fit(x: np.ndarray, y: np.ndarray) -> PowerLaw:
    """L = E + exp(a − α·(x − x̄)) in x = ln C: centring makes a the log loss gap at the ladder's middle C (order 1),
    where ln A = a + α·x̄ is large and moves with α; exp(a) keeps A > 0. Then A = exp(a + α·x̄)."""
    from scipy.optimize import least_squares

    x_ref = float(x.mean())
    u = x - x_ref

    def residual(p: np.ndarray) -> np.ndarray:
        return p[0] + np.exp(p[1] - p[2] * u) - y

    def jacobian(p: np.ndarray) -> np.ndarray:
        g = np.exp(p[1] - p[2] * u)
        return np.column_stack([np.ones_like(g), g, -u * g])

    # tolerances 100× below the defaults: a step or two more (3 parameters), and exact data give E, A, α to ~1e-10
    res = least_squares(residual, _start(u, y), jac=jacobian, bounds=([0.0, -np.inf, 0.0], [np.inf, np.inf, ALPHA_MAX]),
                        method="trf", xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=500)
    if res.status <= 0 or not np.all(np.isfinite(res.x)):
        raise FitFailed(f"least squares of L = E + A·C^(−α) did not converge: {res.message}")
    if res.active_mask[2] != 0:  # α = 0 is a constant (E, A not identified); α = ALPHA_MAX is a step
        raise FitFailed(f"least squares of L = E + A·C^(−α) ended on the bound α = {res.x[2]:g}: no power law")
    e, a, alpha = (float(v) for v in res.x)
    return PowerLaw(E=e, A=math.exp(a + alpha * x_ref), alpha=alpha)


def _start(u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(E, a, α) to start from: for each α of a grid the law is linear in (E, e^a), solved in closed form with
    E ≥ 0 (else E = 0, through the origin) and e^a > 0; the α of least squared error, so the solver starts in the
    right basin."""
    g = np.exp(-np.outer(_ALPHA_GRID, u))
    gc, yc = g - g.mean(axis=1, keepdims=True), y - y.mean()
    b = (gc @ yc) / np.einsum("ij,ij->i", gc, gc)
    e = y.mean() - b * g.mean(axis=1)
    b = np.where(e < 0, (g @ y) / np.einsum("ij,ij->i", g, g), b)
    e = np.maximum(e, 0.0)
    sse = np.where(b > 0, ((e[:, None] + b[:, None] * g - y) ** 2).sum(axis=1), np.inf)
    i = int(np.argmin(sse))
    if not np.isfinite(sse[i]):
        raise FitFailed("the loss does not fall with C: no L = E + A·C^(−α) with A > 0 and α > 0 fits it")
    return np.array([e[i], math.log(b[i]), _ALPHA_GRID[i]])


def _positive(name: str, values: Sequence[float]) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(v) & (v > 0)):
        raise ValueError(f"{name}: training FLOPs must be finite and > 0, got {v.tolist()}")
    return v


def _enough(name: str, n: int) -> None:
    if n < 3:
        raise ValueError(f"{name}: needs at least 3 distinct training FLOPs C (E, A and α are 3 parameters), got {n}")


def _pair(v: np.ndarray) -> tuple[float, float]:
    return float(v[0]), float(v[1])


@dataclass(frozen=True)
class DeltaAt:
    """Δ(c) = L_arm(c) − L_base(c) from the two fitted laws at each c of ``at`` (an extrapolation beyond the ladder),
    with its paired percentile interval: replicates resampled within each point, the same indices for both arms."""

    at: tuple[float, ...]
    delta: tuple[float, ...]
    interval: tuple[tuple[float, float], ...]
    level: float
    n_boot: int
    n_failed: int


def bootstrap_delta_at(arm: Mapping[float, Sequence[float]], base: Mapping[float, Sequence[float]], *,
                       at: Sequence[float], n_boot: int = 2000, seed: int, level: float = 0.95) -> DeltaAt:
    """The difference of the two laws at each c of ``at``; replicate k of a point is the same seeds in both arms,
    so a resample keeps the pairs (the shared init and data order cancel as they do in the verdicts)."""
    if sorted(arm) != sorted(base) or any(len(arm[k]) != len(base[k]) for k in arm):
        raise ValueError("base: needs the arm's points with as many replicates each (they are paired)")
    c = np.sort(_positive("arm", list(arm)))
    _enough("arm", c.size)
    at_c = _positive("at", at)
    a_reps = [np.asarray(arm[k], dtype=float) for k in sorted(arm)]
    b_reps = [np.asarray(base[k], dtype=float) for k in sorted(base)]
    x = np.log(c)

    def delta(ia: list[np.ndarray], ib: list[np.ndarray]) -> np.ndarray:
        fa, fb = _fit(x, np.array([r.mean() for r in ia])), _fit(x, np.array([r.mean() for r in ib]))
        return np.atleast_1d(fa.predict(at_c) - fb.predict(at_c))

    estimate = delta(a_reps, b_reps)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(int(n_boot)):
        idx = [rng.integers(0, r.size, size=r.size) for r in a_reps]  # one draw of replicates for both arms
        try:
            draws.append(delta([r[i] for r, i in zip(a_reps, idx)], [r[i] for r, i in zip(b_reps, idx)]))
        except FitFailed:
            continue
    n_failed = int(n_boot) - len(draws)
    if n_failed > MAX_FAILED * n_boot:
        raise FitFailed(f"{n_failed} of {n_boot} paired bootstrap fits failed (more than {MAX_FAILED:.0%})")
    q = np.quantile(np.array(draws), [(1.0 - level) / 2.0, (1.0 + level) / 2.0], axis=0).T
    return DeltaAt(at=tuple(map(float, at_c)), delta=tuple(map(float, estimate)), interval=tuple(map(_pair, q)),
                   level=level, n_boot=int(n_boot), n_failed=n_failed)
