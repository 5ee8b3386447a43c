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

import re
from pathlib import Path

import sqlalchemy as sa

from store.db import check_sqlite_file
from store.errors import DatabaseError, UserError
from store.sql.fetch import (BATCH_BYTES, CELL_CHARS, EXIT_REFUSED, MAX_CELL_CHARS, MAX_TIMEOUT,  # noqa: F401
                             MAX_VALUE_BYTES, RESULT_BYTES, Refused, cut_note)
from store.sql.backends import run_postgres, run_sqlite  # noqa: F401 (the runners, in-process)
from store.sql.backends import strip_trailing_semicolons as _strip_trailing_semicolons  # noqa: F401

SQLITE_KEYWORDS = ("select", "with", "values", "pragma", "explain")
PG_KEYWORDS = ("select", "with", "values", "table")


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


def check_timeout(timeout: float) -> None:
    """``--timeout`` within its limit (a larger value is refused, not lowered)."""
    if timeout > MAX_TIMEOUT:
        raise UserError(f"--timeout {timeout:g}: at most {MAX_TIMEOUT:g} s; give a smaller value")


def run_query(url: str, query: str, *, timeout: float, max_rows: int, max_width: int = 0
              ) -> tuple[list[str], list[tuple], bool | str, int]:
    """Check ``query`` (one statement, a query keyword first) and run it read-only against
    the database at ``url`` in a worker process (:mod:`store.sql.worker`: ``timeout`` is a
    wall-clock bound): (columns, rows with cells cut at ``max_width`` (0: whole values up to
    the value limits), cut: True at ``max_rows``, a note when the result passed
    ``RESULT_BYTES``, else False; the number of cells cut)."""
    from store.sql.worker import run_in_worker

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
    opts = {"timeout": timeout, "max_rows": max_rows, "max_width": max_width}
    if backend == "sqlite":
        return run_in_worker("sqlite", _sqlite_path(parsed), query, **opts)
    if backend == "postgresql":
        return run_in_worker("postgresql", url, query, url=url, **opts)
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
