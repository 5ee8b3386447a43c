"""Percentile bootstrap over queries: confidence intervals and paired differences.

Resamples are drawn once per scoring run from an explicitly seeded
``numpy.random.default_rng`` and shared by every system, so a paired comparison resamples
the same query indices for both sides and a rebuild reproduces every interval. A
resample is stored as a count matrix W (resamples × queries): the mean of a per-query
array x over resample b is (W @ x)[b] / n, which handles a whole curve (n × 200) in one
matrix product instead of materialising 1000 copies of it. A curve whose values change at
few k per query (R@k, nDCG@k) is resampled through its step points instead
(:meth:`Bootstrap.step_means`), with no threaded BLAS call on the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

RESAMPLES = 1000
SEED = 20260827  # fixed: a rebuild must not move a committed interval
CI = 0.95
_STEP_CHUNK = 4096  # changes gathered at once by step_means: 4096 × resamples floats (32 MB at 1000)


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

    @cached_property
    def _weights_by_query(self) -> np.ndarray:
        """W transposed, C-contiguous (n × resamples): one query's counts are one row."""
        return np.ascontiguousarray(self.weights.T)

    def step_means(
        self, x: np.ndarray, steps: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Resampled means of every column of a curve x (n × K), read through its steps.

        Returns (rows, at): ``rows[at[k]]`` holds the (resamples,) means of column k, the
        same numbers as ``means(x)[:, k]`` up to the summation order of the floats (exact
        when x holds integers, e.g. 0/1). Column k's resampled sums are column k−1's plus
        those of the change x[:, k] − x[:, k−1], and only the queries whose value changes
        at k contribute: the work is (changes × resamples) instead of (n × K × resamples),
        and a column where no query changes shares the row before it. ``steps`` (queries,
        columns, changes), sorted by column then query, spares the scan for them.
        """
        n, k_max = x.shape
        if steps is None:
            diff = np.empty_like(x, dtype=np.float64)  # (n, K): change of each query at each k
            diff[:, :1] = x[:, :1]
            np.subtract(x[:, 1:], x[:, :-1], out=diff[:, 1:])
            qs, ks = np.nonzero(diff != 0)
            order = np.argsort(ks, kind="stable")  # by k, then query
            qs, ks = qs[order], ks[order]
            vals = diff[qs, ks]
        else:
            qs, ks, vals = steps
        cols, sums = self._step_sums(qs, ks, vals)
        rows = np.empty((len(cols) + 1, self.resamples))  # row 0: before any change
        rows[0] = 0.0
        for g in range(len(cols)):  # running sums; faster than np.cumsum over axis 0
            np.add(rows[g], sums[g], out=rows[g + 1])
        rows /= self.n
        at = np.searchsorted(cols, np.arange(k_max), side="right")  # row holding column k
        return rows, at

    def sparse_means(self, steps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """``means(x)`` of a per-query array x that is ``vals`` at queries ``qs`` and 0 elsewhere,
        given as :meth:`step_means`' steps (queries, columns, values): e.g. RR = 1/rank,
        constant within the columns where R@k changes, so it shares their count sums."""
        _, sums = self._step_sums(*steps)
        return sums.sum(axis=0) / self.n

    def _step_sums(self, qs: np.ndarray, ks: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(columns, Σ vals[q] · W[:, q] over each column's changes): (G,), (G × resamples)."""
        first = np.flatnonzero(np.diff(ks, prepend=-1))  # each column's first change
        cols = ks[first]
        ends = np.append(first[1:], len(ks))
        v_first = vals[first]
        if np.array_equal(vals, np.repeat(v_first, ends - first)):
            # One change per column (e.g. one gold unit: 1 for R@k, 1/log₂(k+1) for nDCG@k):
            # the column's count sums, exact integers, times that change.
            sums = self._column_counts(qs, ks, first, ends)
            if not (v_first == 1.0).all():
                sums = sums * v_first[:, None]
            return cols, sums
        sums = np.empty((len(cols), self.resamples))
        wq = self._weights_by_query
        for g, (a, b) in enumerate(zip(first.tolist(), ends.tolist())):
            sums[g] = 0.0
            for c in range(a, b, _STEP_CHUNK):  # this column's changes, summed over the resamples
                d = min(c + _STEP_CHUNK, b)
                sums[g] += np.einsum("q,qr->r", vals[c:d], wq[qs[c:d]])
        return cols, sums

    def _column_counts(self, qs: np.ndarray, ks: np.ndarray, first: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Σ W[:, q] over the queries changing in each column (columns × resamples), kept for
        the last (qs, ks) arrays given: curves that change at the same places share it."""
        memo = self.__dict__.get("_counts_memo")
        if memo is not None and memo[0] is qs and memo[1] is ks:
            return memo[2]
        sums = np.empty((len(first), self.resamples))
        wq = self._weights_by_query
        for g, (a, b) in enumerate(zip(first.tolist(), ends.tolist())):
            sums[g] = 0.0
            for c in range(a, b, _STEP_CHUNK):
                sums[g] += wq[qs[c : min(c + _STEP_CHUNK, b)]].sum(axis=0)
        self.__dict__["_counts_memo"] = (qs, ks, sums)
        return sums

    def row_bounds(self, boot_means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The percentile interval of each row of (columns × resamples) boot means, e.g.
        :meth:`step_means`' rows: the numbers :meth:`interval` takes from a column.

        ``np.percentile``'s linear method, computed the same way from the same two order
        statistics (so the same floats), with one partition of the rows, in place: the
        rows' order is not kept.
        """
        alpha = (1.0 - self.ci) / 2.0
        q = np.true_divide([100 * alpha, 100 * (1 - alpha)], 100)
        count = boot_means.shape[1]
        virtual = (count - 1) * q
        below = np.floor(virtual)
        if count < 2 or not (0 <= below).all() or not (virtual < count - 1).all() or np.isnan(boot_means).any():
            lo, hi = np.percentile(boot_means, [100 * alpha, 100 * (1 - alpha)], axis=1)
            return lo, hi
        gamma = (virtual - below)[:, None]
        i_lo = below.astype(np.intp)
        boot_means.partition(sorted({*i_lo.tolist(), *(i_lo + 1).tolist()}), axis=1)
        a, b = boot_means[:, i_lo].T, boot_means[:, i_lo + 1].T
        diff = b - a  # numpy's _lerp: from the nearer order statistic
        out = a + diff * gamma
        np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
        return out[0], out[1]

    def row_means(self, x: np.ndarray) -> np.ndarray:
        """``means(x).T`` for x (n × m), laid out for :meth:`row_bounds`: (m × resamples)."""
        return np.einsum("qm,qr->mr", x, self._weights_by_query) / self.n

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
