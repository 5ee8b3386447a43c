"""Units that share a returned row: maximum matching for precision-type figures.

METHODOLOGY.md, "Units that share a returned row": when one corpus name belongs to two
gold units (six MathlibMPR items reuse a premise in an alternative group), recall-type
figures still count per unit (``pos(g)``, the stored positions), but precision-type
figures credit each returned row to at most one unit. h₁(k) is the size of a maximum
matching between the top-k rows and the units they belong to, grown row by row: each new
row tries an augmenting path (Kuhn's algorithm). A row matched once stays matched when
later rows augment, so the rows matched in the final matching are exactly the ranks at
which h₁ grows; those ranks ("credited positions") are what P@k, DCG and AP read.

Stored positions (one earliest rank per unit) cannot tell which later rows also hit a
unit, so the few affected queries are recomputed here from the answer's hits; the
positions table stays the source of truth for every other query. The same path serves
``--shared-with``, which narrows a group to some of its names (the stored positions were
computed with all of them).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from scoring.metrics import K_MAX
from scoring.positions import unit_positions
from scoring.resolve import chunked, resolved_clause
from store.models import Answer, Hit


def has_overlap(units: Sequence[Iterable[str]]) -> bool:
    """True when some name belongs to two units (one row can hit both)."""
    seen: set[str] = set()
    for names in units:
        mine = set(names)
        if mine & seen:
            return True
        seen |= mine
    return False


def match_rows(
    ranked: Iterable[tuple[int, str | None]], units: Sequence[Iterable[str]], k_max: int = K_MAX
) -> dict[int, int]:
    """Final maximum matching, grown in rank order: {rank of a credited row: unit index}.

    A name seen at an earlier rank is a duplicate: it keeps its slot but is not a new row,
    so repeating a shared premise cannot credit its second group.
    """
    unit_of: dict[str, list[int]] = {}
    for j, names in enumerate(units):
        for nm in dict.fromkeys(names):
            unit_of.setdefault(nm, []).append(j)
    rows: list[tuple[int, list[int]]] = []
    seen: set[str] = set()
    for rank, name in sorted((r, n) for r, n in ranked if n is not None and r <= k_max):
        if name in seen:
            continue
        seen.add(name)
        if name in unit_of:
            rows.append((rank, unit_of[name]))
    owner: dict[int, int] = {}  # unit → index into rows

    def augment(i: int, visited: set[int]) -> bool:
        for j in rows[i][1]:
            if j in visited:
                continue
            visited.add(j)
            if j not in owner or augment(owner[j], visited):
                owner[j] = i
                return True
        return False

    for i in range(len(rows)):
        augment(i, set())
    return {rows[i][0]: j for j, i in owner.items()}


def credit_positions(
    ranked: Iterable[tuple[int, str | None]], units: Sequence[Iterable[str]], k_max: int = K_MAX
) -> list[int]:
    """The ranks at which h₁ grows, ascending (equal to the found unit positions when units
    are disjoint)."""
    return sorted(match_rows(ranked, units, k_max))


def answer_hits(
    session: Session, config_id: int, epoch: int, shas: Sequence[str], k_max: int = K_MAX,
    live_corpus_id: int | None = None,
) -> dict[str, list[tuple[int, str]]]:
    """sha → resolved (rank, name) pairs of the system's current answer, for these texts only
    (``live_corpus_id``: resolved in the query, :func:`scoring.resolve.resolved_clause`).

    Every answered text gets an entry (possibly empty), so an unanswered one stays absent.
    """
    a, h = Answer.__table__, Hit.__table__
    out: dict[str, list[tuple[int, str]]] = {}
    for chunk in chunked(list(shas)):
        ids: dict[int, str] = {}
        for aid, sha in session.execute(
            sa.select(a.c.id, a.c.query_sha256).where(
                a.c.config_id == config_id, a.c.epoch == epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded
            )
        ):
            ids[aid] = sha
            out.setdefault(sha, [])
        if not ids:
            continue
        for aid, rank, name in session.execute(
            sa.select(h.c.answer_id, h.c.rank, h.c.normalized_name).where(
                h.c.answer_id.in_(list(ids)), h.c.rank <= k_max, resolved_clause(live_corpus_id)
            )
        ):
            out[ids[aid]].append((rank, name))
    return out


def recompute(
    session: Session,
    *,
    config_id: int,
    epoch: int,
    affected: Sequence[tuple[int, str, Sequence[Sequence[str]]]],
    k_max: int = K_MAX,
    live_corpus_id: int | None = None,
) -> dict[int, tuple[list[int | None], list[int]]]:
    """For (query id, sha, unit names) of the affected queries: query id → (pos per unit,
    credited positions), from the answer's hits. Unanswered queries are absent."""
    if not affected:
        return {}
    hits = answer_hits(session, config_id, epoch, sorted({sha for _, sha, _ in affected}), k_max, live_corpus_id)
    out: dict[int, tuple[list[int | None], list[int]]] = {}
    for qid, sha, units in affected:
        ranked = hits.get(sha)
        if ranked is None:
            continue
        out[qid] = (unit_positions(ranked, units, k_max), credit_positions(ranked, units, k_max))
    return out
