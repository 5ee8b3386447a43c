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

# The real Mathlib slice shipped with the repository (11,651 rows, the LSv2 row schema):
# every perf script's default input, so the scripts run from any copy of the repository.
# Pass --corpus / --full PATH to the 250,379-row extracted Mathlib (or any corpus file in
# the same schema, plain or .gz) for the Mathlib-scale figures quoted in the README.
SHIPPED_SLICE = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "mathlib-slice" / "declarations.jsonl"


def open_text(path: Path):  # noqa: ANN201
    """A corpus file for reading as text: gzip-compressed when its name ends in .gz."""
    import gzip

    return gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path, encoding="utf-8")


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
