"""``engines reparse``: re-derive answers and hits from archived bodies (no network)."""

from __future__ import annotations

from typing import List, Optional

import typer

from cli.commands.common import get_db, info
from engines.registry import engine_list


def reparse_cmd(
    ctx: typer.Context,
    engines: Optional[List[str]] = typer.Argument(
        None, help=f"Remote engines whose archive to re-parse (default: all): {engine_list()}."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Parse and count, write nothing."),
) -> None:
    """Re-parse every archived response with the current parser version: new parse outcomes and
    answers (old answers kept, marked superseded); texts that now parse become answered without a send."""
    from archive.reparse import reparse, summary_lines

    db = get_db(ctx)
    summary = reparse(db, engines or None, dry_run=dry_run)
    lines = summary_lines(summary)
    if not summary.results:
        info("no remote engine configurations to re-parse; run `engines crawl ENGINE --bench B` first")
    for line in lines[:-1]:
        print(line)
    info(lines[-1])


def register(app: typer.Typer) -> None:
    app.command("reparse")(reparse_cmd)
