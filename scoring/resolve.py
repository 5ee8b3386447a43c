"""Resolution: returned names → rows of one pinned corpus, stored on each hit.

A hit's ``normalized_name`` (``store.names.normalize_name`` of what the engine returned:
dotted, ``«»`` unquoted, ``_root_.`` dropped, stripped) resolves when it equals a
``declarations.full_name`` of the chosen corpus exactly. The hit then records
``resolution = 'resolved'``, the corpus and the first row with that name (all copies of a
name are the same gold, so any copy is as good as another); otherwise
``resolution = 'not_in_corpus'``. Gold names resolve by the same exact match.

Resolution runs inside the database (one UPDATE with a correlated subquery over the
``(corpus_id, full_name)`` index) and only touches hits not yet resolved against this
corpus, so re-scoring is cheap and scoring never needs the network.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store.models import Answer, Declaration, Hit

RESOLVED = "resolved"
NOT_IN_CORPUS = "not_in_corpus"
_CHUNK = 900  # stay under SQLite's bound-parameter limits on every version


def chunked(items: Sequence, size: int = _CHUNK) -> Iterable[Sequence]:
    """``items`` in slices of at most ``size`` (900): for ``IN (...)`` lists under SQLite's parameter limit."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def resolve_hits(session: Session, corpus_id: int, config_id: int, epoch: int, shas: Sequence[str]) -> int:
    """Resolve this system's hits for these query texts against the corpus; return how many
    hits were (re)resolved (0 when everything was already resolved against it)."""
    h, d, a = Hit.__table__, Declaration.__table__, Answer.__table__
    first_row = (
        sa.select(sa.func.min(d.c.id))
        .where(d.c.corpus_id == corpus_id, d.c.full_name == h.c.normalized_name)
        .scalar_subquery()
    )
    changed = 0
    for chunk in chunked(list(shas)):
        answers = sa.select(a.c.id).where(a.c.config_id == config_id, a.c.epoch == epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded)
        stmt = (
            sa.update(h)
            .where(
                h.c.answer_id.in_(answers),
                sa.or_(h.c.resolved_corpus_id.is_(None), h.c.resolved_corpus_id != corpus_id, h.c.resolution.is_(None)),
            )
            .values(
                declaration_id=first_row,
                resolved_corpus_id=corpus_id,
                resolution=sa.case((first_row.is_not(None), RESOLVED), else_=NOT_IN_CORPUS),
            )
            .execution_options(synchronize_session=False)
        )
        changed += session.execute(stmt).rowcount or 0
    return changed


def resolved_clause(live_corpus_id: int | None = None) -> sa.ColumnElement[bool]:
    """The condition on a hit whose name is a row of the scoring corpus: as :func:`resolve_hits`
    stored it (the default), or, with ``live_corpus_id``, decided in the query from that
    corpus's rows — for a read-only database, where nothing can be stored."""
    h, d = Hit.__table__, Declaration.__table__
    if live_corpus_id is None:
        return h.c.resolution == RESOLVED
    return sa.exists().where(d.c.corpus_id == live_corpus_id, d.c.full_name == h.c.normalized_name)


def names_in_corpus(session: Session, corpus_id: int, names: Iterable[str]) -> set[str]:
    """The subset of ``names`` that are some row's full_name in the corpus."""
    d = Declaration.__table__
    wanted = sorted(set(names))
    present: set[str] = set()
    for chunk in chunked(wanted):
        present.update(
            session.execute(
                sa.select(d.c.full_name).where(d.c.corpus_id == corpus_id, d.c.full_name.in_(chunk)).distinct()
            ).scalars()
        )
    return present


def resolution_counts(
    session: Session, corpus_id: int, config_id: int, epoch: int, shas: Sequence[str], k_max: int,
    *, live: bool = False,
) -> dict[str, int]:
    """Hits within k_max of this system's answers, by resolution outcome (``live``: decided
    from the corpus in the query, :func:`resolved_clause`, instead of as stored)."""
    h, a = Hit.__table__, Answer.__table__
    out = {RESOLVED: 0, NOT_IN_CORPUS: 0}
    outcome = sa.case((resolved_clause(corpus_id), RESOLVED), else_=NOT_IN_CORPUS) if live else h.c.resolution
    for chunk in chunked(list(shas)):
        where = [a.c.config_id == config_id, a.c.epoch == epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded,
                 h.c.rank <= k_max]
        if not live:
            where.append(h.c.resolved_corpus_id == corpus_id)
        rows = session.execute(
            sa.select(outcome, sa.func.count())
            .select_from(h.join(a, h.c.answer_id == a.c.id))
            .where(*where)
            .group_by(outcome)
        )
        for res, n in rows:
            if res in out:
                out[res] += n
    return out
