"""Shared fixtures: a real SQLite file per test, a real PostgreSQL schema per test.

PostgreSQL tests use ENGINES_TEST_PG_URL (default: the local server at
127.0.0.1:5432, database ``test``). Each test gets its own schema through
``search_path`` and drops it afterwards, so tests never see each other's rows.
PostgreSQL tests fail (never skip) when the server is unreachable: CI starts it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.db import open_database
from tests.support.postgres import PG_BASE_URL

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cache.db'}"


@pytest.fixture
def pg_url():
    """A fresh PostgreSQL schema on the real server; dropped after the test."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_BASE_URL else "?"
    yield f"{PG_BASE_URL}{sep}options=-csearch_path%3D{schema}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db_url(request: pytest.FixtureRequest) -> str:
    """Both backends: the same test runs on a SQLite file and on PostgreSQL."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def db(sqlite_url: str):
    database = open_database(sqlite_url)
    yield database
    database.dispose()


@pytest.fixture
def any_db(any_db_url: str):
    database = open_database(any_db_url)
    yield database
    database.dispose()


@pytest.fixture
def write_jsonl(tmp_path: Path):
    """Write rows (dicts or raw strings) as a .jsonl or .jsonl.gz file."""
    import gzip
    import json

    def _write(rows, name: str = "corpus.jsonl") -> Path:
        path = tmp_path / name
        text = "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows)
        if name.endswith(".gz"):
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return _write
