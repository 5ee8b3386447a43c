"""Paired comparisons of a scoring run (``score --compare A B``; METHODOLOGY.md).

Each pair is compared on the queries both rows are scored on (a sampled row: its own
sample), aligned by query id, with one paired bootstrap per metric both rows have.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scoring.bootstrap import Bootstrap
from store.errors import InputError


def parse_pairs(compare: Any) -> list[tuple[str, str]]:
    """``compare`` as a list of (A, B): one pair ``(A, B)`` or a list of pairs."""
    if not compare:
        return []
    if len(compare) == 2 and all(isinstance(x, str) for x in compare):
        return [(compare[0], compare[1])]
    out = []
    for pair in compare:
        if len(pair) != 2:
            raise InputError(f"--compare takes two system ids, got {list(pair)}")
        out.append((pair[0], pair[1]))
    return out


def paired_comparisons(
    pairs: Sequence[tuple[str, str]], system_scores: Sequence[Any], boot: Bootstrap, n: int, *,
    resamples: int, seed: int,
) -> list[dict[str, Any]]:
    """One row per (pair, metric): diff of means A − B, its CI and p, and the n compared.

    ``system_scores`` are :class:`scoring.results.SystemScore`; ``boot`` is the run's draw
    over its ``n`` scored queries, reused when both rows are scored on all of them."""
    comparisons = []
    for a_id, b_id in pairs:  # ids were checked against refs before scoring
        sa_, sb_ = (next(x for x in system_scores if x.ref.id == w) for w in (a_id, b_id))
        # The queries both rows are scored on (a sampled row: its own sample), aligned.
        ia = {qid: i for i, qid in enumerate(sa_.qids)}
        ib = {qid: i for i, qid in enumerate(sb_.qids)}
        common = [qid for qid in sa_.qids if qid in ib]
        idx_a = np.asarray([ia[q] for q in common], dtype=np.int64)
        idx_b = np.asarray([ib[q] for q in common], dtype=np.int64)
        pboot = boot if len(common) == n and len(sa_.qids) == len(sb_.qids) == n else Bootstrap.draw(
            len(common), resamples=resamples, seed=seed)
        for metric in sa_.arrays:
            if metric not in sb_.arrays or not len(common):
                continue
            pr = pboot.paired(sa_.arrays[metric][idx_a], sb_.arrays[metric][idx_b])
            comparisons.append({"a": a_id, "b": b_id, "metric": metric, "diff": pr.diff, "ci": list(pr.ci), "p": pr.p,
                                "n": len(common)})
    return comparisons
