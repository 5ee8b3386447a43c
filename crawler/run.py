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
"""

from __future__ import annotations

import asyncio
import fcntl
import math
import os
import socket
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from crawler.fetch import MAX_BODY, EngineBroken, Fetcher, RetryPolicy, write_answers_in, write_parse_failure
from crawler.writer import Writer
from crawler.pacing import DbLedger, DeadlineReached, Pacer, SystemClock
from crawler.plan import Counts, WorkQueue, benchmark_texts, current_epoch
from engines.base import EngineHTTPError, EngineOutage, EngineParseError, Rate, config_hash
from store.epochs import is_older_than, open_epoch, settle_epoch
from store.errors import UserError
from store.models import Crawl, Exchange, ParseOutcome
from store.types import utcnow
from store.text import escaped

EXIT_OK = 0
EXIT_WORK_REMAINS = 3
EXIT_ENGINE_BROKEN = 4
EXIT_ALREADY_CRAWLING = 5


class AlreadyCrawling(UserError):
    exit_code = EXIT_ALREADY_CRAWLING


@dataclass
class CrawlOptions:
    engines: list[str]
    bench: str
    rates: dict[str, Rate] = field(default_factory=dict)  # engine → rate; "*" for all
    urls: dict[str, str] = field(default_factory=dict)
    num_results: int | None = None
    limit: int | None = None  # query texts per engine in this run
    deadline: float | None = None  # seconds from start
    refresh: bool = False
    all_styles: bool = False
    retry_failed: bool = False
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    lease_ttl: float = 900.0
    timeout: float | None = None
    margin: float | None = None  # pacing safety margin (None: crawler.pacing.default_margin)
    sample: int | None = None  # crawl the first N of the seeded, style-stratified order only
    seed: int = 0
    # requests in flight per engine (None: grown from 1 by the observed exchange time vs the
    # pacing interval, up to AUTO_CONCURRENCY_MAX); the pacer bounds the rate either way
    concurrency: int | None = None
    # engine → identity that replaces the base URL in the configuration (``engines demo``'s
    # stand-ins: the same configuration whatever port they get, labelled "ENGINE (stand-in)")
    stand_ins: dict[str, dict[str, Any]] = field(default_factory=dict)
    epoch_label: str | None = None  # label of the epoch this run crawls (default: date of its first send)
    refresh_if_older: float | None = None  # seconds: open a new epoch only when the newest began earlier
    max_body: int = MAX_BODY  # response bytes read at most (decompressed); the rest: archived truncated, failed


@dataclass
class EngineResult:
    engine: str
    label: str
    config_id: int
    epoch: int
    host: str
    rate: Rate
    counts: Counts
    sent_texts: int = 0
    attempts: int = 0
    exchanges: int = 0
    answered_now: int = 0
    failed_now: int = 0
    recovered: int = 0
    stopped: str | None = None  # "limit" | "deadline" | "outage" | "paused" | "broken: ..."
    exhausted: int = 0
    outages: int = 0  # outage answers seen (maintenance pages, restarting backends)
    stop_line: str | None = None  # the one line saying why an outage / a pause stopped it


@dataclass
class CrawlSummary:
    results: list[EngineResult]
    elapsed: float
    crawl_id: int | None

    @property
    def exit_code(self) -> int:
        if any(r.stopped and r.stopped.startswith("broken") for r in self.results):
            return EXIT_ENGINE_BROKEN
        if any(r.counts.pending > 0 for r in self.results):
            return EXIT_WORK_REMAINS
        return EXIT_OK


# ------------------------------------------------------------------ reporting


class EtaEstimator:
    """Seconds left for one engine: the pacing bound or the observed pace, whichever is slower.

    The pacing bound (:func:`eta`) is right when the courtesy limit binds and far too
    short when the crawler's or the server's speed does (it said 0–3 s with 16–106 s
    left, issue 13). The observed pace is the completion rate over a sliding window of
    ``max(min_window, 30 × interval)`` seconds: 30 pacing intervals average out the
    bursts a sliding-window limit allows (n sends, then a wait of a period), so a
    courtesy-bound crawl's observed pace matches its pacing bound within a few percent,
    and the larger of the two is the honest one either way.
    """

    def __init__(self, *, min_window: float = 30.0, clock=time.monotonic) -> None:
        self.min_window = min_window
        self.clock = clock
        self._base: int | None = None  # texts completed when the run started
        self._samples: deque[tuple[float, int]] = deque()  # (time, texts completed)
        # Seconds per request as the crawl measures it (a request loop's smoothed time per
        # exchange, pacing waits included, divided by the loops running); None: unknown.
        self.pace: float | None = None

    def observe(self, completed: int, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        if self._base is None:
            self._base = completed
            return
        if completed == (self._samples[-1][1] if self._samples else self._base):
            return  # no progress: keep the older sample, so the window spans the stall
        # The pace is timed from the first completion on: the run's start-up (seeding,
        # connecting, the first request's handshake) says nothing about the steady pace.
        self._samples.append((now, completed))

    def observed_rate(self, interval: float, now: float | None = None) -> float | None:
        """Texts completed per second over the window (None before anything completed)."""
        now = self.clock() if now is None else now
        window = max(self.min_window, 30.0 * interval)
        samples = self._samples
        # Keep one sample at or before the window's start, so the window is always full.
        while len(samples) > 2 and samples[1][0] <= now - window:
            samples.popleft()
        if len(samples) < 2:
            return None
        t0, c0 = samples[0]
        done = samples[-1][1] - c0
        span = now - t0
        if done <= 0 or span <= 0:
            return None
        return done / span

    def seconds(self, todo: int, interval: float, batch: int, now: float | None = None) -> float:
        bound = eta(todo, interval, batch)
        if todo <= 0:
            return 0.0
        if self.pace is not None:
            # The crawl's own measure of seconds per request at its current concurrency:
            # right from the first requests on, where the completion rate over a window
            # still averages in the slower start (a concurrency that grew from 1).
            return max(bound, -(-todo // max(1, batch)) * self.pace)
        rate = self.observed_rate(interval, now)
        return bound if rate is None else max(bound, todo / rate)


def fmt_clock(unix_seconds: float) -> str:
    """HH:MM:SS local time, with the date when it is not today; never raises (a stored
    pause from an untrusted Retry-After may be absurd)."""
    try:
        when = time.localtime(unix_seconds)
    except (OverflowError, ValueError, OSError):
        return "(a time beyond the calendar)"
    fmt = "%H:%M:%S" if when[:3] == time.localtime()[:3] else "%Y-%m-%d %H:%M:%S"
    return time.strftime(fmt, when)


class Reporter:
    """Plain log lines on stderr (not a TTY): one per event and a progress line now and then.

    The ETA is :class:`EtaEstimator`'s (pacing bound or observed pace, whichever is
    slower); while the engine's host is paused (429 / outage) the line says
    "paused until HH:MM:SS" instead, and a new pause is logged when it starts.
    ``todo`` is what this run will still send (``--limit`` caps it); by default the
    due count.
    """

    def __init__(self, stream=None, every: float = 30.0) -> None:
        self.stream = stream or sys.stderr
        self.every = every
        self._last: dict[str, float] = {}
        self._estimators: dict[str, EtaEstimator] = {}
        self._paused: dict[str, float | None] = {}
        self.last_eta: dict[str, float] = {}  # engine → the last ETA shown, in seconds

    def log(self, message: str) -> None:
        # Remote content (a body snippet, a hit name, an outage reason) reaches log lines:
        # control characters are shown escaped, terminal or not (store.text.escaped).
        print(escaped(message), file=self.stream, flush=True)

    def set_pace(self, engine: str, seconds_per_request: float | None) -> None:
        """The crawl's measured seconds per request at its current concurrency."""
        self._estimators.setdefault(engine, EtaEstimator()).pace = seconds_per_request

    def eta_text(self, engine: str, counts: Counts, interval: float, batch: int, *,
                 todo: int | None = None, paused_until: float | None = None) -> str:
        """"ETA 3m05s" or "paused until 14:02:31"; observes the progress in ``counts``."""
        est = self._estimators.setdefault(engine, EtaEstimator())
        est.observe(counts.answered + counts.failed)
        seconds = est.seconds(counts.pending if todo is None else todo, interval, batch)
        self.last_eta[engine] = seconds
        if paused_until is not None and paused_until > time.time():
            return f"paused until {fmt_clock(paused_until)}"
        return f"ETA {fmt_duration(seconds)}"

    def start(self, engine: str, counts: Counts, interval: float, batch: int, *,
              todo: int | None = None, paused_until: float | None = None) -> None:
        text = self.eta_text(engine, counts, interval, batch, todo=todo, paused_until=paused_until)
        self.log(f"{engine}: {counts.answered}/{counts.total} answered, {counts.pending} due, "
                 f"{counts.failed} failed; {text}")
        self._last[engine] = time.monotonic()

    def update(self, engine: str, counts: Counts, interval: float, batch: int, *,
               todo: int | None = None, paused_until: float | None = None) -> None:
        now = time.monotonic()
        text = self.eta_text(engine, counts, interval, batch, todo=todo, paused_until=paused_until)
        paused = paused_until if paused_until is not None and paused_until > time.time() else None
        new_pause = paused is not None and paused != self._paused.get(engine)
        self._paused[engine] = paused
        if now - self._last.get(engine, 0.0) >= self.every or counts.pending == 0 or new_pause:
            self._last[engine] = now
            self.log(f"{engine}: {counts.answered}/{counts.total} answered, {counts.pending} due; {text}")

    def close(self) -> None:
        pass


class RichReporter(Reporter):
    """One rich progress bar per engine, with the ETA of :class:`EtaEstimator`."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True, highlight=False)
        self.progress = Progress(
            TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[eta]}"), TimeElapsedColumn(), console=self.console,
        )
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def log(self, message: str) -> None:
        self.console.print(escaped(message), markup=False, highlight=False, soft_wrap=True)

    def start(self, engine: str, counts: Counts, interval: float, batch: int, *,
              todo: int | None = None, paused_until: float | None = None) -> None:
        self.tasks[engine] = self.progress.add_task(
            engine, total=counts.total, completed=counts.answered + counts.failed,
            eta=self.eta_text(engine, counts, interval, batch, todo=todo, paused_until=paused_until),
        )

    def update(self, engine: str, counts: Counts, interval: float, batch: int, *,
               todo: int | None = None, paused_until: float | None = None) -> None:
        self.progress.update(self.tasks[engine], completed=counts.answered + counts.failed,
                             eta=self.eta_text(engine, counts, interval, batch, todo=todo,
                                               paused_until=paused_until))

    def close(self) -> None:
        self.progress.stop()


def eta(pending: int, interval: float, batch: int) -> float:
    """Seconds to send ``pending`` texts at the pacing interval (requests of ``batch`` texts):
    the pacing bound, a lower bound on the time left."""
    return -(-pending // max(1, batch)) * interval


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    m, s = divmod(seconds, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


# ----------------------------------------------------------------- SQLite lock


class CrawlLock:
    """An exclusive lock file next to a SQLite cache: one crawler per file.

    ``flock`` is released by the kernel when the process dies (even ``kill -9``), so a
    stale file never blocks a restart.
    """

    def __init__(self, db_path: str) -> None:
        self.path = Path(db_path + ".crawl.lock")
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise AlreadyCrawling(
                f"already crawling: {holder} holds {self.path}; wait for it to finish "
                "(one crawler per SQLite file; use PostgreSQL for several workers)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def sqlite_path(db) -> str | None:
    if db.dialect != "sqlite":
        return None
    path = db.engine.url.database
    return None if not path or path == ":memory:" else str(Path(path).resolve())


# ------------------------------------------------------------------- the run


@dataclass
class _Engine:
    name: str
    adapter: Any
    config_id: int
    label: str
    epoch: int
    rate: Rate
    queue: WorkQueue
    result: EngineResult
    finished: bool = False


def _code_version() -> str:
    from engines import __version__

    return __version__


def _resolve_engines(db, opts: CrawlOptions, worker: str) -> list[_Engine]:
    from engines.registry import get_adapter
    from store.benchmarks import find_benchmark
    from store.writes import ensure_config

    bench = find_benchmark(db, opts.bench)
    texts = benchmark_texts(db, bench.id, opts.all_styles)
    if not texts:
        raise UserError(f"benchmark {opts.bench!r} has no query texts to crawl")
    out: list[_Engine] = []
    seen: set[str] = set()
    for name in opts.engines:
        name = name.lower()
        if name in seen:
            continue
        seen.add(name)
        params: dict[str, Any] = {}
        if opts.num_results is not None:
            params["num_results"] = opts.num_results
        if opts.timeout is not None:
            params["timeout"] = opts.timeout
        adapter = get_adapter(name, base_url=opts.urls.get(name), **params)
        check_secrets_over_tls(adapter)
        ident = adapter.identity()
        label = name if adapter.num_results == adapter.defaults.num_results else f"{name}@{adapter.num_results}"
        if name in opts.stand_ins:
            ident.pop("base_url", None)
            ident["stand_in"] = opts.stand_ins[name]
            label += " (stand-in)"
        elif "base_url" in ident:
            label += f" ({ident['base_url']})"
        with db.session() as s, s.begin():
            cfg = ensure_config(
                s, engine=adapter.engine, endpoint_version=adapter.endpoint_version, params=ident,
                config_hash=config_hash(ident), label=label[:200], result_cap=adapter.defaults.result_cap,
            )
            config_id = cfg.id
        epoch = current_epoch(db, config_id)
        if opts.refresh or (opts.refresh_if_older is not None
                            and is_older_than(db, config_id, epoch, opts.refresh_if_older)):
            epoch += 1
        kept = open_epoch(db, config_id, epoch, opts.epoch_label)
        if kept is not None and opts.refresh_if_older is None:  # a cron run keeps resuming its epoch
            raise UserError(f"{name}: epoch {epoch} is already labelled {kept!r}; drop --epoch-label, "
                            "or pass --refresh to open a new epoch with the new label")
        rate = opts.rates.get(name) or opts.rates.get("*") or adapter.defaults.rate
        if opts.sample is not None:
            from crawler.plan import SampleQueue, sampled_texts, store_sample

            sample = sampled_texts(db, bench.id, opts.all_styles, opts.sample, opts.seed)
            sid = store_sample(db, engine=name, bench=bench.name, seed=opts.seed, texts=sample)
            queue = SampleQueue(db, subset_id=sid, config_id=config_id, epoch=epoch, texts=sample,
                                benchmark_id=bench.id, all_styles=opts.all_styles, worker=worker,
                                lease_ttl=opts.lease_ttl)
        else:
            queue = WorkQueue(db, config_id=config_id, epoch=epoch, texts=texts, benchmark_id=bench.id,
                              all_styles=opts.all_styles, worker=worker, lease_ttl=opts.lease_ttl)
        result = EngineResult(engine=name, label=label, config_id=config_id, epoch=epoch, host=adapter.host,
                              rate=rate, counts=Counts(len(queue.texts), 0, 0))
        out.append(_Engine(name, adapter, config_id, label, epoch, rate, queue, result))
    return out


def _is_loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_secrets_over_tls(adapter) -> None:
    """Refuse (one line) to crawl when a credential would cross the network in clear text.

    Probes the request the adapter would send: a secret is the value of a variable the
    adapter declares in ``SECRET_ENVS`` appearing anywhere in the request, a
    secret-looking header or query parameter (:func:`engines.base.redact_headers`'s
    pattern), or user:password in the URL. Plain ``http://`` is allowed for loopback.
    """
    from urllib.parse import parse_qsl

    from engines.base import _SECRET_NAME
    from store.errors import InputError

    request = adapter.build_request(["secret check"])
    url = request.url
    if url.scheme != "http" or _is_loopback(url.host):
        return
    found: list[str] = []
    for env in getattr(adapter, "SECRET_ENVS", ()) or ():
        value = os.environ.get(env)
        if value and (value in str(url) or any(value in v for v in request.headers.values())
                      or value.encode() in (request.content or b"")):
            found.append(env)
    found += [f"header {k}" for k in request.headers if _SECRET_NAME.search(k)]
    found += [f"query parameter {k}" for k, _ in parse_qsl(url.query.decode() if isinstance(url.query, bytes)
                                                           else str(url.query)) if _SECRET_NAME.search(k)]
    if url.userinfo:
        found.append("user:password in the URL")
    if found:
        raise InputError(
            f"{adapter.engine}: refusing to send a credential ({found[0]}) over plain http:// to "
            f"{url.host}; use an https:// URL, or unset the key for this host"
        )


def recover_unparsed(db, eng: _Engine, *, min_age: float) -> int:
    """Answers from archived 2xx exchanges that a killed run never parsed (no network needed).

    In batches of 500 exchanges, each parsed and written in one transaction with the
    garbage collector paused (one transaction per exchange made recovering 10,000 bodies
    take 15 s); a body outside ``min_age`` may be another worker's being parsed right now.
    """
    from store.benchmarks import query_sha256
    from store.writes import paused_gc

    cutoff = utcnow().timestamp() - min_age
    unparsed = (Exchange.config_id == eng.config_id, Exchange.epoch == eng.epoch,
                Exchange.status_code >= 200, Exchange.status_code < 300,
                ~sa.exists().where(ParseOutcome.exchange_id == Exchange.id))
    with db.session() as s:
        ids = list(s.execute(sa.select(Exchange.id).where(*unparsed).order_by(Exchange.id)).scalars())
    recovered = 0
    for i in range(0, len(ids), 500):
        with db.engine.begin() as conn, paused_gc():
            rows = conn.execute(
                sa.select(Exchange.id, Exchange.query_texts, Exchange.status_code, Exchange.response_headers,
                          Exchange.response_body, Exchange.elapsed_ms, Exchange.finished_at)
                .where(Exchange.id.in_(ids[i:i + 500]), *unparsed).order_by(Exchange.id)).all()
            for ex_id, texts, status, headers, body, elapsed, finished in rows:
                if finished is not None and finished.timestamp() > cutoff:
                    continue  # possibly another worker's exchange being parsed right now
                error = None
                try:
                    parsed = eng.adapter.parse(list(texts), status, headers or {}, body or b"")
                    if len(parsed) != len(texts):
                        raise EngineParseError(f"{len(parsed)} answer lists for {len(texts)} queries")
                except (EngineParseError, EngineHTTPError, EngineOutage) as exc:
                    # An outage body answers nothing: its texts stay due and the crawl sends them again.
                    error = f"outage: {exc}" if isinstance(exc, EngineOutage) else str(exc)
                except Exception as exc:  # noqa: BLE001 - a body that crashes the parser must not stop every later run
                    error = f"{eng.adapter.engine}: the parser failed: {type(exc).__name__}: {exc}"[:500]
                if error is None:
                    items = [(query_sha256(t), t) for t in texts]
                    recovered += len(write_answers_in(conn, eng.adapter.parser_version, eng.config_id, eng.epoch,
                                                      ex_id, items, parsed, elapsed))
                    continue
                write_parse_failure(conn, ex_id, eng.adapter.parser_version, error)
    return recovered


def _todo(eng: _Engine, opts: CrawlOptions) -> int:
    """Texts this run will still send: the due ones, capped by what ``--limit`` leaves."""
    pending = eng.result.counts.pending
    return pending if opts.limit is None else max(0, min(pending, opts.limit - eng.result.sent_texts))


async def _watch_pauses(engines: list[tuple[_Engine, Fetcher]], opts: CrawlOptions, reporter: Reporter,
                        pauses: dict[str, float | None], every: float = 0.5) -> None:
    """Read each host's pause from the pacer's ledger now and then, and refresh the
    progress lines meanwhile: a paused engine completes nothing, so without this its
    line would neither say "paused until" nor let its ETA grow."""
    while True:
        hosts = {eng.adapter.host: f.pacer for eng, f in engines}
        for host, pacer in hosts.items():
            try:
                pauses[host] = await asyncio.to_thread(pacer.ledger.paused_until, host)
            except Exception:  # noqa: BLE001 - a progress line must never stop a crawl
                pauses[host] = None
        for eng, f in engines:
            if eng.result.stopped is None and eng.result.counts.pending > 0 and not eng.finished:
                reporter.update(eng.name, eng.result.counts, f.pacer.interval, eng.adapter.batch_size,
                                todo=_todo(eng, opts), paused_until=pauses.get(eng.adapter.host))
        await asyncio.sleep(every)


# Requests in flight per engine when --concurrency is not given: grown from 1 while the
# observed time per exchange is longer than the pacing interval (a limit above 1/latency).
AUTO_CONCURRENCY_MAX = 8
# Texts claimed per lease transaction, at most: one claim serves several requests.
CLAIM_CHUNK = 64
# Shared queues: seconds of sends (at the observed pace) one claim may take ahead, at most.
CLAIM_AHEAD = 0.25


def _want(cycle: float, interval: float) -> int:
    """Auto concurrency: as many requests in flight as pacing intervals fit in one exchange."""
    return min(AUTO_CONCURRENCY_MAX, max(1, math.ceil(cycle / interval)))


@dataclass
class _Loop:
    """What the request loops of one engine share."""

    taken: int = 0  # texts handed to a request in this run (skipped ones given back)
    counted_at: float = 0.0
    reseeded: bool = False
    buffer: list[tuple[str, str]] = field(default_factory=list)  # claimed, not yet sent
    cycle: float | None = None  # smoothed seconds per exchange of one loop
    in_flight: int = 0  # loops inside a fetch


async def _crawl_engine(
    db, eng: _Engine, fetcher: Fetcher, opts: CrawlOptions, reporter: Reporter, stop_at: float | None,
    pauses: dict[str, float | None] | None = None,
) -> None:
    res = eng.result
    batch = eng.adapter.batch_size
    interval = fetcher.pacer.interval
    st = _Loop(counted_at=time.monotonic())
    fixed = getattr(opts, "concurrency", None)
    claim_lock = asyncio.Lock()
    tasks: set[asyncio.Task] = set()

    async def take(k: int) -> list[tuple[str, str]]:
        """Up to k claimed texts; one lease transaction claims for several requests."""
        async with claim_lock:
            if not st.buffer:
                loops = max(1, len(tasks))
                # Several workers share the queue on PostgreSQL: claim a little ahead only
                # (two requests per loop, or CLAIM_AHEAD seconds of sends at the pace seen),
                # so the last texts are spread over the workers instead of queued behind one.
                if eng.queue.exclusive:
                    ahead = CLAIM_CHUNK
                else:
                    per_request = max(interval, (st.cycle or math.inf) / loops)
                    ahead = max(2 * loops, math.ceil(CLAIM_AHEAD / per_request))
                want = min(CLAIM_CHUNK, max(k, k * ahead))
                if opts.limit is not None:
                    want = min(want, opts.limit - st.taken)
                if want > 0:
                    st.buffer = await asyncio.to_thread(eng.queue.claim, want)
            items, st.buffer = st.buffer[:k], st.buffer[k:]
            st.taken += len(items)
            return items

    def spawn() -> None:
        task = asyncio.create_task(loop())
        tasks.add(task)

    async def loop() -> None:
        while True:
            if opts.limit is not None and st.taken >= opts.limit:
                res.stopped = "limit"
                return
            if stop_at is not None and time.time() >= stop_at:
                res.stopped = "deadline"
                return
            k = batch if opts.limit is None else min(batch, opts.limit - st.taken)
            t0 = time.monotonic()
            items = await take(k)
            if not items:
                if await asyncio.to_thread(eng.queue.others_holding):
                    # Other workers hold the rest: wait for them, and take over any lease
                    # that expires (a dead worker) instead of exiting with work remaining.
                    await asyncio.sleep(min(5.0, max(0.2, interval)))
                    continue
                if st.in_flight:
                    # Another request of this engine is still out: it goes round again when
                    # done. A re-seed now could race its answer (re-creating the lease row of
                    # a text answered between seed's two reads), so the last loop does it.
                    return
                if not st.reseeded:
                    # Workers that stopped early deleted their claims; bring back what is due.
                    st.reseeded = True
                    await asyncio.to_thread(eng.queue.seed)
                    continue
                return
            # Leases are renewed by the fetcher after every pacer grant (WorkQueue.keep_due).
            st.in_flight += 1
            try:
                outcome = await fetcher.fetch(items)
            finally:
                st.in_flight -= 1
            st.taken -= len(outcome.skipped)
            sent = [sha for sha, _ in items if sha not in outcome.skipped]
            res.sent_texts += len(sent)
            if outcome.answered:
                eng.queue.done(outcome.answered)
                res.answered_now += len(outcome.answered)
            if outcome.failed:
                await asyncio.to_thread(eng.queue.fail, sent, outcome.failed)
                res.failed_now += len(sent)
            if outcome.exhausted:
                res.exhausted += len(sent)
                reporter.log(f"{eng.name}: gave up on {len(sent)} text(s) for this run after "
                             f"{outcome.attempts} attempts ({outcome.exhausted}); they stay due")
            # Counts from the database every few seconds only: counting is O(texts) and
            # would block the event loop (and so delay the other engines' send slots).
            if time.monotonic() - st.counted_at > 5.0:
                st.counted_at = time.monotonic()
                res.counts = await asyncio.to_thread(eng.queue.counts)
            else:
                c = res.counts
                n_failed = len(sent) if outcome.failed else 0
                res.counts = Counts(c.total, c.answered + len(outcome.answered), c.failed + n_failed)
            if outcome.answered:
                cycle = time.monotonic() - t0
                st.cycle = cycle if st.cycle is None else 0.8 * st.cycle + 0.2 * cycle
                # In auto mode the loops are heading for ``want`` (one is added per answer):
                # the pace it will run at within a few requests.
                loops = len(tasks) if fixed is not None else max(len(tasks), _want(st.cycle, interval))
                reporter.set_pace(eng.name, st.cycle / max(1, loops))
            reporter.update(eng.name, res.counts, interval, batch, todo=_todo(eng, opts),
                            paused_until=(pauses or {}).get(eng.adapter.host))
            if fixed is None and outcome.answered:
                # Auto concurrency: as many requests in flight as the pacing interval fits into
                # one exchange's time, so a limit above 1/latency is reached; a courtesy limit
                # (interval much longer than an exchange) keeps one.
                want = _want(st.cycle, interval)
                if len(tasks) < want:
                    spawn()

    try:
        for _ in range(fixed or 1):
            spawn()
        while tasks:
            done, _ = await asyncio.wait(set(tasks), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                tasks.discard(task)
                exc = task.exception()
                if exc is not None:
                    # One loop's stop (breaker, deadline) stops this engine's other requests.
                    for other in tasks:
                        other.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    tasks.clear()
                    raise exc
    except EngineBroken as exc:
        res.stopped = f"broken: {exc}"
        reporter.log(f"error: {exc}; other engines continue")
    except DeadlineReached as exc:
        res.stopped = "deadline"
        line = await asyncio.to_thread(_pause_line, db, eng, exc.until)
        if line is not None:
            res.stopped, res.stop_line = line  # printed once, in the summary
            reporter.log(f"{eng.name}: stopped for this run ({res.stopped}); other engines continue")
    finally:
        for task in tasks:
            task.cancel()
        eng.finished = True
        res.attempts = fetcher.attempts
        res.exchanges = fetcher.exchanges
        res.outages = fetcher.outages
        eng.queue.release()
        res.counts = eng.queue.counts()


def _hhmm(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M UTC")


def host_pause(db, host: str) -> tuple[float | None, float | None, str | None]:
    """(paused_until, outage_since, outage_reason) of a host, from ``host_state``."""
    from store.models import HostState

    with db.session() as s:
        row = s.execute(sa.select(HostState.paused_until, HostState.outage_since, HostState.outage_reason)
                        .where(HostState.host == host)).first()
    return tuple(row) if row is not None else (None, None, None)  # type: ignore[return-value]


def _pause_line(db, eng: _Engine, until: float | None) -> tuple[str, str] | None:
    """("outage" | "paused", one line) when a host pause is what stopped this engine."""
    paused, since, reason = host_pause(db, eng.adapter.host)
    now = time.time()
    if paused is None or paused <= now or (until is not None and paused < until - 0.001):
        return None  # not paused, or the pacing window (not the pause) was what came after the deadline
    if since is not None:
        return "outage", (f"error: {eng.name}: outage since {_hhmm(since)} ({reason}), next try {_hhmm(paused)}: "
                          "not within this run; its texts stay due, run again later")
    return "paused", (f"error: {eng.name}: paused until {_hhmm(paused)} (the server's Retry-After), "
                      "not within this run; its texts stay due, a run started after that resumes")


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
        engines = _resolve_engines(db, opts, worker)
        with db.session() as s, s.begin():
            crawl = Crawl(hostname=socket.gethostname(), pid=os.getpid(), worker=worker,
                          code_version=_code_version(),
                          args={"engines": opts.engines, "bench": opts.bench, "limit": opts.limit,
                                "deadline": opts.deadline, "refresh": opts.refresh,
                                "epoch_label": opts.epoch_label, "refresh_if_older": opts.refresh_if_older,
                                "rates": {k: str(v) for k, v in opts.rates.items()},
                                "all_styles": opts.all_styles})
            s.add(crawl)
            s.flush()
            crawl_id = crawl.id
        # Under the SQLite crawl lock this process is the only crawler of the file: the pacing
        # window and the leases need no re-reading from the database before each send.
        ledger = DbLedger(db, exclusive=lock is not None)
        if lock is not None:
            ledger.unclean_since = _unclean_since(db, crawl_id, reporter)
        # One writer thread with group commit for every exchange, answer and send of the run.
        writer = Writer(db).start()
        for eng in engines:
            eng.queue.exclusive = lock is not None
        clock = SystemClock()
        pacers: dict[str, Pacer] = {}
        fetchers: list[tuple[_Engine, Fetcher]] = []
        conns = max(16, len(engines) * (opts.concurrency or AUTO_CONCURRENCY_MAX))
        limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
        async with httpx.AsyncClient(limits=limits, follow_redirects=False, trust_env=False) as client:
            for eng in engines:
                eng.queue.seed(retry_failed=opts.retry_failed)
                if lock is not None:
                    eng.queue.release_all_stale()
                eng.result.recovered = recover_unparsed(db, eng, min_age=0.0 if lock else 2 * opts.policy.max_delay)
                # One pacer per host: engines sharing a host share its budget (the stricter rate wins).
                pacer = pacers.get(eng.adapter.host)
                if pacer is None or eng.rate.n / eng.rate.period < pacer.rate.n / pacer.rate.period:
                    pacer = Pacer(eng.adapter.host, eng.rate, ledger, margin=opts.margin, clock=clock,
                                  worker=worker, deadline=stop_at, max_wait=opts.policy.retry_after_cap)
                    pacers[eng.adapter.host] = pacer
                fetchers.append((eng, Fetcher(db, eng.adapter, client, pacer, config_id=eng.config_id,
                                              epoch=eng.epoch, crawl_id=crawl_id, policy=opts.policy,
                                              on_event=reporter.log, before_send=eng.queue.keep_due,
                                              writer=writer, max_body=opts.max_body)))
            for eng, fetcher in fetchers:
                fetcher.pacer = pacers[eng.adapter.host]
                eng.result.counts = eng.queue.counts()
                reporter.start(eng.name, eng.result.counts, fetcher.pacer.interval, eng.adapter.batch_size,
                               todo=_todo(eng, opts))
                if eng.result.recovered:
                    reporter.log(f"{eng.name}: recovered {eng.result.recovered} answer(s) from archived "
                                 "responses of an interrupted run")
            pauses: dict[str, float | None] = {}
            watcher = asyncio.create_task(_watch_pauses(fetchers, opts, reporter, pauses))
            try:
                await asyncio.gather(*(_crawl_engine(db, eng, f, opts, reporter, stop_at, pauses)
                                       for eng, f in fetchers))
            finally:
                watcher.cancel()
                try:
                    await watcher
                except asyncio.CancelledError:
                    pass
                # What is queued commits first, then the departures not yet written.
                await asyncio.to_thread(writer.close, ledger.flush_corrections)
                reporter.close()
        summary = CrawlSummary([eng.result for eng in engines], time.time() - t_start, crawl_id)
        for eng in engines:
            settle_epoch(db, eng.config_id, eng.epoch)
        with db.session() as s, s.begin():
            row = s.get(Crawl, crawl_id)
            row.finished_at = utcnow()
            row.status = {0: "done", 3: "incomplete", 4: "broken"}[summary.exit_code]
            row.summary = {r.engine: {"answered_now": r.answered_now, "failed_now": r.failed_now,
                                      "attempts": r.attempts, "pending": r.counts.pending,
                                      "stopped": r.stopped, "epoch": r.epoch} for r in summary.results}
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


def summary_lines(summary: CrawlSummary) -> list[str]:
    lines = []
    for r in summary.results:
        state = r.stopped or ("done" if r.counts.pending == 0 else "incomplete")
        lines.append(
            f"{r.engine} [{r.label}, epoch {r.epoch}, {r.rate}]: {r.answered_now} answered now, "
            f"{r.counts.answered}/{r.counts.total} answered in all, {r.counts.failed} failed, "
            f"{r.counts.pending} due; {r.attempts} attempts; {state}"
            + (f"; {r.outages} outage answer(s)" if r.outages else "")
        )
        if r.stop_line:
            lines.append(r.stop_line)
    lines.append(f"crawl {summary.crawl_id} finished in {fmt_duration(summary.elapsed)}: exit {summary.exit_code}")
    return lines

