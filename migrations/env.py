"""Alembic environment. The engine comes from ``store.db`` (config attribute ``engine``)."""

from __future__ import annotations

from alembic import context

from store.db import create_db_engine
from store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    """Every pending migration in one transaction. ``store.db.upgrade`` passes an engine whose
    SQLite connections really are transactional with foreign keys off (store.safe_upgrade),
    and two hooks run inside the transaction: ``before_migrations(conn)`` (heal leftovers,
    count the archive) and ``after_migrations(conn, state)`` (refuse a loss: the whole
    upgrade rolls back)."""
    engine = config.attributes.get("engine") or create_db_engine()
    before = config.attributes.get("before_migrations")
    after = config.attributes.get("after_migrations")
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            transaction_per_migration=False,
            # Alembic assumes SQLite's DDL is not transactional (the sqlite3 module's default);
            # store.safe_upgrade's connections make it so, and the upgrade is one transaction.
            transactional_ddl=True,
        )
        with context.begin_transaction():
            state = before(connection) if before is not None else None
            context.run_migrations()
            if after is not None:
                after(connection, state)
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run `engines db upgrade`")
run_migrations_online()
