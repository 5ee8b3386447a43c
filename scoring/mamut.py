"""MAMUT-style profiles (METHODOLOGY.md "MAMUT profile"; BENCHMARKS.md §10).

Two named profiles over any task with binary labels, kept apart from the main profile
because their conventions differ and their numbers are not comparable to Mathlib
retrieval numbers:

``mamut`` — the recipe as the benchmark card states it:
  - P@10: relevant among the first 10 predictions, divided by 10 as the card's recipe
    does (a list shorter than 10 is not rewarded for stopping early);
  - nDCG: DCG summed over the whole ranked list, IDCG over min(|gold|, 10) ideal
    positions (so, unlike the main profile, it can exceed 1 when more than 10 golds are
    found — that is the recipe, reproduced as stated);
  - AP: the sum, at each relevant prediction, of the precision at that position,
    divided by |gold| (unretrieved golds cost);
  - precision / recall / F1 of the returned set as a classification (returned =
    predicted positive), per query.

``mamut-sklearn`` — what MAMUT's evaluation code computes (``compute_metrics`` in
``transformer-math-evaluation``): ``sklearn.metrics.ndcg_score`` and
``average_precision_score`` over the whole candidate pool, no cut-off on either side.
An engine returns a ranked list, not a scored pool: the returned items get strictly
decreasing scores, and everything else in the pool ties at the lowest score — the
unreturned golds plus ``tail_negatives`` unreturned non-golds. MAMUT's code ranks every
candidate, so for an engine run the pool is the whole scoring corpus: the tail negatives
are every corpus row the system did not return. scikit-learn averages DCG over tied items
and merges tied thresholds for AP, and so do we. An unanswered or empty query scores 0
(scikit-learn would give an all-tied pool of golds 1.0). scikit-learn is not a
dependency: it is the test oracle.

Per query, ``labels`` is the returned list as 0/1 in rank order (duplicates and
unresolved names are 0s that keep their slot) and ``n_gold`` the number of relevant items.
"""

from __future__ import annotations

import math
from typing import Sequence

PROFILES = ("mamut", "mamut-sklearn")
MAMUT_METRICS = ("P@10", "nDCG", "AP", "precision", "recall", "F1")
SKLEARN_METRICS = ("nDCG", "AP")


def _disc(i: int) -> float:
    """Discount of 1-based position i."""
    return 1.0 / math.log2(i + 1)


def mamut_query(labels: Sequence[int], n_gold: int) -> dict[str, float]:
    """The card recipe for one query (see module docstring)."""
    if n_gold <= 0:
        raise ValueError("MAMUT metrics need at least one relevant item (|gold| > 0)")
    m = len(labels)
    rel = [1 if x else 0 for x in labels]
    found = sum(rel)
    p10 = sum(rel[:10]) / 10
    dcg = sum(r * _disc(i) for i, r in enumerate(rel, start=1))
    idcg = sum(_disc(i) for i in range(1, min(n_gold, 10) + 1))
    ap, seen = 0.0, 0
    for i, r in enumerate(rel, start=1):
        if r:
            seen += 1
            ap += seen / i
    precision = found / m if m else 0.0
    recall = found / n_gold
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"P@10": p10, "nDCG": dcg / idcg, "AP": ap / n_gold, "precision": precision, "recall": recall, "F1": f1}


def sklearn_query(labels: Sequence[int], n_gold: int, tail_negatives: int = 0) -> dict[str, float]:
    """scikit-learn's uncut nDCG and AP over the pool (returned list + tied tail)."""
    if n_gold <= 0:
        raise ValueError("MAMUT metrics need at least one relevant item (|gold| > 0)")
    rel = [1 if x else 0 for x in labels]
    m, found = len(rel), sum(rel)
    tail_pos = n_gold - found
    if tail_pos < 0:
        raise ValueError("more relevant items returned than n_gold")
    tail = tail_pos + tail_negatives
    dcg = sum(r * _disc(i) for i, r in enumerate(rel, start=1))
    if tail and tail_pos:
        # Tied items share the average gain over the discounts of the slots they occupy.
        dcg += (tail_pos / tail) * sum(_disc(i) for i in range(m + 1, m + tail + 1))
    idcg = sum(_disc(i) for i in range(1, n_gold + 1))
    ap, seen = 0.0, 0
    for i, r in enumerate(rel, start=1):
        if r:
            seen += 1
            ap += (1 / n_gold) * (seen / i)
    if tail_pos:
        # One merged threshold for the whole tie: recall jumps to 1 at the pool's precision.
        ap += (tail_pos / n_gold) * (n_gold / (m + tail))
    return {"nDCG": dcg / idcg, "AP": ap}


def labels_from_positions(positions: Sequence[int | None], n_retrieved: int) -> list[int]:
    """0/1 labels of a returned list from gold-unit positions (a unit's first hit is its one
    relevant slot; duplicates stay 0)."""
    length = max([n_retrieved] + [p for p in positions if p is not None])
    labels = [0] * length
    for p in positions:
        if p is not None:
            labels[p - 1] = 1
    return labels


def profile_query(
    profile: str,
    positions: Sequence[int | None],
    n_retrieved: int,
    *,
    answered: bool = True,
    pool_size: int | None = None,
) -> dict[str, float]:
    """One query's metrics under a MAMUT profile, from stored positions.

    ``pool_size`` (mamut-sklearn): the candidate pool, the scoring corpus's row count; the
    rows not returned are tail negatives. None keeps the pool to the returned rows and golds.
    """
    labels = labels_from_positions(positions, n_retrieved)
    n_gold = len(positions)
    if profile == "mamut":
        out = mamut_query(labels, n_gold)
        # Units, not labels: two units found at one slot are both recalled.
        out["recall"] = sum(p is not None for p in positions) / n_gold
        pr, rc = out["precision"], out["recall"]
        out["F1"] = 2 * pr * rc / (pr + rc) if pr + rc else 0.0
        return out
    if profile == "mamut-sklearn":
        if not answered or not labels:
            return {"nDCG": 0.0, "AP": 0.0}
        gold = min(n_gold, sum(labels) + sum(p is None for p in positions))
        tail_neg = 0
        if pool_size is not None:
            tail_neg = max(0, pool_size - len(labels) - (gold - sum(labels)))
        return sklearn_query(labels, gold, tail_neg)
    raise ValueError(f"unknown MAMUT profile {profile!r}; expected one of {', '.join(PROFILES)}")
