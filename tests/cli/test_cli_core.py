"""CLI of the foundation (db, corpus, bench) through typer's CliRunner: outputs and error paths."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from benchmarks import SHIPPED_DIR
from cli.main import app
from store.db import head_revision


@pytest.fixture
def run(sqlite_url):
    runner = CliRunner()

    def _run(*args: str, url: str | None = None):
        return runner.invoke(app, list(args), env={"ENGINES_DATABASE_URL": url or sqlite_url})

    return _run


def test_db_upgrade_and_current(run) -> None:
    res = run("db", "current")
    assert res.exit_code == 0 and "(none)" in res.stdout
    res = run("db", "upgrade")
    assert res.exit_code == 0 and f"-> {head_revision()}" in res.stderr
    res = run("db", "current")
    assert res.exit_code == 0 and res.stdout.strip() == f"{head_revision()} (up to date)"


def test_db_current_on_postgres(run, pg_url) -> None:
    res = run("db", "upgrade", url=pg_url)
    assert res.exit_code == 0, res.output
    res = run("db", "current", url=pg_url)
    assert res.stdout.strip() == f"{head_revision()} (up to date)"


def test_bench_and_corpus_load_and_list(run, write_jsonl) -> None:
    res = run("bench", "load", "--shipped")
    assert res.exit_code == 0, res.output
    assert "loaded benchmark mathlibqr" in res.stderr and "queries 946" in res.stderr
    res = run("bench", "load", str(SHIPPED_DIR / "MathlibQR.json"))
    assert res.exit_code == 0 and "already loaded benchmark mathlibqr" in res.stderr
    path = write_jsonl([{"name": ["A", "b"], "kind": "theorem"}, {"name": ["C"], "kind": "class"}])
    res = run("corpus", "load", str(path), "--name", "tiny")
    assert res.exit_code == 0 and "2 rows" in res.stderr
    res = run("corpus", "list")
    assert res.exit_code == 0 and "tiny" in res.stdout
    res = run("bench", "list")
    assert "mathlibqr" in res.stdout and "shared171" in res.stdout


@pytest.mark.parametrize(
    ("args", "url", "message"),
    [
        (("corpus", "load", "/nonexistent/x.jsonl", "--name", "x"), None, "error: corpus file /nonexistent/x.jsonl does not exist"),
        (("bench", "load", "/nonexistent/MathlibQR.json"), None, "error: benchmark file /nonexistent/MathlibQR.json does not exist"),
        (("bench", "load"), None, "error: nothing to load"),
        (("db", "current"), "mysql://root@127.0.0.1/test", "error: unsupported database URL scheme"),
        (("db", "upgrade"), "postgresql+psycopg://postgres@127.0.0.1:1/test", "error: cannot connect to database"),
        (("corpus", "list"), "postgresql+psycopg://postgres@127.0.0.1:1/test", "error: cannot connect to database"),
    ],
)
def test_errors_are_one_line_and_nonzero(run, args, url, message) -> None:
    res = run(*args, url=url)
    assert res.exit_code == 1
    assert res.stderr.startswith(message), res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output


def test_invalid_json_corpus_line_is_reported(run, write_jsonl) -> None:
    path = write_jsonl(['{"name": ["A"]}', '{"name": ["B"'])
    res = run("corpus", "load", str(path), "--name", "broken")
    assert res.exit_code == 1
    assert res.stderr.startswith(f"error: {path}:2: invalid JSON")


def test_table_cells_are_not_rich_markup(run) -> None:
    # Labels and SQL values may contain brackets (e.g. "bm25 [fields]"); they must print verbatim.
    assert run("db", "upgrade").exit_code == 0  # engines sql opens an existing file read-only
    res = run("sql", "SELECT '[bold]kept[/bold] [fields]' AS v")
    assert res.exit_code == 0, res.output
    assert "[bold]kept[/bold] [fields]" in res.stdout


def test_sql_cannot_write_on_postgres_even_past_the_statement_counter(run, pg_url) -> None:
    assert run("bench", "load", "--shipped", url=pg_url).exit_code == 0
    # E'\'' once hid the `;` from the statement counter; over the simple protocol the COMMIT
    # would end the read-only transaction and the DELETE would run. The counter now reads
    # E'' strings as PostgreSQL does, and the reader role could not delete anyway.
    sneaky = r"SELECT E'\'';COMMIT;DELETE FROM gold_names;SELECT 'x'"
    res = run("sql", sneaky, url=pg_url)
    assert res.exit_code == 2 and res.stderr.startswith("engines sql: refused: one statement only")
    res = run("sql", "--tsv", "SELECT count(*) AS n FROM gold_names WHERE name LIKE 'Nat.%'", url=pg_url)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "n" and int(res.stdout.splitlines()[1]) > 0
    res = run("sql", "--tsv", "SELECT count(*) AS n FROM gold_names", url=pg_url)
    assert res.stdout.splitlines() == ["n", str(946 + sum_mpr_names())]  # nothing was deleted


def sum_mpr_names() -> int:
    import json

    data = json.loads((SHIPPED_DIR / "MathlibMPR.json").read_text())
    # Two styles per item share the item's premise groups: each style has its own gold rows.
    return 2 * sum(len(g["docs"]) for item in data for g in item["premise_group"])
