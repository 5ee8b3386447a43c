"""``engines sql`` cannot change anything, on SQLite and on PostgreSQL (issue 12).

Table-driven escape attempts. Each runs through the CLI (exit code and the one line on
stderr) and, where the text check would stop it first, also straight through the
backend runner, so the database's own protection is what the test sees. Before and
after: the SQLite file's sha256, or a dump of the PostgreSQL schema's catalog and row
counts; files an attempt would create must not exist.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cli.main import app
from store.sql import runner as sqlmod
from store.db import open_database
from store.errors import UserError

REFUSED, ERROR = 2, 1


def _seed(url: str) -> None:
    db = open_database(url)
    try:
        with db.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO benchmarks (name, task, source_file, sha256, modified, meta, loaded_at) "
                "VALUES ('b', 'qr', 'f', 'x', false, '{}', CURRENT_TIMESTAMP)")
    finally:
        db.dispose()


def _cli(url: str, *args: str):
    return CliRunner().invoke(app, ["sql", "--tsv", *args], env={"ENGINES_DATABASE_URL": url})


def _one_line(res) -> str:  # noqa: ANN001
    assert "Traceback" not in res.output
    assert res.stderr.count("\n") == 1, res.stderr
    return res.stderr.strip()


# ---------------------------------------------------------------------- SQLite

SQLITE_CASES = [
    # (statement, exit code, text in the one stderr line)
    ("PRAGMA journal_mode=DELETE", REFUSED, "PRAGMA journal_mode = DELETE is not allowed"),
    ("PRAGMA query_only=0", REFUSED, "PRAGMA query_only = 0 is not allowed"),
    ("PRAGMA user_version=5", REFUSED, "PRAGMA user_version = 5 is not allowed"),
    ("ATTACH DATABASE '{tmp}/new.db' AS x", REFUSED, "ATTACH is not a query"),
    ("VACUUM INTO '{tmp}/copy.db'", REFUSED, "VACUUM is not a query"),
    ("VACUUM", REFUSED, "VACUUM is not a query"),
    ("DELETE FROM benchmarks", REFUSED, "DELETE is not a query"),
    ("CREATE TEMP TABLE t(x)", REFUSED, "CREATE is not a query"),
    ("SELECT load_extension('/tmp/evil')", REFUSED, "function load_extension() is not allowed"),
    ("SELECT 1; DELETE FROM benchmarks", REFUSED, "one statement only"),
    ("WITH d AS (SELECT 1) DELETE FROM benchmarks", REFUSED, "DELETE is not allowed"),
    ("SELECT * FROM pragma_table_info('benchmarks') LIMIT 1", 0, None),
    ("PRAGMA table_info(benchmarks)", 0, None),
    ("SELECT name FROM benchmarks", 0, None),
]


@pytest.mark.parametrize(("stmt", "code", "text"), SQLITE_CASES, ids=[c[0][:40] for c in SQLITE_CASES])
def test_sqlite_escape_attempts(sqlite_url: str, tmp_path: Path, stmt: str, code: int, text: str | None) -> None:
    _seed(sqlite_url)
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    stmt = stmt.format(tmp=tmp_path)
    res = _cli(sqlite_url, stmt)
    assert res.exit_code == code, res.output
    if code:
        line = _one_line(res)
        assert line.startswith("engines sql: refused: "), line
        assert text in line, line
    # The authorizer alone (no keyword check) refuses the same statements.
    if code and "not a query" in text:
        with pytest.raises(UserError) as exc:
            sqlmod.run_sqlite(path, stmt, timeout=5, max_rows=10)
        assert exc.value.exit_code in (REFUSED, ERROR)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not (tmp_path / "new.db").exists() and not (tmp_path / "copy.db").exists()


def test_sqlite_authorizer_blocks_attach_and_vacuum_into(sqlite_url: str, tmp_path: Path) -> None:
    _seed(sqlite_url)
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    for stmt in (f"ATTACH DATABASE '{tmp_path}/new.db' AS x", f"VACUUM INTO '{tmp_path}/copy.db'",
                 "PRAGMA journal_mode=DELETE", "DELETE FROM benchmarks", "CREATE TEMP TABLE t(x)", "BEGIN"):
        with pytest.raises(sqlmod.Refused):
            sqlmod.run_sqlite(path, stmt, timeout=5, max_rows=10)
    assert not (tmp_path / "new.db").exists() and not (tmp_path / "copy.db").exists()


def test_sqlite_timeout_and_max_rows(sqlite_url: str) -> None:
    _seed(sqlite_url)
    slow = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    res = _cli(sqlite_url, "--timeout", "0.3", slow)
    assert res.exit_code == ERROR and "longer than --timeout 0.3 s" in _one_line(res)
    many = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 50) SELECT n FROM r"
    res = _cli(sqlite_url, "--max-rows", "7", many)
    assert res.exit_code == 0
    assert res.stdout.splitlines() == ["n", "1", "2", "3", "4", "5", "6", "7"]
    assert "cut at 7 rows" in res.stderr


def test_sqlite_missing_and_not_a_database(tmp_path: Path) -> None:
    res = _cli(f"sqlite:///{tmp_path / 'absent.db'}", "SELECT 1")
    assert res.exit_code == ERROR and "no SQLite database at" in _one_line(res)
    assert not (tmp_path / "absent.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n")
    res = _cli(f"sqlite:///{junk}", "SELECT 1")
    assert res.exit_code == ERROR and "is not a SQLite database" in _one_line(res)


# ------------------------------------------------------------------ PostgreSQL


def _pg_dump(url: str) -> tuple:
    """The schema's catalog (relations, functions, owners, grants) and every table's row count."""
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            rels = conn.exec_driver_sql(
                "SELECT c.relname, c.relkind, pg_get_userbyid(c.relowner), coalesce(c.relacl::text, '') "
                "FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace ORDER BY 1").all()
            procs = conn.exec_driver_sql(
                "SELECT p.proname, p.prosecdef, pg_get_userbyid(p.proowner), md5(p.prosrc) FROM pg_proc p "
                "WHERE p.pronamespace = current_schema()::regnamespace ORDER BY 1").all()
            counts = tuple(
                (name, conn.exec_driver_sql(f'SELECT count(*) FROM "{name}"').scalar())
                for name, kind, _o, _a in rels if kind == "r")
            los = conn.exec_driver_sql("SELECT count(*) FROM pg_largeobject_metadata").scalar()
            roles = conn.exec_driver_sql(
                "SELECT rolsuper, rolcanlogin, rolbypassrls FROM pg_roles WHERE rolname = 'engines_reader'").all()
        return tuple(rels), tuple(procs), counts, los, tuple(roles)
    finally:
        eng.dispose()


def _schema(url: str) -> str:
    return url.rsplit("search_path%3D", 1)[1]


PG_CASES = [
    # (statement, exit code, text in the one stderr line); {tmp} = a directory, {schema} = the test's schema
    ("COPY (SELECT 1) TO PROGRAM 'touch {tmp}/program'", REFUSED, "COPY is not a query"),
    ("COPY (SELECT 1) TO '{tmp}/copy.txt'", REFUSED, "COPY is not a query"),
    ("SELECT pg_read_file('/etc/hostname')", REFUSED, "permission denied for function pg_read_file"),
    ("SELECT lo_export(lo_from_bytea(0, 'x'), '{tmp}/lo.bin')", REFUSED, "permission denied for function lo_export"),
    ("SELECT * FROM dblink('host=127.0.0.1 user=postgres dbname=test', "
     "'DELETE FROM {schema}.benchmarks RETURNING 1') AS t(x int)", REFUSED, "password"),
    ("DO $$ BEGIN EXECUTE 'DELETE FROM benchmarks'; END $$", REFUSED, "DO is not a query"),
    ("SELECT set_config('role', 'postgres', false)", REFUSED, 'cannot set parameter "role" within security-definer'),
    ("SELECT set_config('session_authorization', 'postgres', false)", REFUSED,
     'cannot set parameter "session_authorization" within security-definer'),
    ("SET ROLE postgres", REFUSED, "SET is not a query"),
    ("RESET ROLE", REFUSED, "RESET is not a query"),
    ("SELECT 1; DELETE FROM benchmarks", REFUSED, "one statement only"),
    ("SELECT E'\\'';COMMIT;DELETE FROM benchmarks;SELECT 'x'", REFUSED, "one statement only"),
    ("WITH d AS (DELETE FROM benchmarks RETURNING 1) SELECT * FROM d", REFUSED, "data-modifying statement"),
    ("SELECT query_to_xml('DELETE FROM benchmarks', true, false, '')", REFUSED, "query_to_xml is not allowed"),
    ("SELECT set_config('transaction_read_only', 'off', true)", REFUSED, "read-write mode"),
    ("SELECT pg_ls_dir('.')", REFUSED, "permission denied for function pg_ls_dir"),
    ("SELECT * FROM pg_authid", REFUSED, "permission denied for table pg_authid"),
    ("SELECT current_user AS u", 0, None),
    ("SELECT name FROM benchmarks", 0, None),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("stmt", "code", "text"), PG_CASES, ids=[c[0][:40] for c in PG_CASES])
def test_postgres_escape_attempts(pg_url: str, tmp_path: Path, stmt: str, code: int, text: str | None) -> None:
    _seed(pg_url)
    schema = _schema(pg_url)
    if "dblink" in stmt:
        eng = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with eng.connect() as conn:
            # Database-wide; created in this test's schema (dropped with it) unless already there.
            if conn.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'dblink'").first() is None:
                conn.exec_driver_sql(f'CREATE EXTENSION IF NOT EXISTS dblink SCHEMA "{schema}"')
        eng.dispose()
    os.chmod(tmp_path, 0o777)  # so the server could write there if an attempt got through
    before = _pg_dump(pg_url)
    stmt = stmt.format(tmp=tmp_path, schema=schema)
    res = _cli(pg_url, stmt)
    assert res.exit_code == code, res.output
    if code:
        line = _one_line(res)
        assert line.startswith("engines sql: refused: "), line
        if "dblink" in stmt and "does not exist" in line:
            pass  # the extension lives in another test's schema: the reader cannot even see it
        else:
            assert text in line, line
    elif "current_user" in stmt:
        assert res.stdout.splitlines() == ["u", "engines_reader"]
    assert _pg_dump(pg_url) == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_postgres_runner_alone_refuses_commands(pg_url: str, tmp_path: Path) -> None:
    """Past the keyword check, the statement is a subquery of the reader's function: commands do not parse."""
    _seed(pg_url)
    before = _pg_dump(pg_url)
    for stmt in (f"COPY (SELECT 1) TO PROGRAM 'touch {tmp_path}/x'", "DO $$ BEGIN DELETE FROM benchmarks; END $$",
                 "SET ROLE postgres", "DELETE FROM benchmarks", "SELECT 1) AS t; DELETE FROM benchmarks; SELECT (1"):
        with pytest.raises(UserError):
            sqlmod.run_postgres(pg_url, stmt, timeout=5, max_rows=10)
    assert _pg_dump(pg_url) == before
    assert not (tmp_path / "x").exists()


@pytest.mark.postgres
def test_postgres_timeout_cannot_be_lifted_and_max_rows(pg_url: str) -> None:
    _seed(pg_url)
    res = _cli(pg_url, "--timeout", "0.5", "SELECT set_config('statement_timeout', '0', true), "
                     "(SELECT count(*) FROM generate_series(1, 1000000000))")
    assert res.exit_code == ERROR and "longer than --timeout 0.5 s" in _one_line(res)
    res = _cli(pg_url, "--max-rows", "3", "SELECT g AS n FROM generate_series(1, 10) g")
    assert res.exit_code == 0 and res.stdout.splitlines() == ["n", "1", "2", "3"]
    assert "cut at 3 rows" in res.stderr
    # No rows: the columns still print; duplicate names are kept.
    res = _cli(pg_url, "SELECT 1 AS a, 2 AS a WHERE false")
    assert res.exit_code == 0 and res.stdout.splitlines() == ["a\ta"]


@pytest.mark.postgres
def test_postgres_without_reader_function_refuses(pg_url: str) -> None:
    _seed(pg_url)
    eng = sa.create_engine(pg_url)
    with eng.begin() as conn:
        conn.exec_driver_sql("DROP FUNCTION engines_sql_select(text, integer, boolean)")
    eng.dispose()
    res = _cli(pg_url, "SELECT 1")
    line = _one_line(res)
    assert res.exit_code == REFUSED and "engines db reader" in line and "never runs with your own rights" in line
    res = CliRunner().invoke(app, ["db", "reader"], env={"ENGINES_DATABASE_URL": pg_url})
    assert res.exit_code == 0, res.output
    res = _cli(pg_url, "SELECT count(*) AS n FROM benchmarks")
    assert res.exit_code == 0 and res.stdout.splitlines() == ["n", "1"]
