"""One crawl run: several engines concurrently, each at its own rate, until nothing is due.

``run_crawl(db, options)`` is what ``engines crawl`` calls. Per engine it resolves the
adapter and configuration (``store.writes.ensure_config``), the epoch, seeds the lease
queue, re-parses archived 2xx bodies a killed run never parsed, then loops: claim a
batch, fetch it (pace → send → archive → parse, with retries), write answers. Engines
run as asyncio tasks; pacers are per host, so a crawl of two engines takes as long as
the slower one. A broken engine (circuit breaker) stops alone.

Exit codes (``CrawlSummary.exit_code``; documented in the README "Crawling" section):
0 everything due is answered, 3 work remains (``--limit``, ``--deadline``, retries
exhausted, leases held by other workers, an outage or a pause the run did not wait
out), 4 an engine was stopped by the circuit breaker, 5 another crawler holds the
SQLite file. Outages and pauses never mark a text failed, so a crawl cannot exit 0
while one leaves texts unanswered.

Pauses: a run waits for a host's pause (``Retry-After``, outage backoff) when it ends
before ``--deadline`` and within ``RetryPolicy.retry_after_cap`` (``--max-pause``, 30 min); otherwise
that engine stops with one line naming it and until when (since when, for an outage),
the other engines go on, and the pause stays in ``host_state`` for the next run.

The rooms of a run: :mod:`crawler.options` (what a run is asked, what it reports),
:mod:`crawler.progress` (ETA, progress lines, the summary lines), :mod:`crawler.lock`
(the SQLite crawl lock), :mod:`crawler.setup` (engines, configurations, epochs, queues,
pacers and fetchers; the TLS secret check) and :mod:`crawler.loop` (an engine's request
loops, the pause watcher). This module orchestrates them: the crawl's row, recovery,
the run. It is the only reader of :class:`CrawlOptions`: each room is handed the few
values it uses.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid

import httpx
import sqlalchemy as sa

from crawler.lock import AlreadyCrawling, CrawlLock, sqlite_path
from crawler.loop import (AUTO_CONCURRENCY_MAX, CLAIM_AHEAD, CLAIM_CHUNK, EngineLoop, host_pause,
                          texts_to_send, watch_pauses)
from crawler.options import (EXIT_ALREADY_CRAWLING, EXIT_ENGINE_BROKEN, EXIT_OK, EXIT_WORK_REMAINS, CrawlOptions,
                             CrawlSummary, EngineResult)
from crawler.pacing import DbLedger, SystemClock
from crawler.progress import EtaEstimator, Reporter, RichReporter, eta, fmt_clock, fmt_duration, summary_lines
from archive.recovery import recover_unparsed
from crawler.setup import CrawlEngine, build_fetchers, check_secrets_over_tls, resolve_engines
from crawler.writer import Writer
from store.epochs import settle_epoch
from store.models import Crawl
from store.types import utcnow

# What callers import from here (the command line, the demo pipeline, tests, perf).
__all__ = [
    "AUTO_CONCURRENCY_MAX", "CLAIM_AHEAD", "CLAIM_CHUNK", "EXIT_ALREADY_CRAWLING", "EXIT_ENGINE_BROKEN", "EXIT_OK",
    "EXIT_WORK_REMAINS", "AlreadyCrawling", "CrawlLock", "CrawlOptions", "CrawlSummary", "EngineResult",
    "EtaEstimator", "Reporter", "RichReporter", "check_secrets_over_tls", "crawl_engines", "eta", "fmt_clock",
    "fmt_duration", "host_pause", "recover_unparsed", "run_crawl", "run_crawl_async", "sqlite_path",
    "summary_lines",
]


def _recover(db, engines: list[CrawlEngine], opts: CrawlOptions, *, exclusive: bool) -> None:
    """Per engine: seed its queue, take back stale leases (under the crawl lock), and recover
    the answers of archived bodies a killed run never parsed."""
    for eng in engines:
        eng.queue.seed(retry_failed=opts.retry_failed)
        if exclusive:
            eng.queue.release_all_stale()
        eng.result.recovered = recover_unparsed(db, eng, min_age=0.0 if exclusive else 2 * opts.policy.max_delay)


def _open_crawl(db, opts: CrawlOptions, worker: str) -> int:
    """The crawl's row (status "running"); its id."""
    from engines import __version__

    with db.session() as s, s.begin():
        crawl = Crawl(hostname=socket.gethostname(), pid=os.getpid(), worker=worker,
                      code_version=__version__,
                      args={"engines": opts.engines, "bench": opts.bench, "limit": opts.limit,
                            "deadline": opts.deadline, "refresh": opts.refresh,
                            "epoch_label": opts.epoch_label, "refresh_if_older": opts.refresh_if_older,
                            "rates": {k: str(v) for k, v in opts.rates.items()},
                            "all_styles": opts.all_styles})
        s.add(crawl)
        s.flush()
        return crawl.id


def _finish_crawl(db, crawl_id: int, engines: list[CrawlEngine], summary: CrawlSummary) -> None:
    """Settle each engine's epoch and close the crawl's row with its status and summary."""
    for eng in engines:
        settle_epoch(db, eng.config_id, eng.epoch)
    with db.session() as s, s.begin():
        row = s.get(Crawl, crawl_id)
        row.finished_at = utcnow()
        row.status = {0: "done", 3: "incomplete", 4: "broken"}[summary.exit_code]
        row.summary = {r.engine: {"answered_now": r.answered_now, "failed_now": r.failed_now,
                                  "attempts": r.attempts, "pending": r.counts.pending,
                                  "stopped": r.stopped, "epoch": r.epoch} for r in summary.results}


def crawl_engines(db, opts: CrawlOptions, worker: str) -> list[CrawlEngine]:
    """The run's engines (adapters, configurations, epochs, rates, queues) as ``opts`` asks."""
    return resolve_engines(db, opts.engines, opts.bench, worker=worker, all_styles=opts.all_styles, urls=opts.urls,
                           num_results=opts.num_results, timeout=opts.timeout, stand_ins=opts.stand_ins,
                           rates=opts.rates, refresh=opts.refresh, refresh_if_older=opts.refresh_if_older,
                           epoch_label=opts.epoch_label, sample=opts.sample, seed=opts.seed,
                           lease_ttl=opts.lease_ttl, params=opts.params)


def _start_lines(fetchers, opts: CrawlOptions, reporter: Reporter) -> None:
    """Each engine's first progress line (and what recovery found)."""
    for eng, fetcher in fetchers:
        eng.result.counts = eng.queue.counts()
        reporter.start(eng.name, eng.result.counts, fetcher.pacer.interval, eng.adapter.batch_size,
                       todo=texts_to_send(eng, opts.limit))
        if eng.result.recovered:
            reporter.log(f"{eng.name}: recovered {eng.result.recovered} answer(s) from archived "
                         "responses of an interrupted run")


async def _crawl_all(db, fetchers, opts: CrawlOptions, reporter: Reporter, stop_at: float | None,
                     writer: Writer, ledger: DbLedger) -> None:
    """Every engine's request loops at once, with the pause watcher; then the writer's last commits."""
    pauses: dict[str, float | None] = {}
    loops = [EngineLoop(db, eng, f, reporter, stop_at, pauses, limit=opts.limit, concurrency=opts.concurrency)
             for eng, f in fetchers]
    watcher = asyncio.create_task(watch_pauses(loops, reporter, pauses))
    try:
        await asyncio.gather(*(lp.run() for lp in loops))
    finally:
        watcher.cancel()
        try:
            await watcher
        except asyncio.CancelledError:
            pass
        # What is queued commits first, then the departures not yet written.
        await asyncio.to_thread(writer.close, ledger.flush_corrections)
        reporter.close()


async def run_crawl_async(db, opts: CrawlOptions, reporter: Reporter | None = None) -> CrawlSummary:
    reporter = reporter or Reporter()
    t_start = time.time()
    stop_at = t_start + opts.deadline if opts.deadline is not None else None
    worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    lock = None
    path = sqlite_path(db)
    if path is not None:
        lock = CrawlLock(path)
        lock.acquire()
    crawl_id: int | None = None
    writer: Writer | None = None
    try:
        engines = crawl_engines(db, opts, worker)
        crawl_id = _open_crawl(db, opts, worker)
        # Under the SQLite crawl lock this process is the only crawler of the file: the pacing
        # window and the leases need no re-reading from the database before each send.
        ledger = DbLedger(db, exclusive=lock is not None)
        if lock is not None:
            ledger.unclean_since = _unclean_since(db, crawl_id, reporter)
        # One writer thread with group commit for every exchange, answer and send of the run.
        writer = Writer(db).start()
        for eng in engines:
            eng.queue.exclusive = lock is not None
        conns = max(16, len(engines) * (opts.concurrency or AUTO_CONCURRENCY_MAX))
        limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
        async with httpx.AsyncClient(limits=limits, follow_redirects=False, trust_env=False) as client:
            _recover(db, engines, opts, exclusive=lock is not None)
            fetchers = build_fetchers(db, engines, policy=opts.policy, margin=opts.margin, max_body=opts.max_body,
                                      client=client, ledger=ledger, clock=SystemClock(), worker=worker,
                                      stop_at=stop_at, crawl_id=crawl_id, writer=writer, on_event=reporter.log)
            _start_lines(fetchers, opts, reporter)
            await _crawl_all(db, fetchers, opts, reporter, stop_at, writer, ledger)
        summary = CrawlSummary([eng.result for eng in engines], time.time() - t_start, crawl_id)
        _finish_crawl(db, crawl_id, engines, summary)
        return summary
    except BaseException as exc:
        if crawl_id is not None:
            _record_failure(db, crawl_id, exc)
        raise
    finally:
        if writer is not None:
            writer.close(ledger.flush_corrections)  # a no-op once closed; after an error, stops the thread
        if lock is not None:
            lock.release()


def _unclean_since(db, crawl_id: int, reporter: Reporter) -> float | None:
    """Under the SQLite crawl lock: an earlier crawl still marked running died without finishing
    (``kill -9``, a crash, power loss), and the sends it made after its last commit are not in
    ``send_log``. Marks them ``killed`` and returns now (each host's first send then waits a
    window), or None."""
    with db.session() as s, s.begin():
        dead = list(s.execute(sa.select(Crawl).where(Crawl.status == "running", Crawl.id != crawl_id)).scalars())
        for row in dead:
            row.status = "killed"
            row.summary = {**(row.summary or {}),
                           "error": "ended without finishing (killed, crashed or power lost); found by crawl "
                                    f"{crawl_id}"}
    if not dead:
        return None
    reporter.log(f"the last crawl of this file (crawl {dead[-1].id}) ended without finishing: each host's first "
                 "send waits one pacing window, as its last sends may not be recorded")
    return time.time()


def _record_failure(db, crawl_id: int, exc: BaseException) -> None:
    """A crawl that stopped on an error is never left "running": failed (or interrupted), with why."""
    interrupted = isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError))
    reason = "interrupted" if interrupted else (" ".join(str(getattr(exc, "message", exc)).split())[:500]
                                                  or type(exc).__name__)
    try:
        with db.session() as s, s.begin():
            row = s.get(Crawl, crawl_id)
            if row is not None and row.status == "running":
                row.status = "interrupted" if interrupted else "failed"
                row.finished_at = utcnow()
                row.summary = {**(row.summary or {}), "error": reason}
    except Exception:  # noqa: BLE001 - the original error matters more than this bookkeeping
        pass


def run_crawl(db, opts: CrawlOptions, reporter: Reporter | None = None) -> CrawlSummary:
    return asyncio.run(run_crawl_async(db, opts, reporter))

