"""A throwaway database for perf scripts: a SQLite file in a temp dir, or a fresh
PostgreSQL schema (dropped afterwards) when --pg URL / ENGINES_PERF_PG_URL is given."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextlib.contextmanager
def scratch_url(backend: str, pg_base: str = DEFAULT_PG) -> Iterator[str]:
    """A database URL nobody else uses: ``backend`` is "sqlite" or "postgresql"."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'perf.db'}"
        return
    schema = f"perf_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(pg_base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in pg_base else "?"
    try:
        yield f"{pg_base}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()
