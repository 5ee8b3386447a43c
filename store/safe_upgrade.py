"""What keeps an upgrade from losing the archive: a copy first, real transactions, checks.

The cache is permanent, so a schema migration must never lose or rewrite an archived row.
On SQLite three things broke that promise before (an archive of the first landed version,
schema 0002, lost every hit and was then stranded):

- A batch migration rebuilds a table (create a new one, copy, drop the old, rename) while
  ``PRAGMA foreign_keys`` was on: dropping ``answers`` ran ``hits.answer_id``'s ``ON DELETE
  CASCADE`` and deleted every hit; dropping ``exchanges`` failed on the answers that point
  at it. SQLite's own recipe for a table rebuild turns foreign keys off first, which works
  only *outside* a transaction, and runs ``PRAGMA foreign_key_check`` before committing:
  :func:`migration_engine` opens such connections.
- The ``sqlite3`` module commits each DDL statement on its own (it opens a transaction only
  before DML), so a failed migration left half of its work behind (``_alembic_tmp_*``
  tables, a version number past the failure). :func:`migration_engine` hands transaction
  control to SQLAlchemy (``BEGIN IMMEDIATE`` … ``COMMIT``): every pending migration runs in
  one transaction, and a failure rolls all of it back.
- Nothing checked what a migration did. :class:`RowGuard` counts the archive's rows before
  and after, and looks for new foreign-key violations; either refuses the commit.

Before an upgrade of a SQLite file a copy is kept (:func:`backup_sqlite`, SQLite's backup
API). :func:`leftovers` and :func:`repair_leftovers` heal a file an earlier, broken
upgrade stranded. Only the standard library, SQLAlchemy and :mod:`store.errors`.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from store.errors import DatabaseError

# The archive: rows an upgrade may add to but never lose (host_state and send_log may merge
# rows, work_leases and positions are derived and may be rebuilt).
ARCHIVE_TABLES = ("exchanges", "parse_outcomes", "answers", "hits", "engine_configs", "crawls", "epochs",
                  "corpora", "declarations", "benchmarks", "queries", "gold_units", "gold_names",
                  "subsets", "subset_members")
TMP_PREFIX = "_alembic_tmp_"


def migration_engine(url: sa.URL | str) -> Engine:
    """A SQLite engine for migrating: foreign keys off (set before any transaction, as SQLite
    requires) and real transactions (``BEGIN IMMEDIATE``, DDL included), one connection."""
    engine = sa.create_engine(url, poolclass=NullPool, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:  # noqa: ANN001
        dbapi_connection.isolation_level = None  # the driver opens no transaction of its own
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA foreign_keys=OFF")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:  # noqa: ANN001
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now: one migrator at a time

    return engine


def leftovers(conn: sa.Connection) -> list[str]:
    """Tables a failed batch migration left behind (``_alembic_tmp_<table>``), SQLite only."""
    if conn.dialect.name != "sqlite":
        return []
    rows = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\\'",
                                (TMP_PREFIX.replace("_", "\\_") + "%",)).all()
    return sorted(name for (name,) in rows if name.startswith(TMP_PREFIX))


def repair_leftovers(conn: sa.Connection) -> list[str]:
    """Heal what a failed batch migration left (inside the caller's transaction, foreign keys off).

    A leftover beside its table is an abandoned copy (the original was never dropped, or the
    drop was rolled back): it goes. A leftover whose table is gone holds the only copy: it
    takes the table's name. Returns one phrase per table healed."""
    done = []
    tables = set(sa.inspect(conn).get_table_names())
    for tmp in leftovers(conn):
        table = tmp[len(TMP_PREFIX):]
        if table in tables:
            n = conn.exec_driver_sql(f'SELECT count(*) FROM "{tmp}"').scalar()
            conn.exec_driver_sql(f'DROP TABLE "{tmp}"')
            done.append(f"removed {tmp} (an abandoned copy of {table}, {n} rows; {table} is intact)")
        else:
            conn.exec_driver_sql(f'ALTER TABLE "{tmp}" RENAME TO "{table}"')
            done.append(f"renamed {tmp} to {table} (the only copy of {table})")
    return done


def _counts(conn: sa.Connection) -> dict[str, int]:
    present = set(sa.inspect(conn).get_table_names())
    return {t: conn.exec_driver_sql(f'SELECT count(*) FROM "{t}"').scalar() for t in ARCHIVE_TABLES if t in present}


def _fk_violations(conn: sa.Connection) -> set[tuple]:
    if conn.dialect.name != "sqlite":
        return set()  # PostgreSQL enforces foreign keys in every statement
    return {tuple(r) for r in conn.exec_driver_sql("PRAGMA foreign_key_check").all()}


@dataclass
class RowGuard:
    """The archive's row counts and foreign-key violations before a migration, checked after it."""

    counts: dict[str, int] = field(default_factory=dict)
    violations: set[tuple] = field(default_factory=set)

    @classmethod
    def take(cls, conn: sa.Connection) -> "RowGuard":
        return cls(_counts(conn), _fk_violations(conn))

    def check(self, conn: sa.Connection, where: str) -> None:
        """Raise (so the transaction is rolled back) when a row was lost or a reference broken."""
        after = _counts(conn)
        lost = [f"{t} {n:,} -> {after.get(t, 0):,}" for t, n in self.counts.items() if after.get(t, 0) < n]
        new = sorted(_fk_violations(conn) - self.violations)
        if lost or new:
            what = (f"it would lose rows ({'; '.join(lost)})" if lost else
                    f"it would leave {len(new)} rows pointing at rows that do not exist "
                    f"(first: {new[0][0]} row {new[0][1]} -> {new[0][2]})")
            raise DatabaseError(f"the upgrade of {where} was refused and rolled back: {what}; nothing was changed. "
                                "This is a bug in a migration of engines: please report it, and keep using the "
                                "version that wrote the database until it is fixed")


def backup_path(db_file: Path, revision: str) -> Path:
    """``cache.db.before-<revision>``, or ``…-2``, ``…-3`` when that copy exists already (never overwritten)."""
    dest = db_file.with_name(f"{db_file.name}.before-{revision}")
    n = 2
    while dest.exists():
        dest = db_file.with_name(f"{db_file.name}.before-{revision}-{n}")
        n += 1
    return dest


def backup_sqlite(db_file: Path, revision: str) -> tuple[Path, int]:
    """Copy a SQLite database (its write-ahead log included) with SQLite's backup API.

    Written to a ``.part`` file and renamed when complete, so a copy that exists is whole.
    Returns (path, bytes)."""
    dest = backup_path(db_file, revision)
    size = db_file.stat().st_size
    wal = db_file.with_name(db_file.name + "-wal")
    need = size + (wal.stat().st_size if wal.exists() else 0)
    free = shutil.disk_usage(dest.parent).free
    if free < need + (1 << 20):
        raise DatabaseError(
            f"cannot keep a copy of {db_file} before upgrading it: it needs {_mb(need)} and {dest.parent} has "
            f"{_mb(free)} free; free space there, or upgrade without a copy: engines db upgrade --no-backup")
    part = dest.with_name(dest.name + ".part")
    try:
        src = sqlite3.connect(db_file, timeout=30)
        try:
            dst = sqlite3.connect(part)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
        os.replace(part, dest)
    except (sqlite3.Error, OSError) as exc:
        part.unlink(missing_ok=True)
        raise DatabaseError(f"cannot keep a copy of {db_file} at {dest} before upgrading it ({exc}); nothing was "
                            "changed; free space or fix the directory's permissions, or upgrade without a copy: "
                            "engines db upgrade --no-backup") from None
    return dest, dest.stat().st_size


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"
