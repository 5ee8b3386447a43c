"""Issue 13 goal 2: the crawl's one writer (group commit) and what it must not give up.

- writes queued together commit in one transaction, and each caller resumes only once
  its write is committed (visible to another connection);
- a failing write fails alone: the group is rolled back and the others commit on their own;
- ``close(final)`` commits what is queued, then ``final``;
- a send time deferred to the next write (SQLite) survives that write's rollback: it is
  put back and written by the retry or the next write;
- on SQLite the crawl writes no row before a send: a crawl of the file that died
  (``kill -9``: its row still "running") makes the next one wait a whole window before
  its first send to each host, and marks the dead crawl ``killed``; a clean run does not
  wait.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import sqlalchemy as sa

import threading

from crawler.pacing import DbLedger
from crawler.writer import DirectWriter, Writer
from engines.base import Rate
from engines.emulate import StandIn
from store.db import open_database
from store.models import Crawl, Exchange, SendLog
from tests.support.crawl import (  # noqa: F401 - rows is a fixture
    MARGIN_S, N_MPR, _load_mpr, assert_server_window, crawl, rows, table_count,
)

_T = sa.table("t", sa.column("k", sa.Integer))


def _db(url: str):
    db = open_database(url)
    with db.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    return db


def _count(db) -> int:
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(_T)).scalar_one()


def _insert(k: int):
    def op(conn: sa.Connection) -> int:
        conn.execute(sa.insert(_T).values(k=k))
        return k
    return op


@pytest.mark.parametrize("any_db_url", ["sqlite", "postgres"], indirect=True)
async def test_queued_writes_commit_together_and_each_caller_sees_its_commit(any_db_url: str) -> None:
    db = _db(any_db_url)
    writer = Writer(db).start()
    try:
        seen: list[int] = []

        async def one(k: int) -> None:
            assert await writer.run(_insert(k)) == k
            seen.append(_count(db))  # another connection: the write is committed already

        await asyncio.gather(*(one(k) for k in range(200)))
        assert _count(db) == 200
        assert all(n >= 1 for n in seen)
        assert writer.writes == 200
        assert writer.commits < 200  # grouped: fewer transactions than writes
    finally:
        writer.close()
        db.dispose()


async def test_a_failing_write_fails_alone(sqlite_url: str) -> None:
    db = _db(sqlite_url)
    writer = Writer(db).start()
    try:
        # k=1 twice: the second violates the primary key. Queued together, the group fails
        # as a whole; every other write must still commit, and only the duplicate raises.
        results = await asyncio.gather(*(writer.run(_insert(k)) for k in [0, 1, 2, 1, 3]), return_exceptions=True)
        assert results[:3] == [0, 1, 2] and results[4] == 3
        assert isinstance(results[3], sa.exc.IntegrityError)
        assert _count(db) == 4
    finally:
        writer.close()
        db.dispose()


async def test_close_commits_the_queue_then_the_final_write(sqlite_url: str) -> None:
    db = _db(sqlite_url)
    writer = Writer(db).start()
    order: list[int] = []

    def final(conn: sa.Connection) -> None:
        order.append(_count_in(conn))
        conn.execute(sa.insert(_T).values(k=99))

    def _count_in(conn: sa.Connection) -> int:
        return conn.execute(sa.select(sa.func.count()).select_from(_T)).scalar_one()

    try:
        pending = [asyncio.ensure_future(writer.run(_insert(k))) for k in range(5)]
        await asyncio.sleep(0)  # queued
        await asyncio.to_thread(writer.close, final)
        assert [await p for p in pending] == list(range(5))
        assert order == [5] and _count(db) == 6
        direct = DirectWriter(db)
        assert await direct.run(_insert(7)) == 7
        direct.close(_insert(8))
        assert _count(db) == 8
    finally:
        db.dispose()


def _sends(db) -> list[tuple[str, float]]:
    with db.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(SendLog.host, SendLog.sent_at).order_by(SendLog.sent_at))]


async def test_deferred_send_times_survive_a_rolled_back_write(sqlite_url: str) -> None:
    """The exclusive ledger writes a send's row with the crawl's next write. When that
    write's transaction is rolled back (a group with a failing write, or the write itself
    failing), the rows go back in memory and the retry or the next write commits them."""
    db = _db(sqlite_url)
    ledger = DbLedger(db, exclusive=True)
    writer = Writer(db).start()
    gate = threading.Event()

    def hold(conn: sa.Connection) -> None:
        gate.wait(10)  # keeps the writer busy while the next writes queue up as one group

    def flush_then(k: int):
        def op(conn: sa.Connection) -> int:
            ledger.flush_corrections(conn)
            conn.execute(sa.insert(_T).values(k=k))
            return k
        return op

    try:
        ledger.correct_later("a.example", 100.0, 100.5)
        ledger.correct_later("b.example", 101.0, 101.25)
        held = asyncio.ensure_future(writer.run(hold))
        await asyncio.sleep(0.05)
        # One group: the flush, then a duplicate key that rolls the whole group back.
        results = await asyncio.gather(asyncio.ensure_future(writer.run(flush_then(1))),
                                       asyncio.ensure_future(writer.run(_insert(1))),
                                       asyncio.sleep(0.05, gate.set()), return_exceptions=True)
        await held
        assert results[0] == 1 and isinstance(results[1], sa.exc.IntegrityError)
        assert _sends(db) == [("a.example", 100.5), ("b.example", 101.25)]  # written by the retry
        # The write that flushes fails itself: the row waits for the next write.
        ledger.correct_later("a.example", 102.0, 102.5)
        with pytest.raises(sa.exc.IntegrityError):
            await writer.run(flush_then(1))
        assert len(_sends(db)) == 2
        assert await writer.run(flush_then(2)) == 2
        assert _sends(db)[-1] == ("a.example", 102.5) and len(_sends(db)) == 3
        # The same through DirectWriter (no thread of its own).
        ledger.correct_later("c.example", 103.0, 103.5)
        with pytest.raises(sa.exc.IntegrityError):
            await DirectWriter(db).run(flush_then(2))
        assert await DirectWriter(db).run(flush_then(3)) == 3
        assert _sends(db)[-1] == ("c.example", 103.5)
    finally:
        gate.set()
        writer.close()
        db.dispose()


def _mark_dead_crawl(url: str) -> int:
    db = open_database(url)
    try:
        with db.session() as s, s.begin():
            row = Crawl(hostname="gone", pid=1, worker="gone:1:dead", code_version="x", status="running")
            s.add(row)
            s.flush()
            return row.id
    finally:
        db.dispose()


def _first_send(url: str) -> float:
    db = open_database(url)
    try:
        with db.session() as s:
            return min(s.execute(sa.select(SendLog.sent_at)).scalars())
    finally:
        db.dispose()


def test_after_a_killed_crawl_the_first_send_waits_a_window_and_a_clean_run_does_not(sqlite_url: str, rows) -> None:
    _load_mpr(sqlite_url)
    rate = Rate(20, 2.0)  # a 2 s window: long enough to see, short enough for a test
    dead = _mark_dead_crawl(sqlite_url)
    with StandIn("leanexplore", rows, rate=rate).in_thread() as srv:
        t0 = time.time()
        summary, rep = crawl(sqlite_url, {"leanexplore": srv}, rate=rate, limit=5)
        assert summary.results[0].answered_now == 5
        first = _first_send(sqlite_url)
        assert first >= t0 + rate.period + MARGIN_S  # one window plus the margin
        assert any("ended without finishing" in line for line in rep.lines), rep.lines
        db = open_database(sqlite_url)
        try:
            with db.session() as s:
                assert s.get(Crawl, dead).status == "killed"
                assert s.scalar(sa.select(sa.func.count()).select_from(Crawl).where(Crawl.status == "running")) == 0
        finally:
            db.dispose()
        # Every send of the finished run is in send_log (written with its exchange, not before).
        assert table_count(sqlite_url, SendLog) == table_count(sqlite_url, Exchange) == srv.stats.requests == 5
        assert table_count(sqlite_url, SendLog, SendLog.pending.is_(True)) == 0
        # A clean run next: the window is computed from the recorded sends, no extra wait.
        time.sleep(rate.period + 0.2)
        t1 = time.time()
        summary, rep = crawl(sqlite_url, {"leanexplore": srv}, rate=rate, limit=5)
        assert summary.results[0].answered_now == 5
        assert not any("ended without finishing" in line for line in rep.lines)
        db = open_database(sqlite_url)
        try:
            with db.session() as s:
                second = min(s.execute(sa.select(SendLog.sent_at).where(SendLog.sent_at >= t1)).scalars())
        finally:
            db.dispose()
        assert second - t1 < rate.period / 2
        assert_server_window(srv, rate)


async def test_sqlite_writer_checkpoints_in_the_background_and_restores_the_connection(sqlite_url: str) -> None:
    """The writer's connection leaves WAL checkpoints to a thread of its own (none inside a
    commit); when it closes, the WAL is copied back and the pooled connection is as before."""
    db = open_database(sqlite_url)
    with db.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE blobs (k INTEGER PRIMARY KEY, b BLOB)")
    writer = Writer(db).start()
    try:
        blob = b"x" * 20_000  # 5 pages a row: 400 rows pass SQLite's 1000-page autocheckpoint twice
        for k in range(400):
            await writer.run(lambda conn, k=k: conn.exec_driver_sql("INSERT INTO blobs VALUES (?, ?)", (k, blob)))
    finally:
        await asyncio.to_thread(writer.close)
    with db.engine.connect() as conn:
        busy, log, checkpointed = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
        assert busy == 0 and log == checkpointed  # everything copied back
        assert conn.exec_driver_sql("SELECT count(*) FROM blobs").scalar_one() == 400
    for _ in range(3):  # whichever pooled connection the writer had
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == 1000
    db.dispose()
