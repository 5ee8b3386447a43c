"""The crawl's database writes: one writer thread with group commit.

Every request of a crawl ends in a few writes: its send time, the exchange, its parse
outcome, answers, hits and the lease removal. Done as one transaction each from a thread pool they cost a commit apiece
and, on SQLite, contend for the file's one write lock (the busy handler sleeps in
milliseconds). Here one thread owns one connection and runs every queued write: it takes
whatever has queued while the previous commit ran and commits it as one transaction.

A caller awaits its write (:meth:`Writer.run`): the coroutine goes on only once the
transaction holding it is committed, so an answer is counted after it is durable and a
``kill -9`` loses at most the requests in flight (whose writes were not yet committed).
If one write of a group fails, the group is rolled back and every write of it is run
again in a transaction of its own, so only the failing one sees its error.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable, TypeVar

import sqlalchemy as sa

T = TypeVar("T")
Op = Callable[[sa.Connection], Any]

# Writes per transaction at most: a group this size commits in milliseconds.
MAX_GROUP = 256


_UNDO = "engines_undo_on_rollback"


def on_rollback(conn: sa.Connection, undo: Callable[[], None]) -> None:
    """Run ``undo`` if the transaction ``conn`` is in is rolled back (a write that took
    something out of memory puts it back, so a retry, or the next write, writes it).

    Honoured by :class:`Writer`, :class:`DirectWriter` and :func:`in_transaction`; nothing
    else must run a write that registers one."""
    conn.info.setdefault(_UNDO, []).append(undo)


def _settle(conn: sa.Connection, committed: bool) -> None:
    undos = conn.info.pop(_UNDO, None)
    if undos and not committed:
        for undo in reversed(undos):
            undo()


def in_transaction(conn: sa.Connection, op: Callable[[sa.Connection], T]) -> T:
    """``op(conn)`` in a transaction of its own on ``conn``, with :func:`on_rollback`'s undos."""
    try:
        with conn.begin():
            out = op(conn)
    except BaseException:
        _settle(conn, False)
        raise
    _settle(conn, True)
    return out


def _resolve(fut: asyncio.Future, ok: bool, value: Any) -> None:
    if fut.done():  # the caller was cancelled meanwhile: the write stands, nobody waits
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class Writer:
    """One thread, one connection, group commit. ``start()`` before use, ``close()`` after."""

    def __init__(self, db, *, max_group: int = MAX_GROUP) -> None:  # noqa: ANN001 - store.db.Database
        self.db = db
        self.max_group = max_group
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.commits = 0  # transactions committed
        self.writes = 0  # writes committed in them

    def start(self) -> "Writer":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="engines-writer", daemon=True)
            self._thread.start()
        return self

    async def run(self, op: Callable[[sa.Connection], T]) -> T:
        """Run ``op(conn)`` inside the next group's transaction; return once it is committed."""
        if self._thread is None:
            raise RuntimeError("Writer.run before start()")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((op, loop, fut))
        return await fut

    def close(self, final: Op | None = None) -> None:
        """Commit what is queued (and ``final``, last), then stop the thread."""
        if self._thread is not None:
            if final is not None:
                self._q.put((final, None, None))
            self._q.put(None)
            self._thread.join()
            self._thread = None

    # ------------------------------------------------------------------ thread

    def _loop(self) -> None:
        with self.db.engine.connect() as conn:
            checkpointer = None
            if conn.dialect.name == "sqlite":
                # SQLite runs a WAL checkpoint (copy back + fsync) inside whichever commit
                # crosses 1000 WAL pages: tens of milliseconds in the crawl's commit path every
                # few dozen exchanges. This connection does not; a thread of its own copies the
                # WAL back meanwhile (PASSIVE: it never blocks a writer or a reader).
                conn.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
                conn.commit()
                checkpointer = _Checkpointer(self.db).start()
            try:
                self._serve(conn)
            finally:
                if checkpointer is not None:
                    checkpointer.stop()
                    try:
                        conn.exec_driver_sql("PRAGMA wal_autocheckpoint=1000")  # the pooled connection as it was
                        conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        conn.commit()
                    except sa.exc.DBAPIError:
                        # A full disk (or a vanished file): the writes' own errors, handed to their
                        # callers, say what happened; the next start checkpoints what is left.
                        conn.invalidate()

    def _serve(self, conn: sa.Connection) -> None:
        stop = False
        while not stop:
            item = self._q.get()
            if item is None:
                return
            group = [item]
            while len(group) < self.max_group:
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                group.append(item)
            self._commit(conn, group)

    def _commit(self, conn: sa.Connection, group: list) -> None:
        results: list[tuple[bool, Any]] = []
        try:
            with conn.begin():
                for op, _loop, _fut in group:
                    results.append((True, op(conn)))
        except Exception as exc:  # noqa: BLE001 - one write failed: each again on its own, below
            _settle(conn, False)  # what the group's writes took from memory is back for the retries
            if len(group) == 1:
                results = [(False, exc)]
            else:
                results = []
                for op, _loop, _fut in group:
                    try:
                        results.append((True, in_transaction(conn, op)))
                        self.commits += 1
                    except Exception as exc:  # noqa: BLE001 - handed to its caller
                        results.append((False, exc))
        else:
            _settle(conn, True)
            self.commits += 1
        self.writes += sum(1 for ok, _ in results if ok)
        for (ok, value), (_op, loop, fut) in zip(results, group):
            if loop is None:
                continue  # close()'s final write: nobody awaits it
            try:
                loop.call_soon_threadsafe(_resolve, fut, ok, value)
            except RuntimeError:
                pass  # the caller's loop is closed: nobody is waiting


class _Checkpointer:
    """A thread that checkpoints a SQLite WAL every ``every`` seconds until stopped."""

    def __init__(self, db, every: float = 0.25) -> None:  # noqa: ANN001
        self.db = db
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engines-checkpoint", daemon=True)

    def start(self) -> "_Checkpointer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        with self.db.engine.connect() as conn:
            while not self._stop.wait(self.every):
                try:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sa.exc.OperationalError:
                    pass  # busy: the next round copies what this one could not
                conn.rollback()


class DirectWriter:
    """The same interface without a thread of its own: each write is its own transaction in a
    worker thread (for code that writes rarely, and for Fetchers built without a crawl run)."""

    def __init__(self, db) -> None:  # noqa: ANN001
        self.db = db
        self.commits = 0
        self.writes = 0

    def start(self) -> "DirectWriter":
        return self

    def _one(self, op: Callable[[sa.Connection], T]) -> T:
        with self.db.engine.connect() as conn:
            out = in_transaction(conn, op)
        self.commits += 1
        self.writes += 1
        return out

    async def run(self, op: Callable[[sa.Connection], T]) -> T:
        return await asyncio.to_thread(self._one, op)

    def close(self, final: Op | None = None) -> None:
        if final is not None:
            self._one(final)
