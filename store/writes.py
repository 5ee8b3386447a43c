"""Writing engine configurations, answers and hits: one path for crawled and local rows."""

from __future__ import annotations

import contextlib
import gc
import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import Answer, EngineConfig
from store.names import normalize_name
from store.types import utcnow


@dataclass(frozen=True)
class HitRow:
    rank: int  # 1-based, as returned
    name: str  # as returned (dotted if the engine sent a list)
    raw: Any = None
    # Set when the hit is a corpus row by construction (local engines); crawled hits
    # are resolved later by the scorer.
    resolved_corpus_id: int | None = None
    declaration_id: int | None = None
    resolution: str | None = None


def ensure_config(
    session: Session,
    *,
    engine: str,
    endpoint_version: str,
    params: dict[str, Any],
    config_hash: str,
    label: str | None = None,
    local: bool = False,
    result_cap: int | None = None,
    licence: str | None = None,
) -> EngineConfig:
    """Get or create the configuration with this hash (safe against a concurrent creator)."""
    found = session.execute(sa.select(EngineConfig).where(EngineConfig.config_hash == config_hash)).scalar_one_or_none()
    if found is not None:
        return found
    cfg = EngineConfig(
        engine=engine,
        endpoint_version=endpoint_version,
        params=params,
        config_hash=config_hash,
        label=label or engine,
        local=local,
        result_cap=result_cap,
        licence=licence,
    )
    try:
        with session.begin_nested():
            session.add(cfg)
    except IntegrityError:
        return session.execute(sa.select(EngineConfig).where(EngineConfig.config_hash == config_hash)).scalar_one()
    return cfg


def add_answer(
    session: Session,
    *,
    config_id: int,
    query_text: str,
    query_sha256: str,
    hits: Iterable[HitRow],
    epoch: int = 0,
    exchange_id: int | None = None,
    parser_version: int | None = None,
    latency_ms: float | None = None,
    meta: dict[str, Any] | None = None,
    dropped_items: int = 0,
) -> Answer:
    """Add one ranked list (caller commits) and return it. Ranks are kept exactly as given.

    Written by :func:`add_answers` (the one write of answers and hits); many answers at once
    go there directly.
    """
    (answer_id,) = add_answers(session, [AnswerRow(
        config_id=config_id, query_text=query_text, query_sha256=query_sha256, hits=list(hits), epoch=epoch,
        exchange_id=exchange_id, parser_version=parser_version, latency_ms=latency_ms, meta=meta,
        dropped_items=dropped_items)])
    return session.get(Answer, answer_id)


@dataclass
class AnswerRow:
    """One ranked list for :func:`add_answers` (the fields of :func:`add_answer`)."""

    config_id: int
    query_text: str
    query_sha256: str
    hits: Sequence[HitRow]
    epoch: int = 0
    exchange_id: int | None = None
    parser_version: int | None = None
    latency_ms: float | None = None
    meta: dict[str, Any] | None = None
    dropped_items: int = 0


def add_answers(session: Session, answers: Iterable[AnswerRow]) -> list[int]:
    """Add many ranked lists in the caller's transaction (caller commits); their ids in order.

    The same rows as :func:`add_answer` once per answer, written by :func:`insert_answers`
    (one multi-row answer insert and one bulk write of hit tuples) instead of an ORM flush
    per answer: local runs write hundreds of thousands of hits (perf/write_hits.py). A
    conflicting current answer raises IntegrityError for the whole call, as it would for
    :func:`add_answer` without a savepoint.
    """
    answers = list(answers)
    if not answers:
        return []
    session.flush()  # pending ORM rows first, so the order of inserts stays the caller's
    now = utcnow()
    dumps = _JSON.encode  # what json.dumps(raw) calls, without its keyword handling per hit
    normalized: dict[str, str | None] = {}  # the same names recur across answers
    rows: list[dict[str, Any]] = []
    hits: list[list[tuple]] = []
    for a in answers:
        rows.append(answer_row(a.config_id, a.query_text, a.query_sha256, a.epoch, a.exchange_id,
                               a.parser_version, now, len(a.hits), a.latency_ms, a.dropped_items, meta=a.meta))
        tuples = []
        for h in a.hits:
            name, raw = h.name, h.raw
            norm = normalized.get(name, _MISSING)
            if norm is _MISSING:
                norm = normalized[name] = normalize_name(name)
            tuples.append((h.rank, name, norm, None if raw is None else dumps(raw),
                           h.resolved_corpus_id, h.declaration_id, h.resolution))
        hits.append(tuples)
    return insert_answers(session.connection(), rows, hits)  # type: ignore[return-value]


def answer_row(config_id: int, query_text: str, query_sha256: str, epoch: int, exchange_id: int | None,
               parser_version: int | None, fetched_at: Any, n_returned: int, latency_ms: float | None,
               dropped_items: int, *, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ``answers`` row as :func:`insert_answers` takes it (current, not superseded)."""
    return {"config_id": config_id, "query_text": query_text, "query_sha256": query_sha256, "epoch": epoch,
            "exchange_id": exchange_id, "parser_version": parser_version, "fetched_at": fetched_at,
            "n_returned": n_returned, "latency_ms": latency_ms, "meta": meta, "superseded": False,
            "dropped_items": dropped_items}


_ANSWERS = Answer.__table__
_INSERT_ANSWERS = sa.insert(_ANSWERS).returning(_ANSWERS.c.id, sort_by_parameter_order=True)
_FIRST_ANSWERS: dict[str, Any] = {}  # dialect → INSERT .. ON CONFLICT DO NOTHING RETURNING (built once)


def _first_answers(dialect: str):
    stmt = _FIRST_ANSWERS.get(dialect)
    if stmt is None:
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = _FIRST_ANSWERS[dialect] = insert(_ANSWERS).on_conflict_do_nothing().returning(
            _ANSWERS.c.id, _ANSWERS.c.config_id, _ANSWERS.c.query_sha256, _ANSWERS.c.epoch)
    return stmt


def insert_answers(conn: sa.Connection, rows: list[dict[str, Any]], hits: list[list[tuple]], *,
                   fetch_once: bool = False) -> list[int | None]:
    """The one write of answers and their hits (crawled, imported, re-parsed and local rows),
    in the caller's transaction: ``rows`` (:func:`answer_row`) with one multi-row insert,
    then every hit of the answers written (``hits[i]``: the hits of ``rows[i]`` as tuples
    in ``_HIT_COLUMNS`` order without ``answer_id``) with one :func:`write_hit_rows`.
    Returns the answers' ids in order.

    ``fetch_once``: an answer already current for its configuration × text × epoch (answered
    meanwhile by another worker or path, or earlier in ``rows``) is not written, its id is
    None and its hits are not written (the first answer stays, without a savepoint per
    answer). Otherwise such a conflict raises IntegrityError for the whole call.
    """
    if not rows:
        return []
    if fetch_once:
        got = {(c, sha, e): i for i, c, sha, e in conn.execute(_first_answers(conn.dialect.name), rows)}
        ids: list[int | None] = []
        for r in rows:
            # Rows go in in order: of several with the same key, the first one was written.
            ids.append(got.pop((r["config_id"], r["query_sha256"], r["epoch"]), None))
    else:
        ids = list(conn.execute(_INSERT_ANSWERS, rows).scalars())
    # Driver-level tuples: SQLAlchemy's per-row parameter processing (a dict and a JSON bind
    # per hit) cost more than the insert itself.
    write_hit_rows(conn, [(aid, *h) for aid, hs in zip(ids, hits) if aid is not None for h in hs])
    return ids


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a bulk step (parsing and writing a batch).

    Parsing 500 bodies allocates millions of small containers, each allocation counting
    towards a collection that scans every live object and finds nothing to free (the
    objects are acyclic). Reference counting
    still frees everything; the collector runs again when the step ends.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_JSON = json.JSONEncoder()  # json.dumps' defaults, as SQLAlchemy's JSON type writes raw
_MISSING = object()
_HIT_COLUMNS = (
    "answer_id", "rank", "name", "normalized_name", "raw", "resolved_corpus_id", "declaration_id", "resolution",
)


def driver_insert_sql(conn: sa.Connection, table: str, columns: Iterable[str]) -> str:
    """A driver-level INSERT of one row (``?`` or ``%s`` placeholders, the dialect's quoting)."""
    columns = list(columns)
    quote = conn.dialect.identifier_preparer.quote
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    return f"INSERT INTO {table} ({', '.join(quote(c) for c in columns)}) VALUES ({', '.join([mark] * len(columns))})"


_HITS_SQL: dict[str, str] = {}  # dialect → SQL: built once, not per crawled answer


def hits_insert_sql(conn: sa.Connection) -> str:
    """The driver-level INSERT of one ``hits`` row (columns in ``_HIT_COLUMNS`` order)."""
    sql = _HITS_SQL.get(conn.dialect.name)
    if sql is None:
        sql = _HITS_SQL[conn.dialect.name] = driver_insert_sql(conn, "hits", _HIT_COLUMNS)
    return sql


_HITS_COPY = "COPY hits ({}) FROM STDIN".format(", ".join(_HIT_COLUMNS))


def write_hit_rows(conn: sa.Connection, rows: list[tuple]) -> None:
    """``hits`` rows (tuples in ``_HIT_COLUMNS`` order) in ``conn``'s transaction: one
    driver-level executemany on SQLite, one ``COPY`` on PostgreSQL.

    (On PostgreSQL, executemany runs one INSERT per row on the server and multi-row
    ``INSERT ... VALUES`` measured slower still for large batches; COPY is one statement:
    perf/write_hits.py and perf/crawl_throughput.py, 2026-12-01.)
    """
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        with conn.connection.driver_connection.cursor() as cur, cur.copy(_HITS_COPY) as copy:
            write = copy.write_row
            for row in rows:
                write(row)
        return
    conn.exec_driver_sql(hits_insert_sql(conn), rows)


def _raw_encoder():
    """``json.dumps``' own C encoder, built once, without the cycle check (a hit's raw item was
    decoded from JSON: it has no cycles; too deep still raises RecursionError): ``json.dumps``
    builds this encoder anew for every call, which cost more than encoding a LeanSearch hit.
    None when this Python has no C encoder or it does not give ``json.dumps``' text."""
    try:
        from json.encoder import c_make_encoder, encode_basestring_ascii

        enc = c_make_encoder(None, _JSON.default, encode_basestring_ascii, None, _JSON.key_separator,
                             _JSON.item_separator, False, False, True)
        sample = {"a": [1, 2.5, -0.0, 1e300, True, None, "ℕ \u0000\"\\\ud83d"], "b": {"c": "x\ty\x7f"}}
        return enc if "".join(enc(sample, 0)) == _JSON.encode(sample) else None
    except Exception:  # noqa: BLE001 - another Python's internals: json.dumps' public path instead
        return None


_C_RAW = _raw_encoder()


def encode_raw(raw: Any) -> str | None:
    """A hit's ``raw`` as the JSON text SQLAlchemy's JSON type would write (``json.dumps``)."""
    if raw is None:
        return None
    if _C_RAW is not None:
        return "".join(_C_RAW(raw, 0))
    return _JSON.encode(raw)
