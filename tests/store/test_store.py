"""The SQL cache: migrations on SQLite and PostgreSQL, models == migrations, URL handling."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from store import db as dbmod
from store.errors import DatabaseError
from store.models import Base, Corpus
from store.types import utcnow


def test_migrations_from_empty_and_models_agree(any_db_url: str) -> None:
    engine = dbmod.create_db_engine(any_db_url)
    try:
        assert dbmod.current_revision(engine) is None
        res = dbmod.upgrade(engine)
        before, after = res.before, res.after
        assert before is None and after == dbmod.head_revision() and res.backup is None
        assert dbmod.current_revision(engine) == after
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
            tables = set(sa.inspect(conn).get_table_names())
        assert diff == [], f"models and migrations disagree: {diff}"
        assert set(Base.metadata.tables) <= tables
        # Second upgrade is a no-op.
        again = dbmod.upgrade(engine)
        assert (again.before, again.after, again.changed) == (after, after, False)
    finally:
        engine.dispose()


def test_sqlite_runs_in_wal_with_foreign_keys(sqlite_url: str) -> None:
    database = dbmod.open_database(sqlite_url)
    try:
        with database.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        with pytest.raises(sa.exc.IntegrityError):
            with database.engine.begin() as conn:
                conn.exec_driver_sql(
                    "INSERT INTO declarations (corpus_id, row, full_name, name) VALUES (999, 0, 'x', '[\"x\"]')"
                )
    finally:
        database.dispose()


def test_newer_database_is_refused(sqlite_url: str) -> None:
    database = dbmod.open_database(sqlite_url)
    with database.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    database.dispose()
    with pytest.raises(DatabaseError, match="newer than this version"):
        dbmod.open_database(sqlite_url)


def test_default_url_creates_cache_db_in_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENGINES_DATABASE_URL", raising=False)
    assert dbmod.database_url() == "sqlite:///cache.db"
    database = dbmod.open_database()
    database.dispose()
    assert (tmp_path / "cache.db").exists()
    con = sqlite3.connect(tmp_path / "cache.db")
    assert con.execute("SELECT version_num FROM alembic_version").fetchone()[0] == dbmod.head_revision()
    con.close()


def test_env_var_overrides_and_postgres_scheme_normalised(monkeypatch) -> None:
    monkeypatch.setenv("ENGINES_DATABASE_URL", "postgresql://u@h:5432/d")
    assert dbmod.database_url() == "postgresql+psycopg://u@h:5432/d"
    assert dbmod.database_url("sqlite:///x.db") == "sqlite:///x.db"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@127.0.0.1/test", "unsupported database URL scheme"),
        ("not a url", "cannot parse database URL"),
        ("postgresql+psycopg://postgres@127.0.0.1:1/test", "cannot connect to database"),
        ("sqlite:////nonexistent-dir-engines/cache.db", "does not exist"),
    ],
)
def test_bad_database_urls_give_one_clear_error(url: str, message: str) -> None:
    with pytest.raises(DatabaseError, match=message) as info:
        dbmod.open_database(url)
    assert "\n" not in info.value.message


def test_utc_datetime_round_trips_and_refuses_naive(any_db) -> None:
    with any_db.session() as s, s.begin():
        c = Corpus(name="c", revision="r", sha256="0" * 64, source="x", row_count=0, loaded_at=utcnow())
        s.add(c)
    with any_db.session() as s:
        got = s.execute(sa.select(Corpus)).scalar_one()
        assert got.loaded_at.tzinfo is not None and got.loaded_at.utcoffset() == dt.timedelta(0)
    with pytest.raises(sa.exc.StatementError, match="naive datetime"):
        with any_db.session() as s, s.begin():
            s.add(Corpus(name="d", revision="r", sha256="0" * 64, source="x", row_count=0, loaded_at=dt.datetime(2026, 1, 1)))


def test_password_is_redacted_in_error_messages() -> None:
    with pytest.raises(DatabaseError) as info:
        dbmod.open_database("postgresql+psycopg://postgres:s3cret-pw@127.0.0.1:1/test")
    assert "s3cret-pw" not in info.value.message


@pytest.mark.postgres
def test_pg_pool_pings_only_connections_that_sat_idle(pg_url: str, monkeypatch) -> None:
    """A connection checked in a moment ago is handed out without a ping (the crawl checks
    one out per send slot); one idle for PING_IDLE seconds is pinged, and a dead one is
    replaced by a new connection instead of failing the caller."""
    db = dbmod.open_database(pg_url)
    pings: list[int] = []
    real_ping = db.engine.dialect.do_ping
    monkeypatch.setattr(db.engine.dialect, "do_ping", lambda conn: pings.append(1) or real_ping(conn))
    try:
        pids = set()
        for _ in range(20):
            with db.engine.connect() as conn:
                pids.add(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        assert pings == []  # used milliseconds before: no round trip spent on a ping
        monkeypatch.setattr(dbmod, "PING_IDLE", 0.0)  # every pooled connection now counts as idle
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() in pids
        assert pings == [1]
        admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as other:
            for pid in pids:
                assert other.exec_driver_sql(f"SELECT pg_terminate_backend({pid})").scalar_one() is True
        admin.dispose()
        with db.engine.connect() as conn:  # the pooled connection is dead: the ping finds out
            new_pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        assert new_pid not in pids and len(pings) >= 2
    finally:
        db.dispose()
