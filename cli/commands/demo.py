"""``engines demo``: the whole pipeline offline (the pipeline is :mod:`pipelines.demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
try:  # typer >= 0.2x vendors click as typer._click: its contexts return its own enum
    from typer._click.core import ParameterSource
except ImportError:  # pragma: no cover
    from click.core import ParameterSource

from cli.commands.common import info, progress_counter
from scoring import view
from store.errors import UserError


def run_demo(*args: Any, **kwargs: Any):
    """:func:`pipelines.demo.run_demo`, imported when the command runs: the pipeline imports
    every floor, which ``engines --help`` and the other commands need not load."""
    from pipelines.demo import run_demo as run

    return run(*args, **kwargs)


def _leaderboard_lines(js: dict[str, Any]) -> list[str]:
    systems = view.ranked(js.get("systems") or [], view.headline(js))
    width = max([len("system")] + [len(view.label(s)) for s in systems])
    lines = [f"{'system':<{width}} {'n':>5} {'nDCG@10':>8} {'R@1':>6} {'R@10':>6} {'MRR':>6}  badges"]
    for s in systems:
        m = s.get("metrics") or {}

        def v(name: str) -> str:
            x = (m.get(name) or {}).get("value")
            return "—" if x is None else f"{x:.3f}"

        lines.append(
            f"{view.label(s):<{width}} {s.get('n', ''):>5} {v('nDCG@10'):>8} {v('R@1'):>6} {v('R@10'):>6} "
            f"{v('MRR'):>6}  {', '.join(map(str, s.get('badges') or []))}"
        )
    return lines


def demo_command(
    ctx: typer.Context,
    out: Path = typer.Option(
        Path("engines-demo"), "--out", "-o", help="Directory for everything the demo writes: database, report, caches."),
    db: Optional[str] = typer.Option(
        None, "--db", help="Database URL for the demo (default: OUT/cache.db, kept apart from your cache.db)."
    ),
    dense: Optional[bool] = typer.Option(
        None, "--dense/--no-dense",
        help="Add a dense row (default: when the dense extra imports; encoding the slice takes about a minute once).",
    ),
    targets: Optional[int] = typer.Option(
        None, "--targets", min=1,
        help="Only the benchmark's first N targets (all their query styles), crawled and scored as a subset.",
    ),
) -> None:
    """The whole pipeline offline: stand-in engines, real crawler, BM25, scorer, HTML report."""
    root = ctx.find_root()
    if db is None and root.get_parameter_source("db") == ParameterSource.COMMANDLINE:
        db = root.obj.get("db_url")  # `engines --db URL demo` is explicit too
    result = run_demo(out, db, dense=dense, targets=targets, say=info, progress=progress_counter)
    if result.report is None or result.score_json is None:
        raise UserError("the demo produced no report: every step was skipped or failed (see the notes above)")
    typer.echo("")
    typer.echo(f"*** {view.banner(result.score_json)} ***")
    for line in _leaderboard_lines(result.score_json):
        typer.echo(line)
    if len(result.crawled_engines) > 1:
        typer.echo(
            "note: the stand-ins rank the slice lexically, each weighting other fields (LeanSearch docstrings, "
            "LeanExplore names and modules, Lean Finder statements); they show the machinery, not the engines."
        )
    skipped = [s for s in result.steps if not s.ok]
    if skipped:
        typer.echo("skipped: " + "; ".join(f"{s.name} ({s.note})" for s in skipped))
    typer.echo("")
    typer.echo(f"database: {result.db_url}")
    typer.echo(f"report:   {result.report.resolve()}  (report.json beside it)")
    if result.bundle is not None:
        typer.echo(f"bundle:   {result.bundle}  (sha256 {result.bundle_sha256})")
        typer.echo(f"verify:   engines verify {result.bundle}")
    typer.echo("")
    typer.echo("next, a real crawl (public services, courtesy rates; resumable, safe to re-run):")
    typer.echo("  engines bench load --shipped")
    typer.echo("  engines corpus load hf://FrenzyMath/lsv2-mathlib-v4.28.0-rc1-jsonl@c5f07cc71d42 --name mathlib-4280")
    typer.echo("  engines crawl leansearch leanexplore leanfinder --bench mathlibqr")
    typer.echo("  engines run bm25 --bench mathlibqr")
    typer.echo("  engines report --bench mathlibqr --out report")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
