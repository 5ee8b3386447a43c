"""Shared CLI plumbing: the database handle, stderr console, progress bars."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import typer
from rich.console import Console

from store.db import URL_ENV, Database, UpgradeResult, database_url, open_database
from store.errors import DatabaseError

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


# The commands that create data, and only they, may create a SQLite database file; any
# other command pointed at a missing file says so instead of showing an empty database.
CREATES_DATA = ("db upgrade", "bench load", "corpus load", "crawl", "run bm25", "run dense", "run import",
                "import", "demo")
DEMO_DB = Path("engines-demo") / "cache.db"


def command_name(ctx: typer.Context) -> str:
    """The command's path below ``engines``, e.g. ``bench load``."""
    names: list[str] = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names))


def db_url(ctx: typer.Context) -> str:
    """The database URL of this command: its ``--db``, else ``engines --db``, else
    ``ENGINES_DATABASE_URL``, else the default; a missing SQLite file is refused (one line)
    unless the command creates data (:data:`CREATES_DATA`)."""
    root = ctx.find_root()
    root.ensure_object(dict)
    url = database_url(root.obj.get("db_url"))
    name = command_name(ctx)
    if name in CREATES_DATA:
        return url
    path = missing_sqlite_file(url)
    if path is None:
        return url
    hint = (f"; the demo's database is ./{DEMO_DB.as_posix()}: engines {name} --db sqlite:///{DEMO_DB.as_posix()}"
            if DEMO_DB.is_file() and path.resolve() != DEMO_DB.resolve() else "")
    raise DatabaseError(f"no database at {path} (the file does not exist): `engines {name}` needs an existing "
                        f"database and does not create one; pass --db URL or set {URL_ENV}{hint}")


def missing_sqlite_file(url: str) -> Path | None:
    """The path of a SQLite URL whose file does not exist (else None)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # opening it says what is wrong with it
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database).expanduser()
    return None if path.exists() or not path.resolve().parent.is_dir() else path  # a missing directory: its own error


def get_db(ctx: typer.Context, *, migrate: bool = True) -> Database:
    """Open the database named on the command line / environment, once per invocation."""
    root = ctx.find_root()
    root.ensure_object(dict)
    key = "db" if migrate else "db_raw"
    if key not in root.obj:
        db = open_database(db_url(ctx), migrate=migrate)
        root.obj[key] = db
        root.call_on_close(db.dispose)
        if db.upgraded is not None:
            _say_upgraded(db)
    return root.obj[key]


def upgrade_lines(res: UpgradeResult) -> list[str]:
    """What an upgrade kept and healed, one line each (the revisions are the caller's line)."""
    lines = [f"healed an earlier, failed upgrade: {r}" for r in res.repaired]
    if res.backup is not None:
        lines.append(f"kept a copy of the database as it was ({res.before}) before upgrading it to {res.after}: "
                     f"{res.backup} ({res.backup_bytes / 1e6:,.1f} MB; `engines db upgrade --no-backup` "
                     "upgrades without one)")
    return lines


def _say_upgraded(db: Database) -> None:
    """An automatic upgrade says what it kept, and whether answers lost their hits before."""
    from archive.heal import count_lost_hits

    res = db.upgraded
    if res.before is None:
        return  # a new database: nothing was kept or healed
    for line in upgrade_lines(res):
        info(line)
    if res.before != res.after:
        info(f"database {db.url} upgraded {res.before} -> {res.after}")
    lost = count_lost_hits(db)
    if lost:
        info(f"note: {lost} answers hold no hits (an earlier upgrade lost them); "
             "`engines db upgrade` re-derives them from the archived bodies")


def print_table(table: Any) -> None:
    """A rich table on stdout: fitted to a terminal; piped, never cut (as wide as its cells)."""
    if out_console.is_terminal:
        out_console.print(table)
    else:
        Console(file=sys.stdout, width=2**31 - 1, highlight=False, color_system=None).print(table)


def name_cell(name: Any) -> Any:
    """A name (run, style, system id, URI) as a rich table cell: control characters shown
    escaped (:func:`store.text.escaped`), markup taken literally."""
    from rich.text import Text

    from store.text import escaped

    return Text(escaped(name))


def print_tsv(columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    """A header line and one line per row; fields escaped (:func:`store.text.tsv_field`)."""
    from store.text import tsv_field

    print("\t".join(tsv_field(c) for c in columns))
    for r in rows:
        print("\t".join("" if v is None else tsv_field(v) for v in r))


def print_json(doc: Any) -> None:
    """One JSON document on stdout (UTF-8, no NaN)."""
    import json

    print(json.dumps(doc, ensure_ascii=False, allow_nan=False, default=str))


def info(message: str) -> None:
    err_console.print(message, markup=False, highlight=False, soft_wrap=True)


# A step that reports no counts (a run import, a benchmark load) shows that it is alive on
# stderr once it has taken this long: soon on a terminal, later in a log; never on stdout.
SLOW_AFTER_TTY = 1.0
SLOW_AFTER_LOG = 5.0
SLOW_EVERY_TTY = 0.5
SLOW_EVERY_LOG = 15.0


def sized(path: Path | str) -> str:
    """``big.trec (11.4 MB)``, or the name alone when it is not a file."""
    try:
        size = Path(path).stat().st_size if Path(path).is_file() else None
    except OSError:
        size = None
    return f"{path} ({size / 1e6:,.1f} MB)" if size is not None else str(path)


@contextmanager
def slow_progress(description: str) -> Iterator[None]:
    """Nothing when the step ends quickly; after :data:`SLOW_AFTER_TTY` s on a terminal (one
    line, redrawn) or :data:`SLOW_AFTER_LOG` s in a log (a line every
    :data:`SLOW_EVERY_LOG` s), "DESCRIPTION: 12 s" on stderr until it ends."""
    import threading
    import time

    tty = sys.stderr.isatty()
    delay, every = (SLOW_AFTER_TTY, SLOW_EVERY_TTY) if tty else (SLOW_AFTER_LOG, SLOW_EVERY_LOG)
    stop = threading.Event()
    t0 = time.monotonic()
    shown = [False]

    def tick() -> None:
        if stop.wait(delay):
            return
        while True:
            line = f"{description}: {time.monotonic() - t0:,.0f} s"
            print(f"\r{line}\033[K" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
            shown[0] = True
            if stop.wait(every):
                return

    thread = threading.Thread(target=tick, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if tty and shown[0]:
            print("\r\033[K", end="", file=sys.stderr, flush=True)


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
