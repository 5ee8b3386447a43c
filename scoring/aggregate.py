"""Aggregation: metric names → per-query arrays → macro means, CIs, curves, breakdowns.

A small registry maps each metric family to the per-query array it reads from
:class:`scoring.metrics.Curves`; names print in ir_measures' canonical form (``nDCG@10``,
``R@10``, ``P@10``, ``Success@10``) plus ``MRR`` / ``MAP`` for the means of RR / AP,
and common aliases are accepted on input (``ndcg@10``, ``Recall@10``, ``RR``, ``AP``).

Every aggregate is a macro mean over the scored queries (|G| > 0); unanswered queries are
already zeros in the arrays. For a row whose service returns at most N results, every
metric at k > N is undefined (None), never flat; RR and AP are whole-list measures and
stay defined.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from scoring.bootstrap import Bootstrap
from scoring.metrics import PR_LEVELS, Curves

TABLE_METRICS = ("nDCG@10", "R@1", "R@5", "R@10", "R@50", "R@100", "MRR", "MAP")
# MathlibMPR's paper reports k in {5, 10, 20, 30, 50} (BENCHMARKS.md §3.4).
MULTI_GOLD_EXTRA = tuple(
    f"{fam}@{k}" for k in (5, 10, 20, 30, 50) for fam in ("R", "P", "Covered", "covered_paper")
)
SINGLE_GOLD_EXTRA = ("nDCG@1", "nDCG@5", "R@20", "R@200")

_FAMILIES: dict[str, Callable[[Curves, int], np.ndarray]] = {
    "R": lambda c, k: c.recall[:, k - 1],
    "P": lambda c, k: c.precision[:, k - 1],
    "nDCG": lambda c, k: c.ndcg[:, k - 1],
    "Success": lambda c, k: (c.recall[:, k - 1] > 0).astype(np.float64),
    "Covered": lambda c, k: c.covered[:, k - 1],
    "covered_paper": lambda c, k: c.covered_paper[:, k - 1],
}
_WHOLE_LIST: dict[str, Callable[[Curves], np.ndarray]] = {"MRR": lambda c: c.rr, "MAP": lambda c: c.ap}
_WHOLE_FIELD = {"MRR": "rr", "MAP": "ap"}
_ALIASES = {
    "ndcg": "nDCG", "ndcg_cut": "nDCG", "r": "R", "recall": "R", "p": "P", "precision": "P",
    "success": "Success", "covered": "Covered", "covered_strict": "Covered", "covered_paper": "covered_paper",
    "mrr": "MRR", "rr": "MRR", "recip_rank": "MRR", "map": "MAP", "ap": "MAP",
}


def canonical(name: str) -> tuple[str, int | None]:
    """('nDCG', 10) for 'ndcg@10' / 'nDCG_cut_10'; ('MRR', None) for 'RR'. ValueError otherwise."""
    m = re.fullmatch(r"\s*([A-Za-z_]+?)(?:[@_](\d+))?\s*", name)
    if not m:
        raise ValueError(f"unknown metric {name!r}")
    fam = _ALIASES.get(m.group(1).lower(), m.group(1))
    k = int(m.group(2)) if m.group(2) else None
    if fam in _WHOLE_LIST and k is None:
        return fam, None
    if fam in _FAMILIES and k is not None and k >= 1:
        return fam, k
    raise ValueError(f"unknown metric {name!r} (examples: nDCG@10, R@10, P@10, Success@10, MRR, MAP)")


def metric_label(fam: str, k: int | None) -> str:
    return fam if k is None else f"{fam}@{k}"


def per_query(curves: Curves, name: str) -> np.ndarray:
    fam, k = canonical(name)
    if k is None:
        return _WHOLE_LIST[fam](curves)
    if k > curves.k_max:
        raise ValueError(f"{name}: k above k_max = {curves.k_max}")
    return _FAMILIES[fam](curves, k)


def defined(name: str, cap: int | None) -> bool:
    """False when the metric looks beyond a result cap N (k > N)."""
    _, k = canonical(name)
    return cap is None or k is None or k <= cap


def _f(x: Any) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


# Curves whose intervals are read through their steps (Bootstrap.step_means), once per
# bootstrap: the table's R@k / nDCG@k and the curves' bands are the same numbers.
_STEP_CURVES = {"R": "recall", "nDCG": "ndcg"}


def _step_bounds(curves: Curves, boot: Bootstrap, field: str) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval at every k of one curve, cached on the curves per bootstrap."""
    hit = curves.boot_cache.get(field)
    if hit is None or hit[0] is not boot:
        rows, at = boot.step_means(getattr(curves, field), (curves.steps or {}).get(field))
        lo, hi = boot.row_bounds(rows)
        hit = curves.boot_cache[field] = (boot, lo[at], hi[at])
    return hit[1], hit[2]


def summarize(curves: Curves, boot: Bootstrap, names: Sequence[str], cap: int | None) -> dict[str, dict[str, Any]]:
    """{name: {"value": mean, "ci": [lo, hi]}} with None above the cap."""
    out: dict[str, dict[str, Any]] = {name: {"value": None, "ci": None} for name in names}
    live = [name for name in names if defined(name, cap)]
    if not live or boot.n == 0:
        return out
    x = np.column_stack([per_query(curves, name) for name in live])
    lo, hi = np.empty(len(live)), np.empty(len(live))
    steps = curves.steps or {}
    sparse: list[tuple[int, str]] = []  # RR / AP known by their nonzero values
    dense: list[int] = []  # the rest: one (n × metrics) resampling product
    for j, name in enumerate(live):
        fam, k = canonical(name)
        if fam in _STEP_CURVES:
            c_lo, c_hi = _step_bounds(curves, boot, _STEP_CURVES[fam])
            lo[j], hi[j] = c_lo[k - 1], c_hi[k - 1]
        elif _WHOLE_FIELD.get(fam) in steps:
            sparse.append((j, _WHOLE_FIELD[fam]))
        else:
            dense.append(j)
    if sparse:
        idx = [j for j, _ in sparse]
        lo[idx], hi[idx] = boot.row_bounds(np.stack([boot.sparse_means(steps[f]) for _, f in sparse]))
    if dense:
        lo[dense], hi[dense] = boot.row_bounds(boot.row_means(x[:, dense]))
    for j, name in enumerate(live):
        out[name] = {"value": _f(x[:, j].mean()), "ci": [_f(lo[j]), _f(hi[j])]}
    return out


def _capped(values: np.ndarray, cap: int | None) -> list[float | None]:
    arr = np.asarray(values, dtype=np.float64)
    out = arr.tolist()
    if cap is not None:
        out[max(cap, 0):] = [None] * (len(out) - max(cap, 0))
    if not np.isnan(arr).any():
        return out
    return [None if v is None or math.isnan(v) else v for v in out]


def curve_block(curves: Curves, boot: Bootstrap, cap: int | None, multi_gold: bool) -> dict[str, Any]:
    """Full curves k = 1 … k_max with CI bands for R and nDCG; P and Covered on multi-gold tasks."""
    n = boot.n
    out: dict[str, Any] = {"k": list(range(1, curves.k_max + 1))}
    for key, field in _STEP_CURVES.items():
        arr = getattr(curves, field)
        mean = arr.mean(axis=0) if n else np.full(curves.k_max, np.nan)
        lo, hi = _step_bounds(curves, boot, field) if n else boot.interval(arr)
        out[key], out[f"{key}_lo"], out[f"{key}_hi"] = _capped(mean, cap), _capped(lo, cap), _capped(hi, cap)
    if multi_gold:
        for key, arr in (("P", curves.precision), ("Covered", curves.covered), ("Covered_paper", curves.covered_paper)):
            out[key] = _capped(arr.mean(axis=0) if n else np.full(curves.k_max, np.nan), cap)
    else:
        # P@k is mechanically R@k / k with one gold: not shown (METHODOLOGY.md).
        out["P"] = None
        out["Covered"] = None
    return out


def pr_block(curves: Curves) -> dict[str, list[float | None]]:
    """Macro-averaged 11-point interpolated precision."""
    prec = curves.pr.mean(axis=0) if curves.pr.shape[0] else np.full(len(PR_LEVELS), np.nan)
    return {"recall": list(PR_LEVELS), "precision": [_f(v) for v in prec]}


def breakdown(
    values: dict[str, np.ndarray], groups: Sequence[str | None], cap: int | None
) -> dict[str, dict[str, Any]]:
    """Per group value: n and the mean of each named per-query array (None above the cap)."""
    keys = sorted({g for g in groups if g is not None})
    garr = np.asarray([g if g is not None else "" for g in groups], dtype=object)
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        mask = garr == key
        cell: dict[str, Any] = {"n": int(mask.sum())}
        for name, arr in values.items():
            cell[name] = _f(arr[mask].mean()) if defined_any(name, cap) and mask.any() else None
        out[key] = cell
    return out


def defined_any(name: str, cap: int | None) -> bool:
    try:
        return defined(name, cap)
    except ValueError:  # profile metrics (MAMUT) have no k
        return True
