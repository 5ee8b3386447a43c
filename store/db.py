"""Database URL, engine and session setup, and automatic migrations.

``open_database()`` is the one entry point: it resolves the URL (``ENGINES_DATABASE_URL``
or ``sqlite:///cache.db`` in the working directory), checks that the server is
reachable, refuses a database written by a newer version of this code, and applies
pending migrations. SQLite connections run in WAL mode with foreign keys on.

A SQLite file that cannot be written (the file or its directory read-only, or a read-only
mount) is opened read-only instead (:func:`sqlite_read_only`): nothing is written beside it
(no -wal / -shm / journal file, no migration), and one that needs a migration says so.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

from store.db_hints import plain_path_as_url, refuse_missing_pg_database
from store.errors import DatabaseError
from store.safe_upgrade import RowGuard, backup_sqlite, leftovers, migration_engine, repair_leftovers

DEFAULT_URL = "sqlite:///cache.db"
URL_ENV = "ENGINES_DATABASE_URL"
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_PG_MIGRATION_LOCK = 727_361_001  # pg_advisory_lock key: one migrator at a time


def database_url(url: str | None = None) -> str:
    """The URL to use: explicit argument, then ``ENGINES_DATABASE_URL``, then the default."""
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    url = plain_path_as_url(url)  # `--db cache.db`, `--db /data/cache.db`: a SQLite file
    # Plain "postgresql://" would pick psycopg2, which we do not ship; psycopg 3 is the extra.
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def redact_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    # 64 MiB of page cache instead of 2 MiB: writing and resolving millions of hits touches
    # index pages all over the file, and the default cache made that superlinear
    # (perf/score_scale.py, perf/write_hits.py). A cap, not an allocation.
    cur.execute("PRAGMA cache_size=-65536")
    cur.close()


def sqlite_read_only(path: Path) -> bool:
    """Whether the SQLite file at ``path`` is to be opened read-only: it exists and it, or the
    directory that would hold its -wal / -shm files, is not writable (for this user, or for
    anyone: a file without write bits counts even for root, whom permissions do not bind),
    or it lies on a read-only mount."""
    import stat

    if not path.is_file():
        return False
    parent = path.resolve().parent
    for p in (path, parent):
        if not os.access(p, os.W_OK) or not p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            return True
    try:
        return bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def sqlite_read_only_uri(path: Path) -> str:
    """The URI that opens ``path`` read-only without writing anything beside it: ``immutable``
    (no locks, no -shm, no journal) unless a -wal file with content is there (a writer still
    at work, or a copy made while one was): then plain ``mode=ro``, which reads it."""
    wal = Path(str(path) + "-wal")
    uri = path.resolve().as_uri() + "?mode=ro"
    return uri if wal.exists() and wal.stat().st_size > 0 else uri + "&immutable=1"


def _sqlite_read_only_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA query_only=ON")
    cur.execute("PRAGMA cache_size=-65536")
    cur.close()


def check_sqlite_file(path: Path, *, must_exist: bool = False) -> None:
    """One clear line before SQLite sees a path it cannot use (it would say only
    "file is not a database" or "unable to open database file")."""
    if must_exist and not path.exists():
        raise DatabaseError(f"no SQLite database at {path}; check --db / {URL_ENV}")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise DatabaseError(f"directory {parent} for SQLite database {path} does not exist; create it first")
    if path.is_dir():
        raise DatabaseError(f"SQLite database path {path} is a directory; pass a file, e.g. --db sqlite:///{path}/cache.db")
    if path.exists():
        try:
            with open(path, "rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            raise DatabaseError(f"cannot read SQLite database {path}: {exc.strerror}; check its permissions") from None
        if head and head != b"SQLite format 3\x00":
            raise DatabaseError(f"{path} is not a SQLite database; check --db / {URL_ENV}")


# SQLite files this process opened (newest last): the file an error line names.
_SQLITE_FILES: list[Path] = []

# What the machine says (SQLite's message, lower case) → what happened, what to do.
_SQLITE_MACHINE = (
    ("database or disk is full", "the disk holding {f} is full",
     "free space there (or move the database and pass --db) and run the command again"),
    ("disk i/o error", "reading or writing {f} failed (disk I/O error)",
     "check the disk and the file system, then run the command again"),
    ("file is not a database", "{f} is not a SQLite database, or its first page is damaged",
     "restore it from a backup, or pass --db with another file"),
    ("database disk image is malformed", "{f} is corrupt (database disk image is malformed)",
     "restore it from a backup (or salvage rows with `sqlite3 FILE .recover`), or pass --db with another file"),
    ("readonly database", "{f} is read-only (the file, its directory or the mount)",
     "make it writable, or copy it somewhere writable and pass --db"),
    ("unable to open database file", "cannot open {f} (or its -wal / -shm files) for writing",
     "check that its directory is writable and not on a read-only mount"),
)


def machine_error(exc: BaseException) -> DatabaseError | None:
    """A full disk, a corrupt database file or a read-only database or mount, as one
    :class:`DatabaseError` line naming the file, what happened and what to do (None when
    ``exc`` is none of these). The transaction that hit it was rolled back: nothing is
    half-written."""
    import errno
    import sqlite3

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        todo += [getattr(e, "orig", None), e.__cause__, e.__context__]
        if isinstance(e, sqlite3.Error):
            msg = str(e).lower()
            for key, what, todo_text in _SQLITE_MACHINE:
                if key in msg:
                    f = str(_SQLITE_FILES[-1]) if _SQLITE_FILES else "the SQLite database"
                    return DatabaseError(f"{what.format(f=f)}; {todo_text} (nothing was half-written: the "
                                         "interrupted transaction was rolled back)")
        state = getattr(e, "sqlstate", None)
        if state in ("53100", "25006"):  # PostgreSQL: disk_full, read_only_sql_transaction
            what = "the PostgreSQL server's disk is full" if state == "53100" else "the PostgreSQL database is read-only"
            first = (str(e).strip().splitlines() or [""])[0][:160]
            return DatabaseError(f"{what} ({first}); free space on the server (or point --db at a writable "
                                 "database) and run the command again (nothing was half-written: the "
                                 "interrupted transaction was rolled back)")
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            where = e.filename or "a file"
            what = "the disk is full" if e.errno != errno.EROFS else "the file system is read-only"
            return DatabaseError(f"cannot write {where}: {what} ({e.strerror}); free space there or choose "
                                 "another place, then run the command again")
    return None


def create_db_engine(url: str | None = None, *, read_only: bool = False) -> Engine:
    """An engine for ``url`` with the project's connection settings; no migrations.
    ``read_only`` (SQLite files only): opened through :func:`sqlite_read_only_uri`."""
    url = database_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise DatabaseError(
            f"cannot parse database URL {url!r} (from {URL_ENV} or --db); "
            "use e.g. sqlite:///cache.db or postgresql+psycopg://user@host:5432/db"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise DatabaseError(
            f"unsupported database URL scheme {parsed.drivername!r} in {redact_url(url)}; "
            "engines supports sqlite:/// and postgresql+psycopg://"
        )
    try:
        if backend == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                check_sqlite_file(Path(parsed.database).expanduser())
                _SQLITE_FILES.append(Path(parsed.database).expanduser())
            if read_only and parsed.database and parsed.database != ":memory:":
                import sqlite3

                uri = sqlite_read_only_uri(Path(parsed.database).expanduser())
                engine = sa.create_engine(url, creator=lambda: sqlite3.connect(uri, uri=True, timeout=30,
                                                                               check_same_thread=False))
                event.listen(engine, "connect", _sqlite_read_only_pragmas)
            else:
                engine = sa.create_engine(url, connect_args={"timeout": 30})
                event.listen(engine, "connect", _sqlite_pragmas)
        else:
            engine = sa.create_engine(url, connect_args={"connect_timeout": 10})
            _ping_when_idle(engine)
    except NoSuchModuleError:
        raise DatabaseError(
            f"no driver for {parsed.drivername!r}; use sqlite:/// or postgresql+psycopg:// "
            "(install the PostgreSQL extra: pip install 'engines[postgres]')"
        ) from None
    except ModuleNotFoundError as exc:
        raise DatabaseError(
            f"database driver {exc.name!r} is not installed for {redact_url(url)}; "
            "install it with: pip install 'engines[postgres]'"
        ) from None
    return engine


# A pooled PostgreSQL connection idle this long is pinged before it is handed out.
PING_IDLE = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """``pool_pre_ping``, but only for a connection that sat in the pool ``PING_IDLE`` s or more.

    A crawl checks a connection out for every send slot: pinging each time cost one round
    trip (and about 0.15 ms of client CPU) per request, on connections used milliseconds
    before. What the ping is for (a server restart, an idle timeout, a dropped network
    while the connection sat unused) is still caught: a dead connection is discarded and a
    new one opened, as pre-ping does.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection, record) -> None:  # noqa: ANN001
        record.info["engines_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection, record, proxy) -> None:  # noqa: ANN001
        since = record.info.pop("engines_idle_since", None)
        if since is None or time.monotonic() - since < PING_IDLE:
            return  # new, or used a moment ago
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # noqa: BLE001 - any failure: the pool opens a new connection
            raise sa.exc.DisconnectionError(f"pooled connection failed its ping: {exc}") from exc
        if alive is False:
            raise sa.exc.DisconnectionError("pooled connection failed its ping")


def _alembic_config(engine: Engine):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_reachable(engine: Engine) -> None:
    """Connect once; an unreachable server or a non-database file is one :class:`UserError` line."""
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except sa.exc.DatabaseError as exc:  # OperationalError, or "file is not a database"
        known = machine_error(exc)  # a read-only mount, a full disk, a corrupt file: say so
        if known is not None:
            raise known from None
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        refuse_missing_pg_database(engine.url, str(exc.orig or exc), redact_url(str(engine.url)))
        raise DatabaseError(
            f"cannot connect to database {redact_url(str(engine.url))}: {reason}; "
            f"check that the server is running or set {URL_ENV}"
        ) from None


@dataclass
class UpgradeResult:
    """What :func:`upgrade` did: the revisions, the copy it kept, the leftovers it healed."""

    before: str | None
    after: str
    backup: Path | None = None  # the copy of the SQLite file kept before migrating
    backup_bytes: int = 0
    repaired: list[str] = field(default_factory=list)  # leftovers of an earlier, failed upgrade

    @property
    def changed(self) -> bool:
        return self.before != self.after or bool(self.repaired)


def upgrade(engine: Engine, *, backup: bool = True, target: str = "head") -> UpgradeResult:
    """Apply pending migrations, all in one transaction (SQLite included: see
    :mod:`store.safe_upgrade`), refusing any that loses an archived row or breaks a reference.

    Refuses a database whose revision this code does not know (written by a newer version).
    Before migrating a SQLite file that holds data, a copy is kept beside it
    (``cache.db.before-<revision>``) unless ``backup`` is false. Tables a failed upgrade left
    behind (``_alembic_tmp_*``) are healed in the same transaction. ``target`` stops at an
    earlier revision (the tests walk the migrations one at a time).
    """
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    check_reachable(engine)
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    head = script.get_current_head() if target == "head" else target
    if _at(engine, head):
        # Nothing to do: no lock taken, so no other session (an engines sql query that took
        # the migration lock's key, a crawl) can hold this command up.
        return UpgradeResult(head, head)
    with _migration_lock(engine):
        before = current_revision(engine)
        if before is not None:
            try:
                script.get_revision(before)
            except CommandError:
                raise DatabaseError(
                    f"database {redact_url(str(engine.url))} is at schema revision {before!r}, "
                    f"newer than this version of engines knows (head {head!r}); "
                    "upgrade engines or point ENGINES_DATABASE_URL at another database"
                ) from None
        result = UpgradeResult(before, head)
        with engine.connect() as conn:
            stranded = bool(leftovers(conn))
        if before == head and not stranded:
            return result
        if backup and before is not None and engine.dialect.name == "sqlite" and engine.url.database not in (
                None, "", ":memory:"):
            result.backup, result.backup_bytes = backup_sqlite(Path(engine.url.database).expanduser(), before)
        _migrate(engine, result, target)
    return result


def _migrate(engine: Engine, result: UpgradeResult, target: str) -> None:
    """Heal leftovers and run every pending migration in one transaction, guarded."""
    from alembic import command

    sqlite = engine.dialect.name == "sqlite"
    migrator = migration_engine(engine.url) if sqlite else engine
    where = redact_url(str(engine.url))

    def before_migrations(conn: sa.Connection) -> RowGuard:
        result.repaired = repair_leftovers(conn)
        return RowGuard.take(conn)

    cfg = _alembic_config(migrator)
    cfg.attributes["before_migrations"] = before_migrations
    cfg.attributes["after_migrations"] = lambda conn, guard: guard.check(conn, where)
    try:
        command.upgrade(cfg, target)
    finally:
        if sqlite:
            migrator.dispose()


def _at(engine: Engine, head: str) -> bool:
    """The database is at ``head`` with nothing left to heal (read without the lock: a
    revision only moves forward, so a database at head stays there)."""
    if current_revision(engine) != head:
        return False
    with engine.connect() as conn:
        return not leftovers(conn)


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as conn:
        conn.exec_driver_sql(f"SELECT pg_advisory_lock({_PG_MIGRATION_LOCK})")
        conn.commit()
        try:
            yield
        finally:
            conn.exec_driver_sql(f"SELECT pg_advisory_unlock({_PG_MIGRATION_LOCK})")
            conn.commit()


@dataclass
class Database:
    """An engine plus a session factory, migrated to head."""

    engine: Engine
    sessionmaker: sessionmaker[Session]
    upgraded: UpgradeResult | None = None  # what opening it migrated, if anything
    read_only: bool = False  # a SQLite file opened read-only: scoring keeps what it derives in memory

    @property
    def url(self) -> str:
        return redact_url(str(self.engine.url))

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def session(self) -> Session:
        return self.sessionmaker()

    def dispose(self) -> None:
        self.engine.dispose()

    def refresh_statistics(self, *tables: str, conn: sa.Connection | None = None) -> None:
        """``ANALYZE`` these tables on PostgreSQL (a no-op on SQLite).

        Bulk steps (reparse, import's parse) run just after many rows arrived: with the
        planner's statistics from before, PostgreSQL picked plans made for empty tables
        (nested loops over sequential scans) and re-parsing ran at half speed.
        """
        if self.dialect != "postgresql" or not tables:
            return
        sql = "ANALYZE " + ", ".join(self.engine.dialect.identifier_preparer.quote(t) for t in tables)
        if conn is not None:  # inside the caller's transaction: it sees the rows written there
            conn.exec_driver_sql(sql)
            return
        with self.engine.begin() as own:
            own.exec_driver_sql(sql)


def open_database(url: str | None = None, *, migrate: bool = True) -> Database:
    """Open (and by default migrate) the cache database; ``Database.upgraded`` says what the
    migration did (the copy kept, the leftovers healed), None when nothing was to do.

    A SQLite file that cannot be written is opened read-only (``Database.read_only``), never
    migrated: one whose schema is behind this code's is refused with one line naming
    ``engines db upgrade``."""
    url = database_url(url)
    ro_path = _read_only_file(url)
    engine = create_db_engine(url, read_only=ro_path is not None)
    upgraded = None
    try:
        if ro_path is not None:
            check_reachable(engine)
            _check_read_only_revision(engine, ro_path)
        elif migrate:
            res = upgrade(engine)
            upgraded = res if res.changed else None
        else:
            check_reachable(engine)
    except BaseException:
        engine.dispose()  # no connection (nor SQLite -wal/-shm files) left open behind an error
        raise
    return Database(engine=engine, sessionmaker=sessionmaker(engine, expire_on_commit=False), upgraded=upgraded,
                    read_only=ro_path is not None)


def _read_only_file(url: str) -> Path | None:
    """The path of a SQLite URL whose file is to be opened read-only (else None)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # create_db_engine says what is wrong with it
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database).expanduser()
    return path if sqlite_read_only(path) else None


def _check_read_only_revision(engine: Engine, path: Path) -> None:
    """A read-only file must be at this code's schema: a migration would write."""
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    script = ScriptDirectory(str(MIGRATIONS_DIR))
    head, before = script.get_current_head(), current_revision(engine)
    if before == head:
        return
    try:
        if before is not None:
            script.get_revision(before)
    except CommandError:
        raise DatabaseError(
            f"database {path} is at schema revision {before!r}, newer than this version of engines knows "
            f"(head {head!r}); upgrade engines or point ENGINES_DATABASE_URL at another database") from None
    raise DatabaseError(
        f"{path} is read-only and at schema revision {before or '(none)'}, older than this version's {head}: it "
        f"needs `engines db upgrade`, which writes; run that on a writable copy (cp {path} copy.db; engines --db "
        "sqlite:///copy.db db upgrade) or make the file and its directory writable")
