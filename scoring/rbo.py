"""Rank similarity of two returned lists: extrapolated rank-biased overlap and top-k Jaccard.

RBO (Webber, Moffat & Zobel, "A similarity measure for indefinite rankings", ACM TOIS
28(4), 2010) weighs agreement at depth d by p^(d-1): with p = 0.9 the top 10 carry
about 86 % of the weight. Engines return lists of different lengths (a cap, fewer
matches), so the extrapolated form with the paper's uneven-length case is used,
Eq. (32): for a shorter list S (length s) and a longer list L (length l),

    RBO_ext = (1-p)/p * [ sum_{d=1..l} X_d/d p^d + sum_{d=s+1..l} X_s (d-s)/(s d) p^d ]
              + [ (X_l - X_s)/l + X_s/s ] p^l

where X_d = |S_{:d} ∩ L_{:d}| (for d > s, S is all of S). For s = l this is Eq. (23).
Items past s in L are compared only against all of S, and the unseen tail of S is
assumed to agree at the rate seen so far (X_s / s) — the paper's extrapolation.
Two empty lists are identical (1.0); one empty list shares nothing (0.0).
"""

from __future__ import annotations

from typing import Hashable, Sequence

P_DEFAULT = 0.9


def _dedup(items: Sequence[Hashable]) -> list[Hashable]:
    # RBO is defined over rankings without repeats: a repeated name keeps its first rank.
    seen: set[Hashable] = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def rbo_ext(a: Sequence[Hashable], b: Sequence[Hashable], p: float = P_DEFAULT) -> float:
    """Extrapolated RBO of two rankings (Eq. 32 of Webber et al. 2010; symmetric)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    a, b = _dedup(a), _dedup(b)
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    S, L = (a, b) if len(a) <= len(b) else (b, a)
    s, l = len(S), len(L)
    seen_s: set[Hashable] = set()
    seen_l: set[Hashable] = set()
    x = 0  # X_d, maintained incrementally
    x_s = 0
    total = 0.0  # sum_{d=1..l} X_d/d p^d
    tail = 0.0  # sum_{d=s+1..l} X_s (d-s)/(s d) p^d
    pd = 1.0
    for d in range(1, l + 1):
        pd *= p
        item_l = L[d - 1]
        if d <= s:
            item_s = S[d - 1]
            if item_s == item_l:
                x += 1
            else:
                x += (item_s in seen_l) + (item_l in seen_s)
            seen_s.add(item_s)
            seen_l.add(item_l)
            if d == s:
                x_s = x
        else:
            x += item_l in seen_s
            tail += x_s * (d - s) / (s * d) * pd
        total += x / d * pd
    value = (1 - p) / p * (total + tail) + ((x - x_s) / l + x_s / s) * pd
    return min(1.0, max(0.0, value))


def jaccard_at(a: Sequence[Hashable], b: Sequence[Hashable], k: int = 10) -> float:
    """|A_k ∩ B_k| / |A_k ∪ B_k| of the top-k sets; two empty lists are identical (1.0)."""
    sa, sb = set(_dedup(a)[:k]), set(_dedup(b)[:k])
    union = sa | sb
    return 1.0 if not union else len(sa & sb) / len(union)
