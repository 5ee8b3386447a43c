"""The PostgreSQL server the tests use (ENGINES_TEST_PG_URL; CI starts it)."""

from __future__ import annotations

import os

PG_BASE_URL = os.environ.get("ENGINES_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
