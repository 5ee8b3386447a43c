"""Main-profile metrics (METHODOLOGY.md): pure per-query functions and one vectorised driver.

Two layers, as in ranx's metric modules:

- small pure functions over ONE query's gold positions (``recall_at_k``, ``ndcg_at_k``, ...):
  the reference definitions, with the formula in each docstring;
- :func:`per_query_curves`, a numpy driver that computes every metric for every query at
  every k = 1 … k_max at once, returning arrays aligned to the query index. Tests check
  that the two layers agree, and the driver against ir_measures / pytrec_eval.

A query is described by the positions of its gold units: ``pos(g)`` is the 1-based rank
(as returned) of the earliest returned row belonging to unit g, or ``None`` (∞) when no
such row is within k_max. ``|G|`` is the number of units (after removing unresolvable
ones). Duplicates never reach this layer: a unit has one position, its first hit.

Units that share a returned row (METHODOLOGY.md): recall-type figures (R@k, Covered@k,
RR) read the unit positions; precision-type figures (P@k, DCG, AP, the PR curve's
precision) read the *credited* positions, the ranks at which the maximum matching h₁
between rows and units grows (:mod:`scoring.matching`). When units are disjoint the two
coincide, so ``credit=None`` means "the found unit positions".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

K_MAX = 200
PR_LEVELS = tuple(i / 10 for i in range(11))  # 0, 0.1, …, 1
_EPS = 1e-12  # R@k is h/|G|; compare to the 0.1-grid with a tolerance for float rounding

Positions = Sequence[int | None]  # one query: pos(g) per gold unit, None = ∞


def _found(positions: Positions, k: int) -> list[int]:
    return [p for p in positions if p is not None and p <= k]


def hits_at_k(positions: Positions, k: int) -> int:
    """h(k) = |{g ∈ G : pos(g) ≤ k}|."""
    return len(_found(positions, k))


def recall_at_k(positions: Positions, k: int) -> float:
    """R@k = h(k) / |G| (METHODOLOGY.md; ir_measures ``R@k``)."""
    return hits_at_k(positions, k) / len(positions)


def _credited(positions: Positions, credit: Positions | None) -> Positions:
    return positions if credit is None else credit


def precision_at_k(positions: Positions, k: int, credit: Positions | None = None) -> float:
    """P@k = h₁(k) / k — divides by k, not by the number returned (trec_eval's ``P_k``).

    h₁ = h when units are disjoint; ``credit`` gives the ranks at which h₁ grows otherwise.
    """
    return hits_at_k(_credited(positions, credit), k) / k


def dcg_at_k(positions: Positions, k: int, credit: Positions | None = None) -> float:
    """DCG@k = Σ_{g: pos(g) ≤ k} 1 / log₂(pos(g) + 1), binary relevance (over the credited
    positions when units share rows)."""
    return sum(1.0 / math.log2(p + 1) for p in _found(_credited(positions, credit), k))


def idcg_at_k(n_gold: int, k: int) -> float:
    """IDCG@k = Σ_{i=1}^{min(k, |G|)} 1 / log₂(i + 1): the cap at min(k, |G|) is essential."""
    return sum(1.0 / math.log2(i + 1) for i in range(1, min(k, n_gold) + 1))


def ndcg_at_k(positions: Positions, k: int, credit: Positions | None = None) -> float:
    """nDCG@k = DCG@k / IDCG@k (Järvelin & Kekäläinen 2002; trec_eval ``ndcg_cut``).

    With |G| = 1 this is exactly 1 / log₂(pos + 1) when pos ≤ k, else 0.
    """
    return dcg_at_k(positions, k, credit) / idcg_at_k(len(positions), k)


def reciprocal_rank(positions: Positions) -> float:
    """RR = 1 / min_g pos(g); 0 when nothing was found (MRR when averaged)."""
    found = [p for p in positions if p is not None]
    return 1.0 / min(found) if found else 0.0


def average_precision(positions: Positions, credit: Positions | None = None) -> float:
    """AP = (1/|G|) Σ_{j=1}^{h(k_max)} j / p_j, p₁ ≤ … ≤ p_j the found gold positions
    (the credited ones when units share rows).

    Divides by |G| (trec_eval ``map``), so unfound gold costs.
    """
    found = sorted(p for p in _credited(positions, credit) if p is not None)
    return sum(j / p for j, p in enumerate(found, start=1)) / len(positions)


def covered_at_k(positions: Positions, k: int) -> float:
    """Covered@k, strict: 1 if h(k) = |G| (every unit hit), else 0."""
    return 1.0 if hits_at_k(positions, k) == len(positions) else 0.0


def covered_paper_at_k(positions: Positions, kinds: Sequence[str], k: int) -> float:
    """Covered@k as MathlibMPR's paper / LSv2 code define it (``covered_paper``).

    1 if all *original* units are hit, or the item has alternative units and all of those
    are hit. A route with no unit left after resolution does not count as covered
    (vacuous truth would credit a query for gold the corpus does not hold).
    """
    def route(kind: str) -> bool:
        ps = [p for p, kd in zip(positions, kinds) if kd == kind]
        return bool(ps) and all(p is not None and p <= k for p in ps)

    # Single-gold tasks ("single") count as their one original route.
    if all(kd not in ("original", "alternative") for kd in kinds):
        return covered_at_k(positions, k)
    return 1.0 if route("original") or route("alternative") else 0.0


def interpolated_pr(positions: Positions, k_max: int = K_MAX, credit: Positions | None = None) -> list[float]:
    """11-point interpolated precision: P_interp(r) = max_{k ≤ k_max: R@k ≥ r} P@k.

    0 where r is unreachable (not carried forward from lower levels).
    """
    out = []
    for r in PR_LEVELS:
        ps = [precision_at_k(positions, k, credit) for k in range(1, k_max + 1) if recall_at_k(positions, k) >= r - _EPS]
        out.append(max(ps) if ps else 0.0)
    return out


# --------------------------------------------------------------------- vectorised driver


@dataclass
class QueryMatrix:
    """Positions of many queries, padded: ``pos[q, j]`` for unit j < ``sizes[q]``.

    ``pos`` is int64 with 0 meaning "not found within k_max" (∞) and for padding;
    ``kinds`` holds 0 = single, 1 = original, 2 = alternative, -1 = padding.
    """

    pos: np.ndarray  # (n_queries, max_units) int64
    sizes: np.ndarray  # (n_queries,) int64, |G| ≥ 1
    kinds: np.ndarray  # (n_queries, max_units) int8
    # Credited positions (ranks at which h₁ grows), 0-padded; None: the found positions.
    credit: np.ndarray | None = None

    @classmethod
    def from_lists(
        cls,
        positions: Sequence[Positions],
        kinds: Sequence[Sequence[str]] | None = None,
        credits: Sequence[Positions | None] | None = None,
    ) -> QueryMatrix:
        n = len(positions)
        width = max((len(p) for p in positions), default=1) or 1
        pos = np.zeros((n, width), dtype=np.int64)
        kd = np.full((n, width), -1, dtype=np.int8)
        sizes = np.zeros(n, dtype=np.int64)
        code = {"single": 0, "original": 1, "alternative": 2}
        for i, ps in enumerate(positions):
            sizes[i] = len(ps)
            for j, p in enumerate(ps):
                pos[i, j] = p if p is not None else 0
                kd[i, j] = code.get(kinds[i][j], 0) if kinds is not None else 0
        if (sizes == 0).any():
            raise ValueError("every scored query needs at least one gold unit (|G| > 0)")
        credit = None
        if credits is not None and any(c is not None for c in credits):
            credit = pos.copy()
            for i, c in enumerate(credits):
                if c is not None:
                    credit[i, :] = 0
                    cs = sorted(p for p in c if p is not None)
                    if len(cs) > width:
                        raise ValueError("more credited rows than gold units")
                    credit[i, : len(cs)] = cs
        return cls(pos=pos, sizes=sizes, kinds=kd, credit=credit)


@dataclass
class Curves:
    """Per-query metric arrays, aligned to the query index. Curves have column k-1 for k."""

    k_max: int
    recall: np.ndarray  # (n, k_max)
    precision: np.ndarray  # (n, k_max)
    ndcg: np.ndarray  # (n, k_max)
    covered: np.ndarray  # (n, k_max) strict
    covered_paper: np.ndarray  # (n, k_max)
    rr: np.ndarray  # (n,)
    ap: np.ndarray  # (n,)
    pr: np.ndarray  # (n, 11) interpolated precision at recall 0, 0.1, …, 1
    # Where recall / ndcg change, when known without a scan: {name: (queries, k − 1, change)},
    # sorted by k then query, as Bootstrap.step_means would find them; rr / ap: their
    # nonzero values, grouped the same way (Bootstrap.sparse_means).
    steps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = field(default=None, repr=False, compare=False)
    # Intervals of a curve, computed once per bootstrap (scoring.aggregate); not data.
    boot_cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def at(self, name: str, k: int) -> np.ndarray:
        return getattr(self, name)[:, k - 1]


_DISCOUNT_CACHE: dict[int, np.ndarray] = {}


def _discounts(k_max: int) -> np.ndarray:
    """1 / log₂(i + 1) for i = 0 … k_max (index 0 unused)."""
    d = _DISCOUNT_CACHE.get(k_max)
    if d is None:
        i = np.arange(k_max + 1, dtype=np.float64)
        d = np.zeros(k_max + 1)
        d[1:] = 1.0 / np.log2(i[1:] + 1.0)
        _DISCOUNT_CACHE[k_max] = d
    return d


def per_query_curves(qm: QueryMatrix, k_max: int = K_MAX) -> Curves:
    """Every main-profile metric for every query at every k = 1 … k_max, vectorised.

    Positions above k_max are treated as ∞ (they are not stored that way, but a caller
    may pass a wider list).
    """
    n, width = qm.pos.shape
    pos = np.where((qm.pos >= 1) & (qm.pos <= k_max), qm.pos, 0)
    valid = np.arange(width)[None, :] < qm.sizes[:, None]
    pos = np.where(valid, pos, 0)
    found = pos > 0
    ks = np.arange(1, k_max + 1, dtype=np.float64)
    disc = _discounts(k_max)
    sizes = qm.sizes[:, None].astype(np.float64)

    if width == 1 and qm.credit is None and (qm.sizes == 1).all():
        # One gold unit per query (most tasks): h(k) = [pos ≤ k], DCG@k = [pos ≤ k] / log₂(pos + 1)
        # and IDCG@k = 1, so the curves are comparisons, not cumulative sums (same numbers).
        p = pos[:, 0]
        reached = np.where(found[:, 0], p, k_max + 1)[:, None] <= np.arange(1, k_max + 1)[None, :]
        h = reached.astype(np.float64)
        recall = h
        precision = h / ks[None, :]
        ndcg = np.where(reached, disc[p][:, None], 0.0)
        covered = h.copy()  # own arrays: covered_paper may share this one (no routes)
        cpos, cfound = pos, found
        qs = np.flatnonzero(found[:, 0])
        qs = qs[np.argsort(p[qs], kind="stable")]
        at = p[qs] - 1
        steps = {"recall": (qs, at, np.ones(len(qs))), "ndcg": (qs, at, disc[p[qs]])}
    else:
        # Histogram of found positions per query, then cumulative sums give h(k) and DCG@k.
        rows = np.broadcast_to(np.arange(n)[:, None], pos.shape)
        counts = np.zeros((n, k_max + 1), dtype=np.float64)
        np.add.at(counts, (rows[found], pos[found]), 1.0)
        h = np.cumsum(counts[:, 1:], axis=1)  # (n, k_max)
        # Precision-type figures count credited rows (h₁); identical to h for disjoint units.
        if qm.credit is None:
            cpos, cfound, h1, ccounts = pos, found, h, counts
        else:
            cpos = np.where((qm.credit >= 1) & (qm.credit <= k_max) & valid, qm.credit, 0)
            cfound = cpos > 0
            ccounts = np.zeros((n, k_max + 1), dtype=np.float64)
            np.add.at(ccounts, (rows[cfound], cpos[cfound]), 1.0)
            h1 = np.cumsum(ccounts[:, 1:], axis=1)
        dcg = np.cumsum(ccounts[:, 1:] * disc[1:][None, :], axis=1)
        ideal = np.cumsum(disc)  # ideal[m] = Σ_{i=1}^{m} 1/log2(i+1)
        idcg = ideal[np.minimum(ks.astype(np.int64)[None, :], qm.sizes[:, None])]
        recall = h / sizes
        precision = h1 / ks[None, :]
        ndcg = dcg / idcg
        covered = (h == sizes).astype(np.float64)
        steps = None

    covered_paper = _covered_paper(qm, covered, pos, found, valid, ks, k_max)

    first = np.where(found, pos, np.iinfo(np.int64).max).min(axis=1)
    rr = np.where(first <= k_max, 1.0 / np.maximum(first, 1), 0.0)

    # AP: sort found positions; the j-th found (1-based) at p_j contributes j / p_j.
    sorted_pos = np.sort(np.where(cfound, cpos, np.iinfo(np.int64).max), axis=1)
    js = np.arange(1, width + 1, dtype=np.float64)[None, :]
    ok = sorted_pos <= k_max
    ap = np.where(ok, js / np.where(ok, sorted_pos, 1), 0.0).sum(axis=1) / qm.sizes

    pr = _interpolated_pr(pos, found, cpos, cfound, sizes, precision, k_max)
    if steps is not None:  # RR = AP = 1/rank with one unit: nonzero where R@k steps up
        qs, at, _ = steps["recall"]
        steps["rr"], steps["ap"] = (qs, at, rr[qs]), (qs, at, ap[qs])
    return Curves(k_max, recall, precision, ndcg, covered, covered_paper, rr, ap, pr, steps)


def _covered_paper(qm: QueryMatrix, covered: np.ndarray, pos: np.ndarray, found: np.ndarray,
                   valid: np.ndarray, ks: np.ndarray, k_max: int) -> np.ndarray:
    """Covered (paper): per route, all its units found by k ⇔ the route's max position ≤ k."""
    covered_paper = covered
    multi = (qm.kinds == 1) | (qm.kinds == 2)
    has_routes = multi.any(axis=1)
    if has_routes.any():
        covered_paper = covered.copy()
        big = k_max + 1
        pos_inf = np.where(found, pos, big)
        covered_paper[has_routes] = 0.0
        for code in (1, 2):
            in_route = (qm.kinds == code) & valid
            nonempty = in_route.any(axis=1) & has_routes
            worst = np.where(in_route, pos_inf, 0).max(axis=1)  # latest unit of the route
            ok = nonempty & (worst <= k_max)
            reach = (ks[None, :] >= worst[:, None]) & ok[:, None]
            covered_paper = np.maximum(covered_paper, reach.astype(np.float64))
    return covered_paper


def _interpolated_pr(pos: np.ndarray, found: np.ndarray, cpos: np.ndarray, cfound: np.ndarray,
                     sizes: np.ndarray, precision: np.ndarray, k_max: int) -> np.ndarray:
    """P_interp(r) = max_{k: R@k ≥ r} P@k per query and level, 0 where r is unreachable.

    R@k = h(k)/|G| only grows, so the k with R@k ≥ r are a suffix [k_r, k_max], where k_r is
    the rank of the m-th found unit, m the fewest hits with m/|G| ≥ r (k_r = 1 for m = 0).
    Between two credited ranks h₁ is constant and h₁/k falls, so the suffix's largest P@k
    is at k_r or at a credited rank ≥ k_r: the same maximum as over every k.
    """
    n, width = pos.shape
    levels = np.asarray(PR_LEVELS)
    m = np.arange(width + 1, dtype=np.float64)
    enough = (m[None, :, None] / sizes[:, :, None]) >= (levels[None, None, :] - _EPS)  # (n, width+1, levels)
    need = enough.argmax(axis=1)  # fewest hits reaching each level
    reachable = enough.any(axis=1) & (need <= found.sum(axis=1)[:, None])
    upos = np.sort(np.where(found, pos, k_max + 1), axis=1)
    k_r = np.where(need == 0, 1, np.take_along_axis(upos, np.maximum(need - 1, 0), axis=1))
    k_r = np.where(reachable, k_r, 1)
    best = np.take_along_axis(precision, k_r - 1, axis=1)  # (n, levels)
    at_credit = np.take_along_axis(precision, np.maximum(cpos - 1, 0), axis=1)  # (n, width)
    later = cfound[:, :, None] & (cpos[:, :, None] >= k_r[:, None, :])  # (n, width, levels)
    best = np.maximum(best, np.where(later, at_credit[:, :, None], 0.0).max(axis=1))
    return np.where(reachable, best, 0.0)
