"""``engines db``, ``engines corpus`` and ``engines bench``: the foundation commands."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

import sqlalchemy as sa
import typer
from rich.table import Table

from cli.commands.common import (db_url, get_db, info, missing_sqlite_file, out_console, progress_counter, sized,
                                 slow_progress, upgrade_lines)
from store import db as dbmod
from store.benchmarks import load_benchmark_file, load_shipped
from store.corpus import load_corpus
from store.errors import InputError
from store.models import Benchmark, Corpus, Query, Subset, SubsetMember
from store.stdin import STDIN, benchmark_from_stdin, corpus_from_stdin

db_app = typer.Typer(help="Schema migrations of the cache database.", no_args_is_help=True)
corpus_app = typer.Typer(help="Load and list corpora (declaration sets).", no_args_is_help=True)
bench_app = typer.Typer(help="Load and list benchmarks and subsets.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(
    ctx: typer.Context,
    no_backup: bool = typer.Option(False, "--no-backup", help="Do not keep a copy of a SQLite file before migrating it."),
) -> None:
    """Apply pending migrations (also done automatically on first use), keeping a copy of a
    SQLite file first; heal what an earlier, failed upgrade left (leftover tables, lost hits)."""
    from archive.heal import heal_lost_hits

    engine = dbmod.create_db_engine(db_url(ctx))
    try:
        res = dbmod.upgrade(engine, backup=not no_backup)
    finally:
        engine.dispose()
    url = dbmod.redact_url(str(engine.url))
    for line in upgrade_lines(res):
        info(line)
    if res.before == res.after:
        info(f"database {url} already at revision {res.after}")
    else:
        info(f"database {url} upgraded {res.before or '(empty)'} -> {res.after}")
    healed = heal_lost_hits(get_db(ctx))
    for line in healed.lines():
        info(line)


@db_app.command("current")
def db_current(ctx: typer.Context) -> None:
    """Show the database's schema revision and the code's head revision."""
    url = dbmod.database_url(ctx.find_root().obj.get("db_url"))
    missing = missing_sqlite_file(url)
    if missing is not None:  # said, not created
        typer.echo(f"(none) (empty: no database file at {missing}; `engines db upgrade` creates it)")
        return
    engine = dbmod.create_db_engine(url)
    try:
        dbmod.check_reachable(engine)
        rev = dbmod.current_revision(engine)
    finally:
        engine.dispose()
    head = dbmod.head_revision()
    state = "up to date" if rev == head else ("empty" if rev is None else f"head is {head}")
    typer.echo(f"{rev or '(none)'} ({state})")


@db_app.command("reader")
def db_reader(ctx: typer.Context) -> None:
    """Create or repair the read-only role engines sql runs with (PostgreSQL; needs the right to create roles)."""
    from store.sql import READER_ROLE, setup_reader

    db = get_db(ctx)
    if db.dialect != "postgresql":
        info("SQLite: engines sql opens the file read-only; there is no role to set up")
        return
    with db.engine.connect() as conn:
        problem = setup_reader(conn)
        if problem is not None:
            conn.rollback()
            raise InputError(f"cannot set up the read-only role {READER_ROLE}: {problem}; "
                             f"run this as a user that may create roles, or have an administrator "
                             f"run: CREATE ROLE {READER_ROLE} NOLOGIN")
        conn.commit()
    info(f"engines sql on {db.url} runs as {READER_ROLE} (SELECT on this schema's tables and views only)")


@corpus_app.command("load")
def corpus_load(
    ctx: typer.Context,
    src: str = typer.Argument(..., help="A .jsonl / .jsonl.gz file, hf://OWNER/DATASET@REVISION[/FILE], or - for stdin."),
    name: str = typer.Option(..., "--name", "-n", help="Corpus name, e.g. mathlib-4280."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Revision label (hf:// sources carry their own)."),
) -> None:
    """Load a corpus in the LeanSearch v2 schema (one transaction, streamed)."""
    db = get_db(ctx)
    t0 = time.perf_counter()
    with ExitStack() as stack:
        shown = None
        if src == STDIN:  # piped in: spooled to a file, recorded as "-"
            src, shown = str(stack.enter_context(corpus_from_stdin())), STDIN
        with progress_counter(f"loading {name}") as update:
            res = load_corpus(db, src, name=name, revision=revision, progress=update, shown_as=shown)
    dt = time.perf_counter() - t0
    if not res.created:
        info(f"corpus {res.name}@{res.revision} already loaded from this file (sha256 {res.sha256[:12]}); nothing to do")
        return
    kinds = ", ".join(f"{k or '(none)'} {v:,}" for k, v in list(res.meta.get("kinds", {}).items())[:8])
    info(
        f"loaded corpus {res.name}@{res.revision}: {res.rows:,} rows in {dt:.1f}s "
        f"({res.rows / dt:,.0f} rows/s), sha256 {res.sha256[:12]}, "
        f"{res.meta.get('duplicate_names', 0)} duplicated names; kinds: {kinds}"
    )


@corpus_app.command("list")
def corpus_list(ctx: typer.Context) -> None:
    """List loaded corpora."""
    db = get_db(ctx)
    table = Table("name", "revision", "rows", "sha256", "source", "loaded at")
    with db.session() as s:
        for c in s.execute(sa.select(Corpus).order_by(Corpus.id)).scalars():
            table.add_row(c.name, c.revision, f"{c.row_count:,}", c.sha256[:12], c.source, f"{c.loaded_at:%Y-%m-%d %H:%M}")
    out_console.print(table)


@bench_app.command("load")
def bench_load(
    ctx: typer.Context,
    src: list[Path] = typer.Argument(
        None, help="Benchmark files (MathlibQR.json, MathlibMPR.json, subsets), a BEIR directory, a JSONL benchmark, or - for stdin (with --name)."
    ),
    shipped: bool = typer.Option(False, "--shipped", help="Load every benchmark file shipped with the package."),
    name: Optional[str] = typer.Option(None, "--name", help="Name to load under (default: the canonical name)."),
    allow_modified: bool = typer.Option(
        False, "--allow-modified", help="Accept a file whose sha256 differs from the published one (hash recorded)."
    ),
    split: str = typer.Option("test", "--split", help="BEIR directory: the qrels split to load (qrels/SPLIT.tsv)."),
    task: Optional[str] = typer.Option(
        None, "--task", help="BEIR/JSONL: theorem-search or premise-retrieval (default: by the number of gold units)."
    ),
) -> None:
    """Load benchmark files; known files are verified by sha256."""
    if not src and not shipped:
        raise InputError("nothing to load: pass benchmark files or --shipped")
    if name and len(src or []) > 1:
        raise InputError("--name applies to a single file; load files one at a time to name them")
    db = get_db(ctx)
    results = load_shipped(db) if shipped else []
    for path in src or []:
        with ExitStack() as stack:
            if str(path) == STDIN:  # piped in: spooled to NAME.json / NAME.jsonl
                if not name:
                    raise InputError("bench load - (standard input) needs --name: a piped file has no name")
                path = stack.enter_context(benchmark_from_stdin(name))
            with slow_progress(f"loading benchmark {sized(path)}"):
                results.append(load_benchmark_file(db, path, name=name, allow_modified=allow_modified, split=split,
                                                   task=task))
    for res in results:
        what = ", ".join(res.names)
        state = "loaded" if res.created else "already loaded"
        flag = " (MODIFIED: hash recorded)" if res.modified else ""
        counts = ", ".join(f"{k} {v}" for k, v in res.counts.items())
        info(f"{state} {res.kind} {what} [sha256 {res.sha256[:12]}]{flag}: {counts}")
        for corpus, held, total in res.corpus_gold or []:
            info(f"  corpus {corpus} holds {held} of {total} gold names")
        if res.corpus_gold == []:
            info("  no corpus loaded yet: load one (engines corpus load) before scoring")


@bench_app.command("subset")
def bench_subset(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The subset's name (score with --subset NAME)."),
    bench: str = typer.Option(..., "--bench", "-b", help="The benchmark whose queries the file lists."),
    qids: str = typer.Option(..., "--qids", help="A file of qids, one a line (# comments); - reads stdin."),
) -> None:
    """Make a named subset of a benchmark's queries from a list of qids (e.g. the ones another harness scored)."""
    from store.benchmarks import subset_from_qids

    res = subset_from_qids(get_db(ctx), name, bench, qids)
    state = "made" if res.created else "already made"
    info(f"{state} subset {name} of {bench}: {res.counts[name]} queries [sha256 {res.sha256[:12]}]; "
         f"score it with --subset {name}")


@bench_app.command("list")
def bench_list(ctx: typer.Context) -> None:
    """List benchmarks and subsets."""
    db = get_db(ctx)
    table = Table("benchmark", "task", "queries", "primary", "sha256", "modified")
    subsets = Table("subset", "members", "kind", "sha256")
    with db.session() as s:
        for b in s.execute(sa.select(Benchmark).order_by(Benchmark.name)).scalars():
            n = s.scalar(sa.select(sa.func.count()).select_from(Query).where(Query.benchmark_id == b.id))
            p = s.scalar(
                sa.select(sa.func.count()).select_from(Query).where(Query.benchmark_id == b.id, Query.primary.is_(True))
            )
            table.add_row(b.name, b.task, str(n), str(p), b.sha256[:12], "yes" if b.modified else "")
        for sub in s.execute(sa.select(Subset).order_by(Subset.name)).scalars():
            m = s.scalar(sa.select(sa.func.count()).select_from(SubsetMember).where(SubsetMember.subset_id == sub.id))
            subsets.add_row(sub.name, str(m), sub.member_kind, sub.sha256[:12])
    out_console.print(table)
    out_console.print(subsets)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
    app.add_typer(corpus_app, name="corpus")
    app.add_typer(bench_app, name="bench")
