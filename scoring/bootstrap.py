"""Percentile bootstrap over queries: confidence intervals and paired differences.

Resamples are drawn once per scoring run from an explicitly seeded
``numpy.random.default_rng`` and shared by every system, so a paired comparison resamples
the same query indices for both sides and a rebuild reproduces every interval. A
resample is stored as a count matrix W (resamples × queries): the mean of a per-query
array x over resample b is (W @ x)[b] / n, which handles a whole curve (n × 200) in one
matrix product instead of materialising 1000 copies of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000
SEED = 20260827  # fixed: a rebuild must not move a committed interval
CI = 0.95


@dataclass
class Bootstrap:
    weights: np.ndarray  # (resamples, n) float64: how often each query is drawn
    resamples: int
    seed: int
    ci: float

    @classmethod
    def draw(cls, n: int, *, resamples: int = RESAMPLES, seed: int = SEED, ci: float = CI) -> Bootstrap:
        rng = np.random.default_rng(seed)
        if n == 0:
            return cls(np.zeros((resamples, 0)), resamples, seed, ci)
        idx = rng.integers(0, n, size=(resamples, n))
        flat = (np.arange(resamples)[:, None] * n + idx).ravel()
        w = np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(np.float64)
        return cls(w, resamples, seed, ci)

    @property
    def n(self) -> int:
        return self.weights.shape[1]

    def means(self, x: np.ndarray) -> np.ndarray:
        """Resampled means of a per-query array: (resamples,) or (resamples, k)."""
        return self.weights @ x / self.n

    def interval(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Percentile interval (2.5th, 97.5th for ci = 0.95) of the mean of x."""
        if self.n == 0:
            nan = np.full(x.shape[1:], np.nan)
            return nan, nan
        return self._bounds(self.means(x))

    def _bounds(self, boot_means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        alpha = (1.0 - self.ci) / 2.0
        lo, hi = np.percentile(boot_means, [100 * alpha, 100 * (1 - alpha)], axis=0)
        return lo, hi

    def paired(self, a: np.ndarray, b: np.ndarray) -> PairedResult:
        """Difference of means a − b over the same resampled queries, its interval and a
        two-sided p-value.

        The p-value tests "no difference" with the bootstrap distribution shifted to the
        null (centred on 0): p = (1 + #{b : |d*_b − d̄| ≥ |d̄|}) / (1 + B).
        """
        d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
        if self.n == 0:
            return PairedResult(float("nan"), (float("nan"), float("nan")), float("nan"))
        obs = float(d.mean())
        boot = self.means(d)
        lo, hi = self._bounds(boot)  # the same draws: no second (resamples x n) product
        extreme = int(np.sum(np.abs(boot - obs) >= abs(obs) - 1e-15))
        p = (1 + extreme) / (1 + self.resamples)
        return PairedResult(obs, (float(lo), float(hi)), min(1.0, p))


@dataclass(frozen=True)
class PairedResult:
    diff: float
    ci: tuple[float, float]
    p: float
