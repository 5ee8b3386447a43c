"""``engines sql`` against hostile queries (issue 21): memory bounded whatever the query
(values, cells and the whole result cut at documented sizes, peak RSS measured in a child
process), lock / notify / sleep calls refused inside PostgreSQL's reader function, a
lock_timeout, a --timeout maximum, and SQLite waiting for a lock no longer than --timeout."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cli.main import app
from store.sql import runner as sqlmod
from store.db import open_database

REFUSED, ERROR = 2, 1


def _db(url: str) -> str:
    open_database(url).dispose()  # the schema (and, on PostgreSQL, the reader function)
    return url


def _cli(url: str, *args: str):
    return CliRunner().invoke(app, ["sql", "--tsv", *args], env={"ENGINES_DATABASE_URL": url})


def _one_line(res) -> str:  # noqa: ANN001
    assert "Traceback" not in res.output
    assert res.stderr.count("\n") == 1, res.stderr
    return res.stderr.strip()


def _sql_in_child(url: str, *args: str) -> tuple[int, str, str, int]:
    """``engines sql`` in its own process: exit code, stdout, stderr, peak RSS in bytes."""
    # VmHWM, not getrusage's ru_maxrss: that one keeps the peak of the forked test process.
    code = ("import atexit, re, sys\n"
            "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
            "atexit.register(lambda: sys.stderr.write('MAXRSS %d\\n' % hwm()))\n"
            "from cli.main import app\n"
            f"sys.argv = ['engines', 'sql', '--tsv', *{list(args)!r}]\n"
            "app()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "ENGINES_DATABASE_URL": url})
    err = [ln for ln in p.stderr.splitlines() if not ln.startswith("MAXRSS ")]
    rss = int(next(ln for ln in p.stderr.splitlines() if ln.startswith("MAXRSS ")).split()[1]) * 1024
    return p.returncode, p.stdout, "\n".join(err), rss


def test_sqlite_giant_values_are_one_line_and_memory_stays_small(sqlite_url: str) -> None:
    _db(sqlite_url)
    code, out, err, rss = _sql_in_child(sqlite_url, "SELECT " + ", ".join(["zeroblob(900000000)"] * 5))
    assert code == ERROR and err.count("\n") == 0, err
    assert err.startswith("error: SQL error: a value is larger than 16 MiB") and "substr(x, 1, N)" in err
    assert rss < 300 * 2**20, rss


def test_sqlite_cells_follow_max_width_and_the_whole_result_is_cut(sqlite_url: str) -> None:
    """Cells are cut at --max-width, not at 65,536 characters (issue 34 item 8): 100,000
    characters come whole with --max-width 200000, and the result is cut at 64 MiB."""
    _db(sqlite_url)
    q = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 1500) "
         "SELECT n, printf('%.*c', 100000, 'x') AS big FROM r")
    res = _cli(sqlite_url, "--max-width", "200000", q)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "n\tbig"
    cells = [ln.split("\t")[1] for ln in lines[1:]]
    assert all(c == "x" * 100000 for c in cells)
    kept = sqlmod.RESULT_BYTES // (sys.getsizeof("x" * 100000) + 16) + 1
    assert len(cells) == kept < 1500
    assert _one_line(res) == (f"cut at {kept:,} rows: the result passed 64 MiB, the most engines sql keeps "
                              "(select fewer or shorter columns)")
    res = _cli(sqlite_url, "--max-width", "1000", q)
    cells = [ln.split("\t")[1] for ln in res.stdout.splitlines()[1:]]
    assert len(cells) == 1500 and all(c == "x" * 999 + "…" for c in cells)
    assert _one_line(res) == "1,500 values cut at --max-width 1000; --max-width 0 shows whole values"


def test_timeout_has_a_maximum(sqlite_url: str) -> None:
    _db(sqlite_url)
    res = _cli(sqlite_url, "--timeout", "601", "SELECT 1")
    assert res.exit_code == ERROR
    assert _one_line(res) == "error: --timeout 601: at most 600 s; give a smaller value"
    assert _cli(sqlite_url, "--timeout", "600", "SELECT 1").exit_code == 0


def test_sqlite_waits_for_a_lock_no_longer_than_the_timeout(sqlite_url: str) -> None:
    """Another process holds the file exclusively: the reader gives up at --timeout (it
    waited 30 s per attempt before, whatever --timeout said)."""
    path = sa.make_url(_db(sqlite_url)).database
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("DELETE FROM benchmarks")
        res = _cli(sqlite_url, "--timeout", "0.5", "SELECT count(*) FROM benchmarks")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert res.exit_code == ERROR
    assert _one_line(res).startswith(f"error: the database {Path(path)} stayed locked by another process for "
                                     "--timeout 0.5 s")


@pytest.mark.postgres
def test_postgres_giant_cells_are_cut_in_the_reader_function(pg_url: str) -> None:
    _db(pg_url)
    code, out, err, rss = _sql_in_child(pg_url, "--max-width", "200000",
                                        "SELECT 1 AS a, repeat('x', 20000000) AS big, 2 AS b")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "a\tbig\tb"
    a, big, b = lines[1].split("\t")
    assert (a, b) == ("1", "2") and big == "x" * 199999 + "…"
    assert err == "1 value cut at --max-width 200000; --max-width 0 shows whole values"
    assert rss < 300 * 2**20, rss


@pytest.mark.postgres
@pytest.mark.parametrize("stmt", [
    "SELECT pg_advisory_lock(42)", "SELECT pg_try_advisory_xact_lock(42)", "SELECT PG_ADVISORY_LOCK_SHARED(1, 2)",
    "SELECT pg_notify('c', 'x')", "SELECT pg_sleep(20)", "SELECT pg_catalog.pg_sleep_for('20 seconds')",
    'SELECT "pg_sleep"(20)', 'SELECT U&"pg\\005fsleep"(20)',
])
def test_postgres_lock_notify_and_sleep_are_refused(pg_url: str, stmt: str) -> None:
    _db(pg_url)
    res = _cli(pg_url, "--timeout", "30", stmt)
    assert res.exit_code == REFUSED, res.output
    line = _one_line(res)
    assert line.startswith("engines sql: refused: engines sql: ") and "is not allowed" in line, line


@pytest.mark.postgres
def test_postgres_reader_gives_up_on_a_lock(pg_url: str) -> None:
    """A session holding ACCESS EXCLUSIVE (a migration): the reader fails at its lock_timeout
    with one line, not after --timeout."""
    _db(pg_url)
    eng = sa.create_engine(pg_url)
    conn = eng.connect()
    try:
        conn.exec_driver_sql("LOCK TABLE benchmarks IN ACCESS EXCLUSIVE MODE")
        res = _cli(pg_url, "--timeout", "60", "SELECT count(*) FROM benchmarks")
    finally:
        conn.rollback()
        conn.close()
        eng.dispose()
    assert res.exit_code == ERROR
    line = _one_line(res)
    assert "lock timeout" in line and "another session holds a lock" in line and "--timeout" not in line
