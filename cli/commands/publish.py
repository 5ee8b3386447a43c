"""``engines publish`` and ``engines verify``: one file that reproduces a whole leaderboard, offline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional, Tuple

import typer

try:  # typer >= 0.2x vendors click as typer._click
    from typer._click.core import ParameterSource
except ImportError:  # pragma: no cover
    from click.core import ParameterSource

from cli.commands.common import get_db, info, progress_counter
from cli.interrupts import sigterm_as_interrupt
from store.errors import InputError, UserError
from store.text import escaped

SHOWN_DIFFERENCES = 40


def publish_cmd(
    ctx: typer.Context,
    bench: str = typer.Option(..., "--bench", "-b", help="Benchmark name, e.g. mathlibqr or mathlibmpr."),
    out: Path = typer.Option(..., "--out", "-o", help="The bundle to write, e.g. leaderboard.warc.gz."),
    with_corpus: bool = typer.Option(False, "--with-corpus", help="Embed the corpus file (else it is named by source, revision and sha256)."),
    corpus: Optional[str] = typer.Option(None, "--corpus", "-c", help="Corpus NAME[@REVISION] (default: the only one loaded)."),
    subset: Optional[str] = typer.Option(None, "--subset", help="Score only a loaded subset, e.g. shared171."),
    shared_with: List[str] = typer.Option([], "--shared-with", help="As engines score: a corpus (NAME[@REV]) or name-list file; repeatable."),
    snapshot: List[str] = typer.Option([], "--snapshot", help="As engines score: SYSTEM=CORPUS_OR_FILE."),
    system: List[str] = typer.Option([], "--system", "-s", help="Only these systems (id, label or config-hash prefix); repeatable."),
    style: List[str] = typer.Option([], "--style", help="Query styles to score (default: the primary styles; 'all' for every style)."),
    by: List[str] = typer.Option([], "--by", help="As engines score (the JSON carries every breakdown)."),
    compare: Optional[Tuple[str, str]] = typer.Option(None, "--compare", help="Paired bootstrap between two systems: --compare A B."),
    profile: str = typer.Option("main", "--profile", help="main | mamut | mamut-sklearn."),
    slice_: Optional[str] = typer.Option(None, "--slice", help="engine-subset:ENGINE, as engines score."),
    epoch: Optional[str] = typer.Option(None, "--epoch", help="Epoch per configuration: newest (default), all, a number or label."),
) -> None:
    """Score and write one WARC/1.1 file holding everything the scores need: exchanges, runs, benchmark, claim."""
    from pipelines.publish import publish_bundle, score_options

    snapshots = {}
    for item in snapshot:
        sid, sep, src = item.partition("=")
        if not sep or not sid or not src:
            raise InputError(f"--snapshot {item!r}: expected SYSTEM=CORPUS_OR_FILE")
        snapshots[sid] = src
    options = score_options(bench=bench, corpus=corpus, subset=subset, systems=system, by=by,
                            compare=tuple(compare) if compare and compare[0] else None, profile=profile,
                            shared_with=shared_with, snapshots=snapshots, styles=style, slice=slice_, epochs=epoch)
    db = get_db(ctx)
    t0 = time.perf_counter()
    with sigterm_as_interrupt(), progress_counter("published exchanges") as update:
        s = publish_bundle(db, out, options, with_corpus=with_corpus, progress=update)
    info(f"wrote {s.path}: {len(s.claim['systems'])} systems ({s.remote_systems} remote with {s.exchanges:,} exchanges, "
         f"{s.runs} run(s)), corpus {'embedded' if s.corpus_embedded else 'named by sha256'}, {s.bytes:,} bytes "
         f"in {time.perf_counter() - t0:.1f}s")
    if not s.corpus_embedded:
        from pipelines.corpus_hint import publish_notes

        for note in publish_notes(s.corpora, s.path):
            info(note)
    typer.echo(f"sha256 {s.sha256}  {s.path}")
    typer.echo(f"verify: engines verify {s.path}")


def verify_cmd(
    ctx: typer.Context,
    bundle: Path = typer.Argument(..., help="A leaderboard bundle written by engines publish."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="The corpus file, when the bundle does not embed it (matched by sha256)."),
    db: Optional[str] = typer.Option(None, "--db", help="An EMPTY database to verify in (default: a temporary SQLite file)."),
) -> None:
    """Re-derive every figure of a published leaderboard offline; exit 0 if all are equal, 1 if not, 2 if it cannot."""
    from pipelines.verify import verify_bundle

    root = ctx.find_root()
    if db is None and root.get_parameter_source("db") == ParameterSource.COMMANDLINE:
        db = root.obj.get("db_url")  # `engines --db URL verify` is explicit; ENGINES_DATABASE_URL is ignored
    t0 = time.perf_counter()
    try:
        with sigterm_as_interrupt():
            report = verify_bundle(bundle, corpus=corpus, db_url=db, say=lambda m: info("  " + escaped(m)))
    except UserError as exc:  # whatever stops verify, exit 1 stays "the figures differ"
        exc.exit_code = 2
        raise
    except Exception as exc:  # noqa: BLE001 - a bug is not a verdict either
        import os

        from cli.main import DEBUG_ENV, unexpected_line

        if os.environ.get(DEBUG_ENV):
            raise
        typer.echo(unexpected_line(exc), err=True)
        raise typer.Exit(2) from None
    seconds = time.perf_counter() - t0
    if not report.differences:
        typer.echo(f"verified: {report.systems} systems, {report.figures_equal} figures equal")
        for note in report.notes:
            typer.echo(f"note: {escaped(note)}")
        info(f"  {seconds:.1f}s")
        return
    rows = [("system", "figure", "claimed", "re-derived")]
    rows += [tuple(escaped(x) for x in (d.system, d.figure, d.claimed, d.derived)) for d in report.differences[:SHOWN_DIFFERENCES]]
    widths = [min(60, max(len(r[i]) for r in rows)) for i in range(4)]
    typer.echo(f"NOT verified: {len(report.differences)} differences ({report.figures_equal} figures equal)")
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if len(report.differences) > SHOWN_DIFFERENCES:
        typer.echo(f"… and {len(report.differences) - SHOWN_DIFFERENCES} more differences")
    for note in report.notes:
        typer.echo(f"note: {escaped(note)}")
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("publish")(publish_cmd)
    app.command("verify")(verify_cmd)
