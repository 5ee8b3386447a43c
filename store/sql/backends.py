"""The two runners behind ``engines sql``, each run in the worker process
(:mod:`store.sql.worker`): SQLite through a ``mode=ro`` connection with an authorizer,
PostgreSQL through the reader function (:mod:`store.sql.readonly`) in a READ ONLY transaction.

Each keeps rows through :class:`store.sql.fetch.Kept` (cells cut at ``--max-width`` and
counted, batches bounded by bytes, the result cut at ``RESULT_BYTES``) and maps the
database's errors to one line: :class:`~store.sql.fetch.Refused` (exit 2) or
:class:`~store.errors.UserError`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable

import sqlalchemy as sa

from store.errors import DatabaseError, UserError
from store.sql.fetch import MAX_CELL_CHARS, MAX_VALUE_BYTES, Kept, Refused, batch_rows

# SQLSTATEs that mean "not allowed" rather than "wrong": no privilege, read-only
# transaction, not allowed here (data-modifying WITH in a subquery, SET ROLE in a
# security-definer function), prohibited statement.
_PG_REFUSED = {"42501", "25001", "25006", "0A000", "2F003", "38002", "38003", "38004", "28000"}
_PG_TIMEOUT = "57014"
_OUT_OF_MEMORY = ("the query needs more memory than engines sql allows; select fewer or shorter columns "
                  "(substr(x, 1, N), length(x)) or fewer rows")


def timed_out(timeout: float) -> UserError:
    return UserError(f"the statement ran longer than --timeout {timeout:g} s and was stopped")


def strip_trailing_semicolons(sql: str) -> str:
    s = sql.rstrip()
    while s.endswith(";"):
        s = s[:-1].rstrip()
    return s


# --------------------------------------------------------------------- SQLite


def run_sqlite(path: Path, query: str, *, timeout: float, max_rows: int, max_width: int = 0,
               kept: Kept | None = None) -> tuple[list[str], list[tuple], bool | str]:
    """Run ``query`` read-only against the SQLite file ``path``: (columns, kept rows, cut)."""
    kept = kept if kept is not None else Kept(max_rows, max_width)
    denied: list[str] = []
    from store.sql.readonly import sqlite_connect_read_only

    try:
        # Waiting for another process's lock counts against --timeout too.
        conn = sqlite_connect_read_only(path, denied, timeout=timeout)
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot open {path} read-only: {exc}; check the file and its directory") from None
    deadline = time.monotonic() + timeout
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    # A step that runs long between two progress calls is interrupted from outside (and a
    # step that never looks, e.g. instr() on long strings, is ended by the worker's deadline).
    import threading

    watchdog = threading.Timer(timeout, conn.interrupt)
    watchdog.daemon = True
    watchdog.start()
    try:
        cur = conn.execute(query)
        cols = [d[0] for d in cur.description] if cur.description else []
        while True:  # one row at a time: a row can hold 16 MiB per value
            row = cur.fetchone()
            if row is None or not kept.add(row):
                break
        kept.flush()
    except sqlite3.Warning as exc:  # "You can only execute one statement at a time."
        raise Refused(f"one statement only ({exc})") from None
    except MemoryError:
        raise UserError(_OUT_OF_MEMORY) from None
    except sqlite3.Error as exc:
        raise _sqlite_error(exc, denied, path, timeout) from None
    finally:
        watchdog.cancel()
        conn.close()
    return cols, kept.rows, kept.cut


def _sqlite_error(exc: sqlite3.Error, denied: list[str], path: Path, timeout: float) -> UserError:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if denied or "not authorized" in msg:
        return Refused(f"{denied[0] if denied else msg} is not allowed: engines sql only reads")
    if "interrupted" in msg:
        return timed_out(timeout)
    if "database is locked" in msg:
        return UserError(f"the database {path} stayed locked by another process for --timeout {timeout:g} s; "
                         "try again when it is idle, or pass a longer --timeout")
    if "too big" in msg:
        return UserError(f"SQL error: a value is larger than {MAX_VALUE_BYTES // 2**20} MiB, the most engines sql "
                         "computes; select a part of it (substr(x, 1, N), length(x))")
    if "out of memory" in msg:
        return UserError(_OUT_OF_MEMORY)
    if "readonly" in msg or "read-only" in msg:
        return Refused(f"{msg}: engines sql only reads")
    return UserError(f"SQL error: {msg}")


# ----------------------------------------------------------------- PostgreSQL


def _pairs(text: str | None) -> list[tuple[str, Any]]:
    return json.loads(text, object_pairs_hook=lambda pairs: pairs) if text else []


def run_postgres(url: str, query: str, *, timeout: float, max_rows: int, max_width: int = 0,
                 kept: Kept | None = None, on_pid: Callable[[int], None] | None = None
                 ) -> tuple[list[str], list[tuple], bool | str]:
    """Run ``query`` through the reader function at ``url``: (columns, kept rows, cut).
    ``on_pid`` learns the server process (so a deadline can end it from outside)."""
    from store import db as dbmod

    kept = kept if kept is not None else Kept(max_rows, max_width)
    engine = dbmod.create_db_engine(url)
    try:
        dbmod.check_reachable(engine)
        with engine.connect() as conn:
            try:
                cols = _pg_query(conn, query, timeout=timeout, kept=kept, on_pid=on_pid)
            finally:
                # Settings the query may have changed for the session never reach the pool.
                conn.invalidate()
    except sa.exc.OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
        raise DatabaseError(f"cannot use database {dbmod.redact_url(url)}: {reason}") from None
    finally:
        engine.dispose()
    return cols, kept.rows, kept.cut


def _pg_query(conn: sa.Connection, query: str, *, timeout: float, kept: Kept, on_pid) -> list[str]:  # noqa: ANN001
    import psycopg

    from store.sql.readonly import CELL_SETTING, FIX_HINT, FUNCTION, READER_ROLE, reader_problem

    problem = reader_problem(conn)
    conn.rollback()
    if problem is not None:
        raise Refused(f"{problem}; it never runs with your own rights: {FIX_HINT}")
    raw = conn.connection.driver_connection
    if on_pid is not None:
        on_pid(raw.info.backend_pid)
    q = strip_trailing_semicolons(query)
    cells = kept.max_width or MAX_CELL_CHARS
    try:
        with raw.cursor() as cur:
            # A READ ONLY transaction on top of the reader's rights (some functions the
            # reader may call still write, e.g. lo_create).
            cur.execute("SET TRANSACTION READ ONLY")
            cur.execute("SELECT set_config('statement_timeout', %s, true), set_config(%s, %s, true)",
                        (f"{int(timeout * 1000)}ms", CELL_SETTING, str(cells)))
        first: list[str] = []
        # A server-side cursor: rows arrive in batches sized by bytes, never the whole result.
        with raw.cursor(name="engines_sql") as named:
            named.execute(f"SELECT * FROM {FUNCTION}(%s, %s, false)", (q, kept.max_rows))
            biggest = 0
            while True:
                batch = named.fetchmany(batch_rows(biggest))
                if not batch:
                    break
                biggest = max(biggest, max(len(r[0] or "") for r in batch))
                if not _keep_batch(batch, kept, first):
                    break
            del batch
        kept.flush()
        if kept.count:
            return first
        with raw.cursor() as cur:
            cur.execute(f"SELECT * FROM {FUNCTION}(%s, %s, true)", (q, 0), prepare=True)
            one = cur.fetchone()
            return [k for k, _ in _pairs(one[0] if one else None)]
    except MemoryError:
        raise UserError(_OUT_OF_MEMORY) from None
    except psycopg.Error as exc:
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        state = getattr(exc, "sqlstate", None)
        if state in _PG_REFUSED:
            raise Refused(f"{msg} (engines sql runs with the rights of the read-only role {READER_ROLE})") from None
        if state == "55P03":  # lock_not_available: the reader function's lock_timeout
            raise UserError(f"{msg}: another session holds a lock on what the query reads (a migration?); "
                            "try again when it is done") from None
        if state == _PG_TIMEOUT:
            raise timed_out(timeout) from None
        raise UserError(f"SQL error: {msg}") from None
    finally:
        raw.rollback()


def _keep_batch(batch: list, kept: Kept, first: list[str]) -> bool:
    for i in range(len(batch)):
        pairs = _pairs(batch[i][0])
        batch[i] = None  # the raw text goes as soon as it is decoded
        if not first:
            first.extend(k for k, _ in pairs)
        if not kept.add(v for _, v in pairs):
            return False
    return True
