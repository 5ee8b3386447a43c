"""``engines sql``: one read-only query against the cache, safe to hand to colleagues.

The command parses its options and prints the rows; the locked-down runner (read-only
connection or role, the statement and keyword checks, the limits, the cuts, the worker
process that makes ``--timeout`` a wall-clock bound) is :mod:`store.sql`.

Exit codes: 0 rows printed; 2 refused (``engines sql: refused: ...``: not a single
query, or it tried to change something, read files or switch roles), nothing changed;
1 any other error (syntax, unknown table, ``--timeout``), one line.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from cli.commands.common import info, name_cell, print_json, print_table, print_tsv
from store.errors import UserError
from store.sql import EXIT_REFUSED, Refused, check_timeout, cut_note, run_query


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


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
    max_width: int = typer.Option(60, "--max-width", min=0,
                                  help="Cut values to this many characters (0: whole values); a line counts the cuts."),
    tsv: bool = typer.Option(False, "--tsv", help="Tab-separated output with a header line (tab, newline, \\ escaped)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document: {\"columns\": [...], \"rows\": [[...]]}."),
    timeout: float = typer.Option(30.0, "--timeout", min=0.01, help="Stop the query after this many seconds (wall clock)."),
    max_rows: int = typer.Option(10_000, "--max-rows", min=1, help="Print at most this many rows (a line says when cut)."),
) -> None:
    """Run one read-only SQL query against the cache (views v_answers and v_hits; see README).

    It runs with read rights only (SQLite: a read-only connection; PostgreSQL: the
    engines_reader role), so it cannot change, copy or export anything.
    """
    from store.db import database_url

    if tsv and as_json:
        raise UserError("--tsv and --json are two output formats; pass one")
    try:
        check_timeout(timeout)
        url = database_url(ctx.find_root().obj.get("db_url"))
        cols, rows, cut, cells_cut = run_query(url, query, timeout=timeout, max_rows=max_rows, max_width=max_width)
    except Refused as exc:
        typer.echo(f"engines sql: refused: {exc.message}", err=True)
        raise typer.Exit(EXIT_REFUSED) from None
    rows = [tuple(_jsonable(v) for v in r) for r in rows]
    cells_cut += _print(cols, rows, max_width, "tsv" if tsv else "json" if as_json else "table")
    note = cut_note(cells_cut, max_width)
    if note:
        info(note)
    if isinstance(cut, str):
        info(cut)
    elif cut:
        info(f"cut at {max_rows:,} rows: the result has more (--max-rows N to see more)")
    elif not (tsv or as_json):
        info(f"{len(rows)} row(s)")


def _print(cols: list[str], rows: list[tuple], max_width: int, how: str) -> int:
    """Print the rows; returns how many more cells it cut (nested JSON longer than --max-width)."""
    if how == "json":
        print_json({"columns": cols, "rows": [list(r) for r in rows]})
        return 0
    n = 0

    def cell(v: Any) -> str:
        nonlocal n
        text = _text(v)
        if max_width and len(text) > max_width:
            if not isinstance(v, str):  # strings were cut (and counted) by the runner
                n += 1
            return text[: max_width - 1] + "…"
        return text

    if how == "tsv":
        print_tsv(cols, ([cell(v) for v in r] for r in rows))
    else:
        table = Table()
        for c in cols:
            table.add_column(name_cell(c))
        for r in rows:  # remote text (hit names, bodies) may hold terminal escapes: shown escaped
            table.add_row(*(name_cell(cell(v)) for v in r))
        print_table(table)
    return n


def register(app: typer.Typer) -> None:
    app.command("sql")(sql_cmd)
