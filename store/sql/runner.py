"""The read-only SQL runner behind ``engines sql``: one query against the cache, safe to hand to colleagues.

The protection is in the database, not in parsing the text (``store.sql.readonly``): on
SQLite a ``mode=ro`` connection with an authorizer, on PostgreSQL a security-definer
function owned by the ``engines_reader`` role inside a READ ONLY transaction. The
checks here (one statement, a query keyword first) only give a clearer message.

A refusal (not a single query, or it tried to change something, read files or switch
roles) is :class:`Refused` (exit code ``EXIT_REFUSED``), nothing changed; any other error
(syntax, unknown table, the timeout) a one-line :class:`~store.errors.UserError`.
The command itself (options, printing) is ``cli/commands/sql.py``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from store.db import check_sqlite_file
from store.errors import DatabaseError, UserError

EXIT_REFUSED = 2
SQLITE_KEYWORDS = ("select", "with", "values", "pragma", "explain")
PG_KEYWORDS = ("select", "with", "values", "table")
# SQLSTATEs that mean "not allowed" rather than "wrong": no privilege, read-only
# transaction, not allowed here (data-modifying WITH in a subquery, SET ROLE in a
# security-definer function), prohibited statement.
_PG_REFUSED = {"42501", "25001", "25006", "0A000", "2F003", "38002", "38003", "38004", "28000"}
_PG_TIMEOUT = "57014"
# Limits (README, "engines sql"): --timeout at most MAX_TIMEOUT seconds (a larger value is
# refused); a value SQLite computes at most MAX_VALUE_BYTES (larger: an error naming the
# limit); a cell kept to CELL_CHARS characters (PostgreSQL cuts it in the reader function);
# rows fetched in batches of FETCH_BATCH and kept until they hold RESULT_BYTES, then the
# result is cut with a note. Memory stays far below 1 GB whatever the query.
MAX_TIMEOUT = 600.0
MAX_VALUE_BYTES = 16 * 2**20
CELL_CHARS = 65536
RESULT_BYTES = 64 * 2**20
FETCH_BATCH = 200


class Refused(UserError):
    exit_code = EXIT_REFUSED


def _statements(sql: str) -> int:
    """Number of statements (``;``-separated outside quotes and comments, empty ones ignored).

    ``E'...'`` strings take backslash escapes (``E'\\''`` is one quote), so a ``;`` after
    one is seen where PostgreSQL sees it.
    """
    n, i, cur, L = 0, 0, False, len(sql)
    while i < L:
        c = sql[i]
        if c in "'\"":
            escapes = c == "'" and i > 0 and sql[i - 1] in "eE" and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
            j = i + 1
            while j < L:
                if escapes and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == c:
                    if j + 1 < L and sql[j + 1] == c:  # doubled quote inside
                        j += 2
                        continue
                    break
                j += 1
            i = L if j >= L else j + 1
            cur = True
            continue
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            i = L if j == -1 else j + 1
            continue
        if sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = L if j == -1 else j + 2
            continue
        if c == "$":
            m = re.match(r"\$[A-Za-z_]*\$", sql[i:])
            if m:
                j = sql.find(m.group(0), i + len(m.group(0)))
                i = L if j == -1 else j + len(m.group(0))
                cur = True
                continue
        if c == ";":
            n += cur
            cur = False
        elif not c.isspace():
            cur = True
        i += 1
    return n + cur


def _first_keyword(sql: str) -> str:
    s = sql
    while True:
        s = s.lstrip()
        if s.startswith("--"):
            s = s.partition("\n")[2]
        elif s.startswith("/*"):
            s = s.partition("*/")[2]
        else:
            break
    if s.startswith("("):
        return "("
    m = re.match(r"[A-Za-z_]+", s)
    return m.group(0).lower() if m else s[:10]


def _strip_trailing_semicolons(sql: str) -> str:
    s = sql.rstrip()
    while s.endswith(";"):
        s = s[:-1].rstrip()
    return s


def check_timeout(timeout: float) -> None:
    """``--timeout`` within its limit (a larger value is refused, not lowered)."""
    if timeout > MAX_TIMEOUT:
        raise UserError(f"--timeout {timeout:g}: at most {MAX_TIMEOUT:g} s; give a smaller value")


def run_query(url: str, query: str, *, timeout: float, max_rows: int) -> tuple[list[str], list[tuple], bool | str]:
    """Check ``query`` (one statement, a query keyword first) and run it read-only against
    the database at ``url``: (columns, rows with cells cut, cut: True at ``max_rows``, a
    note when the result passed ``RESULT_BYTES``, else False)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        from store.db import create_db_engine

        create_db_engine(url)  # raises the one-line "cannot parse database URL" error
        raise
    backend = parsed.get_backend_name()
    n = _statements(query)
    if n == 0:
        raise UserError("empty query; pass one SELECT, e.g. \"SELECT * FROM v_answers LIMIT 5\"")
    if n != 1:
        raise Refused("one statement only; pass a single SELECT (no `;`-separated list)")
    allowed = SQLITE_KEYWORDS if backend == "sqlite" else PG_KEYWORDS
    kw = _first_keyword(query)
    if kw != "(" and kw not in allowed:
        raise Refused(f"{kw.upper()!s} is not a query; engines sql runs one {', '.join(k.upper() for k in allowed)}")
    if backend == "sqlite":
        return run_sqlite(_sqlite_path(parsed), query, timeout=timeout, max_rows=max_rows)
    if backend == "postgresql":
        return run_postgres(url, query, timeout=timeout, max_rows=max_rows)
    from store.db import create_db_engine

    create_db_engine(url)  # the one-line "unsupported scheme" error
    raise DatabaseError(f"unsupported database URL {url!r}")


# --------------------------------------------------------------------- SQLite


def _sqlite_path(url: sa.URL) -> Path:
    if not url.database or url.database == ":memory:":
        raise DatabaseError("engines sql needs a database file, not an in-memory database; pass --db sqlite:///PATH")
    path = Path(url.database).expanduser()
    check_sqlite_file(path, must_exist=True)
    return path


def run_sqlite(path: Path, query: str, *, timeout: float, max_rows: int) -> tuple[list[str], list[tuple], bool]:
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
    # A step that runs long between two progress calls is interrupted from outside.
    import threading

    watchdog = threading.Timer(timeout, conn.interrupt)
    watchdog.daemon = True
    watchdog.start()
    try:
        cur = conn.execute(query)
        cols = [d[0] for d in cur.description] if cur.description else []
        rows, cut = _fetch(cur.fetchmany, max_rows)
    except sqlite3.Warning as exc:  # "You can only execute one statement at a time."
        raise Refused(f"one statement only ({exc})") from None
    except sqlite3.Error as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if denied or "not authorized" in msg:
            raise Refused(f"{denied[0] if denied else msg} is not allowed: engines sql only reads") from None
        if "interrupted" in msg:
            raise UserError(f"the statement ran longer than --timeout {timeout:g} s and was stopped") from None
        if "database is locked" in msg:
            raise UserError(f"the database {path} stayed locked by another process for --timeout {timeout:g} s; "
                            "try again when it is idle, or pass a longer --timeout") from None
        if "too big" in msg:
            raise UserError(f"SQL error: a value is larger than {MAX_VALUE_BYTES // 2**20} MiB, the most engines sql "
                            "computes; select a part of it (substr(x, 1, N), length(x))") from None
        if "readonly" in msg or "read-only" in msg:
            raise Refused(f"{msg}: engines sql only reads") from None
        raise UserError(f"SQL error: {msg}") from None
    finally:
        watchdog.cancel()
        conn.close()
    return cols, rows, cut


def _keep(v: Any) -> Any:
    """A cell as kept for printing: long text cut to CELL_CHARS, a long blob by its length."""
    if isinstance(v, str) and len(v) > CELL_CHARS:
        return v[:CELL_CHARS] + "…"
    if isinstance(v, (bytes, memoryview)) and len(v) > CELL_CHARS:
        return f"<{len(v)} bytes>"
    return v


def _fetch(fetchmany, max_rows: int, convert=None) -> tuple[list[tuple], bool | str]:
    """Rows in batches, cells cut, until max_rows (cut: True) or RESULT_BYTES (cut: a note)."""
    rows: list[tuple] = []
    size = 0
    while True:
        batch = fetchmany(FETCH_BATCH)
        if not batch:
            return rows, False
        for r in batch:
            if len(rows) == max_rows:
                return rows, True
            r = tuple(_keep(v) for v in (convert(r) if convert else r))
            rows.append(r)
            size += sum(len(v) if isinstance(v, (str, bytes)) else 16 for v in r)
            if size > RESULT_BYTES:
                return rows, (f"cut at {len(rows):,} rows: the result passed {RESULT_BYTES // 2**20} MiB, the most "
                              "engines sql keeps (select fewer or shorter columns)")


# ----------------------------------------------------------------- PostgreSQL


def _pairs(text: str | None) -> list[tuple[str, Any]]:
    return json.loads(text, object_pairs_hook=lambda pairs: pairs) if text else []


def run_postgres(url: str, query: str, *, timeout: float, max_rows: int) -> tuple[list[str], list[tuple], bool]:
    import psycopg

    from store import db as dbmod
    from store.sql.readonly import FIX_HINT, FUNCTION, READER_ROLE, reader_problem

    engine = dbmod.create_db_engine(url)
    try:
        dbmod.check_reachable(engine)
        with engine.connect() as conn:
            try:
                problem = reader_problem(conn)
                conn.rollback()
                if problem is not None:
                    raise Refused(f"{problem}; it never runs with your own rights: {FIX_HINT}")
                raw = conn.connection.driver_connection
                try:
                    with raw.cursor() as cur:
                        # A READ ONLY transaction on top of the reader's rights (some
                        # functions the reader may call still write, e.g. lo_create).
                        cur.execute("SET TRANSACTION READ ONLY")
                        cur.execute("SELECT set_config('statement_timeout', %s, true)", (f"{int(timeout * 1000)}ms",))
                        q = _strip_trailing_semicolons(query)
                    # A server-side cursor: rows arrive in batches, never the whole result at once.
                    with raw.cursor(name="engines_sql") as named:
                        named.execute(f"SELECT * FROM {FUNCTION}(%s, %s, false)", (q, max_rows))
                        first: list[str] = []

                        def convert(r):  # noqa: ANN001, ANN202
                            pairs = _pairs(r[0])
                            if not first:
                                first.extend(k for k, _ in pairs)
                            return tuple(v for _, v in pairs)

                        rows, cut = _fetch(named.fetchmany, max_rows, convert)
                    with raw.cursor() as cur:
                        if rows:
                            cols = list(first)
                        else:
                            cur.execute(f"SELECT * FROM {FUNCTION}(%s, %s, true)", (q, 0), prepare=True)
                            one = cur.fetchone()
                            cols = [k for k, _ in _pairs(one[0] if one else None)]
                except psycopg.Error as exc:
                    msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    state = getattr(exc, "sqlstate", None)
                    if state in _PG_REFUSED:
                        raise Refused(f"{msg} (engines sql runs with the rights of the read-only role {READER_ROLE})") from None
                    if state == "55P03":  # lock_not_available: the reader function's lock_timeout
                        raise UserError(f"{msg}: another session holds a lock on what the query reads (a migration?); "
                                        "try again when it is done") from None
                    if state == _PG_TIMEOUT:
                        raise UserError(f"the statement ran longer than --timeout {timeout:g} s and was cancelled") from None
                    raise UserError(f"SQL error: {msg}") from None
                finally:
                    raw.rollback()
            finally:
                # Settings the query may have changed for the session never reach the pool.
                conn.invalidate()
    except sa.exc.OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
        raise DatabaseError(f"cannot use database {dbmod.redact_url(url)}: {reason}") from None
    finally:
        engine.dispose()
    return cols, rows, cut

