"""Corpus loading and lookup: a corpus file into ``declarations`` in one transaction; a stored corpus by name.

Loading streams the file in batches inside one transaction, so memory stays bounded and
a failure leaves nothing behind. Names are not unique and are all kept (every copy is a
gold). The pieces it drives live beside it in :mod:`store.corpus`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store.corpus.batches import DECL_COLUMNS, Tally, iter_batches
from store.corpus.readahead import ReadAhead
from store.corpus.source import resolve_source, sha256_file
from store.db import Database
from store.errors import InputError
from store.models import Corpus
from store.types import utcnow

_SQLITE_ROWS_PER_INSERT = 500
LOCAL_REVISION = "local"


@dataclass
class LoadResult:
    corpus_id: int
    name: str
    revision: str
    sha256: str
    rows: int
    created: bool  # False when the same file was already loaded (no-op)
    meta: dict[str, Any] = field(default_factory=dict)


def _insert_sql(conn: sa.Connection) -> str:
    from store.writes import driver_insert_sql

    return driver_insert_sql(conn, "declarations", DECL_COLUMNS)


def _bulk_inserter(conn: sa.Connection) -> Callable[[Any], None]:
    """A function taking batches from :func:`store.corpus.batches.iter_batches`.

    PostgreSQL: a COPY per batch fed preformatted text (``write_row`` per row cost more
    than the server's own work; a COPY per batch, as before, reports a bad value at the
    batch that holds it). SQLite: straight to the driver (the ORM/Core per-row parameter
    processing cost three times the SQLite insert itself, perf/corpus_load.py), as
    INSERTs of up to ``_SQLITE_ROWS_PER_INSERT`` rows each: sqlite3 lets go of the GIL
    for each statement it steps, and with one statement per row (executemany) the reader
    thread held the GIL through nearly every step, so the two threads took turns instead
    of overlapping."""
    if conn.dialect.name == "postgresql":
        cursor = conn.connection.driver_connection.cursor()
        quote = conn.dialect.identifier_preparer.quote
        copy_sql = f"COPY declarations ({', '.join(quote(c) for c in DECL_COLUMNS)}) FROM STDIN"

        def copy(text: str) -> None:
            with cursor.copy(copy_sql) as cp:
                cp.write(text)

        return copy
    sql = _insert_sql(conn)
    dbapi = conn.connection.driver_connection
    cursor = dbapi.cursor()
    per = _SQLITE_ROWS_PER_INSERT
    getlimit = getattr(dbapi, "getlimit", None)  # Python 3.11+
    if getlimit is not None:
        import sqlite3

        per = min(per, getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(DECL_COLUMNS),
                  getlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT))
    else:
        per = min(per, 999 // len(DECL_COLUMNS))  # SQLite's smallest default limits
    values_row = "(" + ", ".join(["?"] * len(DECL_COLUMNS)) + ")"
    many_sql = sql.split(" VALUES ")[0] + " VALUES " + ", ".join([values_row] * per)
    flat = chain.from_iterable

    def insert(batch: list[tuple]) -> None:
        full = len(batch) - len(batch) % per
        for i in range(0, full, per):
            cursor.execute(many_sql, list(flat(batch[i:i + per])))
        if full < len(batch):
            cursor.executemany(sql, batch[full:])

    return insert


_NAME_INDEX = "ix_declarations_corpus_id_full_name"


def _drop_name_index_if_empty(conn: sa.Connection) -> str | None:
    """On SQLite, when ``declarations`` is empty, drop its (corpus_id, full_name) index
    inside the load's transaction and return the statement that made it, to run again
    after the rows are in: building it once from sorted keys cost 0.2-0.3 s where keeping
    it up to date row by row cost 0.6 s of a 250k-row load. A failed load rolls the drop
    back with everything else. With rows already there, rebuilding would sort them too."""
    if conn.exec_driver_sql("SELECT 1 FROM declarations LIMIT 1").first() is not None:
        return None
    sql = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'declarations' AND name = ?",
        (_NAME_INDEX,),
    ).scalar()
    if sql is None:
        return None
    conn.exec_driver_sql(f'DROP INDEX "{_NAME_INDEX}"')
    return sql


def load_corpus(
    db: Database,
    src: str,
    *,
    name: str,
    revision: str | None = None,
    progress: Callable[[int], None] | None = None,
    shown_as: str | None = None,
) -> LoadResult:
    """Load a corpus file in one transaction. Same file again → no-op; another file under
    the same (name, revision) → refused. ``shown_as``: the source as recorded and named in
    messages, when ``src`` is a stand-in (standard input spooled to a file: ``-``)."""
    source = resolve_source(src)
    if shown_as is not None:
        source = replace(source, display=shown_as)
    if revision and source.revision and revision != source.revision:
        raise InputError(f"--revision {revision} contradicts the revision in {src}")
    revision = revision or source.revision or LOCAL_REVISION
    digest = sha256_file(source.path)

    with db.session() as s:
        existing = s.execute(
            sa.select(Corpus).where(Corpus.name == name, Corpus.revision == revision)
        ).scalar_one_or_none()
    if existing is not None:
        if existing.sha256 == digest:
            return LoadResult(existing.id, name, revision, digest, existing.row_count, False, existing.meta or {})
        raise InputError(
            f"corpus {name!r} revision {revision!r} is already loaded from a different file "
            f"(sha256 {existing.sha256[:12]}, this file {digest[:12]}); use another --name or --revision"
        )

    tally = Tally()
    n = 0
    with db.engine.begin() as conn:
        corpus_id = conn.execute(
            sa.insert(Corpus.__table__).returning(Corpus.__table__.c.id),
            {
                "name": name,
                "revision": revision,
                "sha256": digest,
                "source": source.display,
                "row_count": 0,
                "loaded_at": utcnow(),
            },
        ).scalar_one()
        copy = conn.dialect.name == "postgresql"
        reader = ReadAhead(iter_batches(source.path, source.display, corpus_id, copy, tally))
        insert_rows = _bulk_inserter(conn)
        rebuild_index = None if copy else _drop_name_index_if_empty(conn)
        try:
            for batch, count in reader:
                insert_rows(batch)
                n += count
                if progress:
                    progress(n)
        finally:
            reader.close()
        if rebuild_index:
            conn.exec_driver_sql(rebuild_index)
        if n == 0:
            raise InputError(f"{source.display}: no declarations in the file")
        meta = {
            "kinds": dict(tally.kinds.most_common()),
            "duplicate_names": sum(1 for c in tally.names.values() if c > 1),
            "distinct_names": len(tally.names),
            "extra_keys": dict(tally.extra_keys.most_common()),
            "file": source.path.name,
        }
        conn.execute(
            sa.update(Corpus.__table__).where(Corpus.__table__.c.id == corpus_id).values(row_count=n, meta=meta)
        )
    return LoadResult(corpus_id, name, revision, digest, n, True, meta)


def pick_corpus(session: Session, spec: str | None) -> Corpus:
    """The corpus named ``NAME`` or ``NAME@REVISION``; with none given, the only loaded one."""
    rows = list(session.execute(sa.select(Corpus).order_by(Corpus.id)).scalars())
    listing = ", ".join(f"{c.name}@{c.revision}" for c in rows) or "none"
    if spec is None:
        if len(rows) == 1:
            return rows[0]
        if not rows:
            raise InputError("no corpus is loaded; load one with `engines corpus load SRC --name NAME`")
        raise InputError(f"several corpora are loaded ({listing}); choose one with --corpus NAME[@REVISION]")
    name, _, rev = spec.partition("@")
    found = [c for c in rows if c.name == name and (not rev or c.revision == rev)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputError(f"no corpus {spec!r} in the database (loaded: {listing})")
    raise InputError(f"corpus {spec!r} has several revisions ({listing}); name one as NAME@REVISION")


def find_corpus(db: Database, spec: str | None = None) -> Corpus:
    """:func:`pick_corpus` in a session of its own."""
    with db.session() as s:
        return pick_corpus(s, spec)
