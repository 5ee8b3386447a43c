"""Shared CLI plumbing: the database handle, stderr console, progress bars."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

import typer
from rich.console import Console

from store.db import Database, open_database

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)



def get_db(ctx: typer.Context, *, migrate: bool = True) -> Database:
    """Open the database named on the command line / environment, once per invocation."""
    root = ctx.find_root()
    root.ensure_object(dict)
    key = "db" if migrate else "db_raw"
    if key not in root.obj:
        db = open_database(root.obj.get("db_url"), migrate=migrate)
        root.obj[key] = db
        root.call_on_close(db.dispose)
    return root.obj[key]


def info(message: str) -> None:
    err_console.print(message, markup=False, highlight=False, soft_wrap=True)


@contextmanager
def progress_counter(description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on a TTY, periodic plain lines otherwise; yields update(done)."""
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=err_console, transient=True,
        ) as prog:
            task = prog.add_task(description, total=total)
            yield lambda done: prog.update(task, completed=done)
    else:
        last = [0]

        def update(done: int) -> None:
            if done - last[0] >= 50_000:
                last[0] = done
                print(f"{description}: {done:,}" + (f" / {total:,}" if total else ""), file=sys.stderr)

        yield update
