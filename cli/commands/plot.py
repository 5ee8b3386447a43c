"""``engines plot``: publication figures of the curves over k (matplotlib, the ``plots`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cli.commands.common import get_db, info
from store.errors import InputError
from store.text import escaped


def plot_command(
    ctx: typer.Context,
    bench: Optional[str] = typer.Option(None, "--bench", "-b", help="Benchmark to score and plot, e.g. mathlibqr."),
    metric: str = typer.Option("ndcg", "--metric", "-m", help="ndcg | recall | precision | covered."),
    out: Path = typer.Option(..., "--out", "-o", help="Output file: .pdf, .svg (vector) or .png (300 dpi)."),
    corpus: Optional[str] = typer.Option(None, "--corpus", help="Corpus NAME or NAME@REVISION (default: the only one loaded)."),
    subset: Optional[str] = typer.Option(None, "--subset", help="Score only this named subset, e.g. shared171."),
    slice_: Optional[str] = typer.Option(None, "--slice", help="engine-subset:ENGINE: every row on that engine's sampled queries."),
    system: Optional[list[str]] = typer.Option(None, "--system", help="Only these systems (repeatable)."),
    published: bool = typer.Option(
        False, "--published/--no-published", help="Also draw the published reference rows that apply (dashed, grey)."
    ),
    from_json: Optional[Path] = typer.Option(None, "--from-json", help="Plot this score JSON instead of scoring the database."),
    uncovered: str = typer.Option(
        "drop", "--uncovered", help="Queries whose gold is not in the corpus: drop (the methodology's) or zero (scored 0)."),
    answered_by: Optional[str] = typer.Option(
        None, "--answered-by", help="Score only the queries this system answered."),
) -> None:
    """Draw curves k = 1…200 with bootstrap bands, in leaderboard order, for a paper."""
    from scoring.document import read_score_json
    from scoring.plot import plot_curves

    if from_json is not None:
        if bench or corpus or subset or slice_ or system or answered_by or uncovered != "drop":
            raise InputError("--from-json plots a finished score file; drop --bench/--corpus/--subset/--slice/--system/"
                             "--uncovered/--answered-by")
        doc = read_score_json(from_json)
    else:
        if not bench:
            raise InputError("which benchmark? pass --bench NAME (see `engines bench list`) or --from-json FILE")
        from scoring.results import score

        doc = score(get_db(ctx), bench, corpus=corpus, subset=subset, systems=system or None, slice=slice_,
                    uncovered=uncovered, answered_by=answered_by).to_json()
    if published and "published" not in doc:
        from scoring.reference_rows import attach

        attach(doc)
    elif not published:
        doc["published"] = []
    path = plot_curves(doc, metric, out)
    if doc.get("banner"):
        info(f"note: {escaped(doc['banner'])}")
    typer.echo(escaped(path))


def register(app: typer.Typer) -> None:
    app.command("plot")(plot_command)
