"""Alembic environment. The engine comes from ``store.db`` (config attribute ``engine``)."""

from __future__ import annotations

from alembic import context

from store.db import create_db_engine
from store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = config.attributes.get("engine") or create_db_engine()
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run `engines db upgrade`")
run_migrations_online()
