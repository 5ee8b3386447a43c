"""``engines sql``: one read-only query against the cache, safe to hand to colleagues.

The command parses its options and prints the rows; the locked-down runner (read-only
connection or role, the statement and keyword checks, the limits, the cuts) is
:mod:`store.sql`.

Exit codes: 0 rows printed; 2 refused (``engines sql: refused: ...``: not a single
query, or it tried to change something, read files or switch roles), nothing changed;
1 any other error (syntax, unknown table, ``--timeout``), one line.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from cli.commands.common import info, out_console
from store.sql import EXIT_REFUSED, Refused, check_timeout, run_query
from store.text import escaped


def _cell(v: Any, max_width: int) -> str:
    if v is None:
        return ""
    if isinstance(v, (bytes, memoryview)):
        return f"<{len(bytes(v))} bytes>"
    if isinstance(v, (list, dict)):
        v = json.dumps(v, ensure_ascii=False)
    text = str(v).replace("\n", " ")
    return text if len(text) <= max_width else text[: max_width - 1] + "…"


def _jsonable(v: Any) -> Any:
    # Nested JSON objects come back as lists of pairs (duplicate keys kept); show them as objects.
    if isinstance(v, list) and v and all(isinstance(p, tuple) and len(p) == 2 for p in v):
        return {k: _jsonable(x) for k, x in v}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def sql_cmd(
    ctx: typer.Context,
    query: str = typer.Argument(..., help="One read-only SQL query, e.g. \"SELECT * FROM v_hits LIMIT 10\"."),
    max_width: int = typer.Option(60, "--max-width", min=8, help="Truncate cells to this many characters."),
    tsv: bool = typer.Option(False, "--tsv", help="Tab-separated output with a header line instead of a table."),
    timeout: float = typer.Option(30.0, "--timeout", min=0.01, help="Stop the query after this many seconds."),
    max_rows: int = typer.Option(10_000, "--max-rows", min=1, help="Print at most this many rows (a line says when cut)."),
) -> None:
    """Run one read-only SQL query against the cache (views v_answers and v_hits; see README).

    It runs with read rights only (SQLite: a read-only connection; PostgreSQL: the
    engines_reader role), so it cannot change, copy or export anything.
    """
    from store.db import database_url

    try:
        _run(ctx, query, max_width, tsv, timeout, max_rows, database_url)
    except Refused as exc:
        typer.echo(f"engines sql: refused: {exc.message}", err=True)
        raise typer.Exit(EXIT_REFUSED) from None


def _run(ctx, query, max_width, tsv, timeout, max_rows, database_url) -> None:  # noqa: ANN001
    check_timeout(timeout)
    url = database_url(ctx.find_root().obj.get("db_url"))
    cols, rows, cut = run_query(url, query, timeout=timeout, max_rows=max_rows)
    rows = [tuple(_jsonable(v) for v in r) for r in rows]
    if tsv:
        print("\t".join(cols))
        for r in rows:
            print("\t".join(_cell(v, max_width).replace("\t", " ") for v in r))
    else:
        table = Table(*(escape(escaped(c)) for c in cols))
        for r in rows:  # remote text (hit names, bodies) may hold terminal escapes: shown escaped
            table.add_row(*(escape(escaped(_cell(v, max_width))) for v in r))
        out_console.print(table)
    if isinstance(cut, str):
        info(cut)
    elif cut:
        info(f"cut at {max_rows:,} rows: the result has more (--max-rows N to see more)")
    elif not tsv:
        info(f"{len(rows)} row(s)")


def register(app: typer.Typer) -> None:
    app.command("sql")(sql_cmd)

