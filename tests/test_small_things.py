"""Issue 34, item 13: the small things a careful user trips over, each with the command
that showed it: ``--version``, a plain ``--db`` path, a missing PostgreSQL database, a
wrong kind of file, verify's and publish's corpus hints, ``report`` with no answers, TREC
export names, the crawl lock file, Loogle's error text."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from cli import main as cli
from tests.conftest import PG_BASE_URL

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.run(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys) -> None:
    from engines import __version__

    code, out, err = _run(capsys, "--version")
    assert code == 0, err
    assert re.fullmatch(rf"engines {re.escape(__version__)}(\+g[0-9a-f]+)?\n", out), out


def test_a_plain_db_path_is_a_sqlite_file(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENGINES_DATABASE_URL", raising=False)
    code, _, err = _run(capsys, "--db", "cache.db", "db", "upgrade")
    assert code == 0, err
    assert (tmp_path / "cache.db").is_file()
    (tmp_path / "sub").mkdir()
    code, _, err = _run(capsys, "db", "upgrade", "--db", str(tmp_path / "sub" / "x.sqlite"))
    assert code == 0, err
    assert (tmp_path / "sub" / "x.sqlite").is_file()
    code, _, err = _run(capsys, "db", "current", "--db", "sub/x.sqlite")
    assert code == 0, err


@pytest.mark.postgres
def test_a_missing_postgres_database_says_how_to_create_it(capsys) -> None:
    from sqlalchemy.engine import make_url

    name = f"engines_missing_{uuid.uuid4().hex[:8]}"
    base = make_url(PG_BASE_URL)
    url = base.set(database=name).render_as_string(hide_password=False)
    code, _, err = _run(capsys, "--db", url, "db", "current")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"database '{name}' does not exist" in lines[0]
    assert f"createdb -h {base.host} -p {base.port or 5432} -U {base.username} {name}" in lines[0]
    assert f'CREATE DATABASE "{name}";' in lines[0]
