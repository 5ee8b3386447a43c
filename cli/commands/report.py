"""``engines report``: score a benchmark and write the static HTML report.

The page and the score JSON it is built from land side by side in ``--out``
(``index.html`` + ``report.json``). ``--from-json`` renders a score file written
earlier (``engines score --json``) without touching the database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Tuple

import typer

from cli.commands.common import get_db, info
from scoring.document import build_score_json, read_score_json, write_report
from store.errors import InputError


def report_command(
    ctx: typer.Context,
    bench: Optional[str] = typer.Option(None, "--bench", "-b", help="Benchmark to score, e.g. mathlibqr."),
    out: Path = typer.Option(Path("report"), "--out", "-o", help="Directory for index.html and report.json."),
    corpus: Optional[str] = typer.Option(None, "--corpus", help="Corpus to resolve against (NAME or NAME@REVISION)."),
    subset: Optional[str] = typer.Option(None, "--subset", help="Score only this named subset, e.g. shared171."),
    system: Optional[list[str]] = typer.Option(None, "--system", help="Only these systems (repeatable)."),
    compare: Optional[Tuple[str, str]] = typer.Option(
        None, "--compare", help="Add a paired bootstrap comparison of two systems: --compare A B."
    ),
    profile: str = typer.Option("main", "--profile", help="Scoring profile."),
    published: bool = typer.Option(
        False, "--published/--no-published",
        help="Also show the published reference rows that apply (own table, dashed on the curves), never ranked.",
    ),
    from_json: Optional[Path] = typer.Option(
        None, "--from-json", help="Render this score JSON (engines.score/1) instead of scoring the database."
    ),
    uncovered: str = typer.Option(
        "drop", "--uncovered", help="Queries whose gold is not in the corpus: drop (the methodology's) or zero (scored 0)."),
    answered_by: Optional[str] = typer.Option(
        None, "--answered-by", help="Score only the queries this system answered."),
) -> None:
    """Write a static HTML leaderboard (no server needed) with the score JSON beside it."""
    if from_json is not None:
        if bench or corpus or subset or system or (compare and compare[0]) or answered_by or uncovered != "drop":
            raise InputError("--from-json renders a finished score file; drop --bench/--corpus/--subset/--system/"
                             "--compare/--uncovered/--answered-by")
        score_json = read_score_json(from_json)
        if published and "published" not in score_json:
            from scoring.reference_rows import attach

            attach(score_json)
        elif not published:  # the same rule as `engines score` and `engines plot`: only when asked
            score_json["published"] = []
    else:
        if not bench:
            raise InputError("which benchmark? pass --bench NAME (see `engines bench list`) or --from-json FILE")
        score_json = build_score_json(
            get_db(ctx), bench, corpus=corpus, subset=subset, systems=system,
            compare=tuple(compare) if compare and compare[0] else None, profile=profile, published=published,
            uncovered=uncovered, answered_by=answered_by,
        )
    if not score_json.get("systems"):  # as engines score and plot: nothing to rank is a failure, no page
        name = (score_json.get("benchmark") or {}).get("name") or bench or str(from_json)
        raise InputError(f"{name}: no system has answers for these queries yet, so there is no report to write "
                         f"(crawl or run a local engine first, e.g. `engines run bm25 --bench {name}`)")
    page = write_report(score_json, out)
    if score_json.get("banner"):
        info(f"note: {score_json['banner']}")
    info(f"report: {len(score_json.get('systems') or [])} systems, {len(score_json.get('queries') or [])} queries")
    typer.echo(str(page))


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
