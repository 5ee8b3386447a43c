"""Scoring profiles: how one system's gold positions become its metrics.

A :class:`Profile` turns a system's per-query gold positions (:class:`Ranks`, gathered
from a :class:`SystemContext`) into metric means with bootstrap intervals, the per-query
arrays paired comparisons and breakdowns use, and the per-query JSON. One implementation
per profile name: ``main`` (METHODOLOGY.md; curves over k = 1 … k_max), and the two
MAMUT profiles of :mod:`scoring.mamut`, ``mamut`` and ``mamut-sklearn`` (no curves).
:func:`get_profile` gives the one for a name; :data:`PROFILES` lists the names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scoring import aggregate as agg
from scoring.bootstrap import Bootstrap
from scoring.mamut import MAMUT_METRICS, SKLEARN_METRICS, profile_query
from scoring.metrics import QueryMatrix, per_query_curves, reciprocal_rank
from scoring.scope import Scored
from scoring.systems import SystemRef
from store.errors import InputError

COMPARE_METRICS = ("nDCG@10", "R@1", "R@10", "MRR", "MAP")


@dataclass(frozen=True)
class RunContext:
    """What every system of one scoring run shares: the metric cut-off, the benchmark's
    task, the scope's gold names and those present in the corpus, the corpus size (the
    mamut-sklearn pool) and the queries whose positions are recomputed (scoring.matching)."""

    k_max: int
    task: str
    gold: set[str]
    present: set[str]
    pool_size: int | None = None
    affected: frozenset[int] = frozenset()
    uncovered: frozenset[int] = frozenset()  # --uncovered zero: no gold in the corpus, scored 0


@dataclass
class SystemContext:
    """One system's input to :func:`scoring.results._score_system`: its queries (a sampled
    row: its own sample) with their stored positions ``{query id: ({unit id: position},
    n_retrieved)}``, recomputed positions for the affected queries, its bootstrap draw,
    dropped-query count, resolution counts, latencies and snapshot names."""

    run: RunContext
    ref: SystemRef
    scored: Scored
    stored: dict[int, tuple[dict[int, int | None], int]]
    boot: Bootstrap
    dropped: int = 0
    res_counts: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    snapshot: set[str] | None = None
    recomputed: dict[int, tuple[list[int | None], list[int]]] = field(default_factory=dict)
    sample: str | None = None

    @property
    def multi(self) -> bool:
        """Several gold units somewhere, or a task other than theorem search."""
        return any(len(u) > 1 for _, u in self.scored) or self.run.task != "theorem-search"


@dataclass
class Ranks:
    """Per scored query: gold-unit positions, unit kinds, n retrieved, answered, and the
    matching's credited slots (None: from the stored table)."""

    positions: list[list[int | None]] = field(default_factory=list)
    kinds: list[list[str]] = field(default_factory=list)
    n_ret: list[int] = field(default_factory=list)
    answered: list[bool] = field(default_factory=list)
    credits: list[list[int] | None] = field(default_factory=list)

    @classmethod
    def gather(cls, ctx: SystemContext) -> "Ranks":
        out = cls()
        for q, units in ctx.scored:
            entry = ctx.stored.get(q.id)
            nr = entry[1] if entry is not None else 0
            if q.id in ctx.run.uncovered:  # nothing can hit a gold the corpus does not hold
                out.answered.append(True)
                out.positions.append([None] * len(units))
                out.credits.append(None)
            elif q.id in ctx.run.affected:
                # Recomputed from the answer's hits (scoring.matching); n_retrieved is still stored.
                got = ctx.recomputed.get(q.id)
                out.answered.append(got is not None)
                out.positions.append(list(got[0]) if got is not None else [None] * len(units))
                out.credits.append(list(got[1]) if got is not None else [])
            else:
                out.answered.append(entry is not None)
                upos = entry[0] if entry is not None else {}
                out.positions.append([upos.get(u.id) for u, _ in units])
                out.credits.append(None)
            out.kinds.append([u.kind for u, _ in units])
            out.n_ret.append(nr)
        return out


@dataclass
class Measured:
    """A profile's output for one system: metric blocks, curves and PR (main only), the
    per-query arrays for comparisons, the arrays breakdowns average, and per-query JSON."""

    metrics: dict[str, dict[str, Any]]
    curves: dict[str, Any] | None
    pr: dict[str, Any] | None
    arrays: dict[str, np.ndarray]
    bd_values: dict[str, np.ndarray]
    per_query: dict[str, dict[str, Any]]


class Profile(ABC):
    """A scoring profile: its name, the metrics its table shows, and its measurement."""

    name: str

    @abstractmethod
    def table_metrics(self, multi: bool) -> tuple[str, ...]:
        """The metrics a score table shows (``multi``: several gold units or another task)."""

    @abstractmethod
    def measure(self, ctx: SystemContext, ranks: Ranks) -> Measured:
        """One system's metrics from its gold positions."""


class MainProfile(Profile):
    """METHODOLOGY.md: every metric at every k = 1 … k_max, CIs, curves, PR."""

    name = "main"

    def table_metrics(self, multi: bool) -> tuple[str, ...]:
        return tuple(agg.TABLE_METRICS + (("P@10", "Covered@10", "covered_paper@10") if multi else ()))

    def measure(self, ctx: SystemContext, ranks: Ranks) -> Measured:
        k_max, cap, multi, boot = ctx.run.k_max, ctx.ref.result_cap, ctx.multi, ctx.boot
        curves = (per_query_curves(QueryMatrix.from_lists(ranks.positions, ranks.kinds, ranks.credits), k_max)
                  if ctx.scored else None)
        names = list(agg.TABLE_METRICS) + list(agg.MULTI_GOLD_EXTRA if multi else agg.SINGLE_GOLD_EXTRA)
        names = [nm for nm in dict.fromkeys(names) if agg.canonical(nm)[1] is None or agg.canonical(nm)[1] <= k_max]
        if curves is None:
            metrics = {nm: {"value": None, "ci": None} for nm in names}
            curve_json, pr_json, arrays = None, None, {}
            bd_values: dict[str, np.ndarray] = {}
        else:
            metrics = agg.summarize(curves, boot, names, cap)
            curve_json = agg.curve_block(curves, boot, cap, multi)
            pr_json = agg.pr_block(curves)
            arrays = {nm: agg.per_query(curves, nm) for nm in COMPARE_METRICS if agg.defined(nm, cap)}
            bd_values = {nm: agg.per_query(curves, nm) for nm in ("nDCG@10", "R@10") if 10 <= k_max}
        per_query = {
            q.qid: {"positions": ps, "rr": float(curves.rr[i]) if curves is not None else 0.0,
                    "answered": ranks.answered[i],
                    **({"credited": ranks.credits[i]} if ranks.credits[i] is not None else {})}
            for i, ((q, _), ps) in enumerate(zip(ctx.scored, ranks.positions))
        }
        return Measured(metrics=metrics, curves=curve_json, pr=pr_json, arrays=arrays, bd_values=bd_values,
                        per_query=per_query)


class _MamutBase(Profile):
    """The MAMUT profiles (scoring.mamut): per-query recipes, means with CIs, no curves."""

    keys: tuple[str, ...]

    def table_metrics(self, multi: bool) -> tuple[str, ...]:
        return tuple(self.keys)

    def measure(self, ctx: SystemContext, ranks: Ranks) -> Measured:
        rows = [profile_query(self.name, ps, nr, answered=ok, pool_size=ctx.run.pool_size)
                for ps, nr, ok in zip(ranks.positions, ranks.n_ret, ranks.answered)]
        arrays = {key: np.asarray([r[key] for r in rows], dtype=np.float64) for key in self.keys}
        metrics = {}
        for key, arr in arrays.items():
            lo, hi = ctx.boot.interval(arr) if len(arr) else (np.nan, np.nan)
            metrics[key] = {"value": float(arr.mean()) if len(arr) else None, "ci": [lo, hi] if len(arr) else None}
        per_query = {
            q.qid: {"positions": ps, "rr": reciprocal_rank(ps), "answered": ranks.answered[i], **rows[i]}
            for i, ((q, _), ps) in enumerate(zip(ctx.scored, ranks.positions))
        }
        return Measured(metrics=metrics, curves=None, pr=None, arrays=arrays,
                        bd_values={key: arrays[key] for key in ("nDCG", "AP")}, per_query=per_query)


class MamutProfile(_MamutBase):
    """``mamut``: the benchmark card's recipe."""

    name = "mamut"
    keys = MAMUT_METRICS


class MamutSklearnProfile(_MamutBase):
    """``mamut-sklearn``: MAMUT's evaluation code (scikit-learn, the corpus as the pool)."""

    name = "mamut-sklearn"
    keys = SKLEARN_METRICS


_ALL: dict[str, Profile] = {p.name: p for p in (MainProfile(), MamutProfile(), MamutSklearnProfile())}
PROFILES = tuple(_ALL)


def get_profile(name: str) -> Profile:
    """The profile called ``name``; an input error names the others."""
    try:
        return _ALL[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown scoring profile {name!r}; choose one of {', '.join(PROFILES)}") from None
