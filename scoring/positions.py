"""Gold positions: per (system, query, gold unit) the as-returned rank of the earliest hit.

``pos(g)`` is the 1-based rank, as returned, of the first hit whose resolved name belongs
to unit g (any of its names, any copy of a name), or ∞ (NULL) when none is within
k_max = 200. A row returned twice, or two names resolving to the same row, count at the
first occurrence only and the duplicate keeps its slot: positions are never renumbered,
so repeating oneself cannot help. Positions are stored in the ``positions`` table
(with ``n_retrieved`` = hits within k_max, so a divide-by-returned P@k stays computable)
and are the only input to every metric.

Stored positions are reused while they are fresh: same answered queries, computed after
the last answer arrived, and no hit of the system re-resolved in this run. Otherwise the
system's rows are recomputed in the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from scoring.metrics import K_MAX
from scoring.resolve import chunked, resolved_clause
from store.models import Answer, GoldName, GoldUnit, Hit, Position, Query
from store.types import utcnow


@dataclass(frozen=True)
class UnitRec:
    id: int
    ordinal: int
    kind: str  # single | original | alternative
    names: tuple[str, ...]


@dataclass(frozen=True)
class QueryRec:
    id: int
    qid: str
    target_id: str
    text: str
    sha: str
    style: str
    primary: bool
    kind: str | None
    difficulty: str | None
    units: tuple[UnitRec, ...]


def load_queries(session: Session, benchmark_id: int) -> list[QueryRec]:
    """Every query of a benchmark with its gold units, in qid order."""
    q, u, n = Query.__table__, GoldUnit.__table__, GoldName.__table__
    names: dict[int, list[str]] = {}
    for unit_id, name in session.execute(
        sa.select(n.c.gold_unit_id, n.c.name)
        .select_from(n.join(u, n.c.gold_unit_id == u.c.id).join(q, u.c.query_id == q.c.id))
        .where(q.c.benchmark_id == benchmark_id)
        .order_by(n.c.id)
    ):
        names.setdefault(unit_id, []).append(name)
    units: dict[int, list[UnitRec]] = {}
    for unit_id, query_id, ordinal, kind in session.execute(
        sa.select(u.c.id, u.c.query_id, u.c.ordinal, u.c.kind)
        .select_from(u.join(q, u.c.query_id == q.c.id))
        .where(q.c.benchmark_id == benchmark_id)
        .order_by(u.c.query_id, u.c.ordinal)
    ):
        units.setdefault(query_id, []).append(UnitRec(unit_id, ordinal, kind, tuple(names.get(unit_id, ()))))
    out = []
    for row in session.execute(
        sa.select(q.c.id, q.c.qid, q.c.target_id, q.c.text, q.c.query_sha256, q.c.style, q.c.primary, q.c.kind, q.c.difficulty)
        .where(q.c.benchmark_id == benchmark_id)
        .order_by(q.c.id)
    ):
        out.append(QueryRec(*row, units=tuple(units.get(row[0], ()))))
    return out


def unit_positions(
    ranked: Iterable[tuple[int, str | None]], units: Sequence[Iterable[str]], k_max: int = K_MAX
) -> list[int | None]:
    """pos(g) for each unit from (rank as returned, resolved full name or None) pairs.

    The minimum rank per unit is the first occurrence; later copies (duplicates, or other
    names of the same row) are ignored and keep their slot because ranks are not renumbered.
    """
    first: dict[str, int] = {}
    for rank, name in ranked:
        if name is None or rank > k_max:
            continue
        if name not in first or rank < first[name]:
            first[name] = rank
    out: list[int | None] = []
    for names in units:
        ranks = [first[nm] for nm in names if nm in first]
        out.append(min(ranks) if ranks else None)
    return out


def resolvable_units(query: QueryRec, present: set[str]) -> list[tuple[UnitRec, tuple[str, ...]]]:
    """The query's units with at least one name in the corpus, each with those names."""
    out = []
    for unit in query.units:
        names = tuple(nm for nm in unit.names if nm in present)
        if names:
            out.append((unit, names))
    return out


def _by_sha(queries: Sequence[QueryRec]) -> dict[str, list[QueryRec]]:
    by_sha: dict[str, list[QueryRec]] = {}
    for qr in queries:
        by_sha.setdefault(qr.sha, []).append(qr)
    return by_sha


def _current_answers(session: Session, config_id: int, epoch: int, shas: Sequence[str]):
    """(answer id → query sha of the system's current answers to these texts, newest fetch time)."""
    a = Answer.__table__
    answers: dict[int, str] = {}
    last_fetch = None
    for chunk in chunked(list(shas)):
        for aid, sha, fetched in session.execute(
            sa.select(a.c.id, a.c.query_sha256, a.c.fetched_at).where(
                a.c.config_id == config_id, a.c.epoch == epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded
            )
        ):
            answers[aid] = sha
            last_fetch = fetched if last_fetch is None or fetched > last_fetch else last_fetch
    return answers, last_fetch


def _position_rows(
    session: Session, answers: dict[int, str], by_sha: dict[str, list[QueryRec]], present: set[str], k_max: int,
    live_corpus_id: int | None = None,
) -> list[dict]:
    """One row (query_id, gold_unit_id, pos, n_retrieved) per resolvable unit of every answered
    query, from the answers' hits (resolved as stored, or in the query: ``live_corpus_id``)."""
    h = Hit.__table__
    ranked: dict[int, list[tuple[int, str]]] = {}
    n_retrieved: dict[int, int] = {}
    for chunk in chunked(list(answers)):
        for aid, n in session.execute(
            sa.select(h.c.answer_id, sa.func.count()).where(h.c.answer_id.in_(chunk), h.c.rank <= k_max).group_by(h.c.answer_id)
        ):
            n_retrieved[aid] = n
        for aid, rank, name in session.execute(
            sa.select(h.c.answer_id, h.c.rank, h.c.normalized_name).where(
                h.c.answer_id.in_(chunk), h.c.rank <= k_max, resolved_clause(live_corpus_id)
            )
        ):
            ranked.setdefault(aid, []).append((rank, name))
    rows = []
    for aid, sha in answers.items():
        for qr in by_sha[sha]:
            units = resolvable_units(qr, present)
            if not units:
                continue
            pos = unit_positions(ranked.get(aid, ()), [names for _, names in units], k_max)
            for (unit, _), pg in zip(units, pos):
                rows.append({"query_id": qr.id, "gold_unit_id": unit.id, "pos": pg,
                             "n_retrieved": n_retrieved.get(aid, 0)})
    return rows


def ensure_positions(
    session: Session,
    *,
    corpus_id: int,
    config_id: int,
    epoch: int,
    queries: Sequence[QueryRec],
    present: set[str],
    k_max: int = K_MAX,
    force: bool = False,
) -> bool:
    """Make the stored positions of this system current for these queries; True if rewritten."""
    p = Position.__table__
    by_sha = _by_sha(queries)
    answers, last_fetch = _current_answers(session, config_id, epoch, list(by_sha))
    answered = set(answers.values())
    expected = {qr.id for qr in queries if qr.sha in answered and resolvable_units(qr, present)}
    query_ids = [qr.id for qr in queries]

    if not force:
        stored: set[int] = set()
        oldest = None
        for chunk in chunked(query_ids):
            for qid, computed in session.execute(
                sa.select(p.c.query_id, sa.func.min(p.c.computed_at))
                .where(p.c.config_id == config_id, p.c.epoch == epoch, p.c.corpus_id == corpus_id, p.c.query_id.in_(chunk))
                .group_by(p.c.query_id)
            ):
                stored.add(qid)
                oldest = computed if oldest is None or computed < oldest else oldest
        if stored == expected and (not expected or (oldest is not None and last_fetch is not None and oldest >= last_fetch)):
            return False

    now = utcnow()
    rows = [{"config_id": config_id, "epoch": epoch, "corpus_id": corpus_id, **r, "computed_at": now}
            for r in _position_rows(session, answers, by_sha, present, k_max)]
    for chunk in chunked(query_ids):
        session.execute(
            sa.delete(p).where(
                p.c.config_id == config_id, p.c.epoch == epoch, p.c.corpus_id == corpus_id, p.c.query_id.in_(chunk)
            )
        )
    for i in range(0, len(rows), 5000):
        session.execute(sa.insert(p), rows[i : i + 5000])
    return True


def derive_positions(
    session: Session, *, corpus_id: int, config_id: int, epoch: int, queries: Sequence[QueryRec],
    present: set[str], k_max: int = K_MAX,
) -> dict[int, tuple[dict[int, int | None], int]]:
    """The positions :func:`ensure_positions` would store, derived in memory with every hit
    resolved in the query (a read-only database: nothing is written), in the form of
    :func:`read_positions`."""
    by_sha = _by_sha(queries)
    answers, _ = _current_answers(session, config_id, epoch, list(by_sha))
    out: dict[int, tuple[dict[int, int | None], int]] = {}
    for r in _position_rows(session, answers, by_sha, present, k_max, live_corpus_id=corpus_id):
        units, _ = out.setdefault(r["query_id"], ({}, r["n_retrieved"]))
        units[r["gold_unit_id"]] = r["pos"]
    return out


def read_positions(
    session: Session, *, corpus_id: int, config_id: int, epoch: int, query_ids: Sequence[int]
) -> dict[int, tuple[dict[int, int | None], int]]:
    """Stored positions: query id → ({gold unit id: pos or None}, n_retrieved)."""
    p = Position.__table__
    out: dict[int, tuple[dict[int, int | None], int]] = {}
    for chunk in chunked(list(query_ids)):
        for qid, unit_id, pos, n_ret in session.execute(
            sa.select(p.c.query_id, p.c.gold_unit_id, p.c.pos, p.c.n_retrieved).where(
                p.c.config_id == config_id, p.c.epoch == epoch, p.c.corpus_id == corpus_id, p.c.query_id.in_(chunk)
            )
        ):
            units, _ = out.setdefault(qid, ({}, n_ret))
            units[unit_id] = pos
    return out
