"""Fetch one batch of query texts from one engine: pace, send, archive, parse, retry.

Order per attempt (PERFORMANCE-NOTES.md §6.3–6.4): the pacer is *inside* the retried
function, so every retry is re-paced; before each attempt ``before_send`` renews the
leases and drops texts answered or claimed elsewhere meanwhile (nothing left: no
send); the slot is granted right before sending; when the request headers start to leave, the send log is corrected to that
moment (before the response, so other workers' windows see it); the exchange
(request as sent with secrets redacted by :func:`engines.base.redact_headers` /
:func:`engines.base.redact_url`, status, headers, raw body or the transport error) is
committed with its parse outcome (a ``parse_outcomes`` row for every parse) and its
answers in one transaction of the crawl's writer (:mod:`crawler.writer`, group commit):
no answer exists without its archived body, and a parser that crashes still leaves the
exchange archived. Parse errors never create an answer. Nothing a server sends raises
out of here (issue 21): a body the parser or the database cannot take is archived with
a failed parse outcome naming the reason.

Classification:

- transport errors, timeouts, 408, 429, 5xx, and 2xx bodies that do not parse (HTML
  page, truncated or malformed JSON, schema drift) are retried with jittered
  exponential backoff (tenacity); a ``Retry-After`` (seconds or HTTP date) on 429/503
  pauses the whole host and sets the wait (at most 24 h stored: :data:`RETRY_AFTER_MAX`);
- ``--timeout`` bounds the whole exchange, body included (a transport error when it
  runs out); a body longer than ``--max-body`` (decompressed) is read that far, archived
  truncated (``exchanges.body_truncated``) and failed, not retried;
- other 3xx/4xx, and errors the engine reports inside a 2xx body, are permanent for
  that query: recorded, not retried;
- a circuit breaker counts consecutive failed attempts of the engine (429s excluded:
  they are the server pacing us); at K it raises :class:`EngineBroken`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
import sqlalchemy as sa
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, stop_after_delay

from archive.outcome import FAILED, OUTAGE, REFUSED, Outcome, Parsed, failure, write_outcomes
from archive.outcome import outcome as parse_outcome
from crawler.mcp_session import session_for
from crawler.pacing import Pacer
from crawler.retry import RETRY_AFTER_MAX, EngineBroken, Retryable, RetryPolicy, Wait, parse_retry_after  # noqa: F401
from crawler.retry import one_prefix
from crawler.writer import DirectWriter, Writer
from engines.base import redact_headers, redact_url
from engines.offline import is_dns_failure
from store.db import machine_error
from store.models import Exchange
from store.text import clean_text
from store.types import utcnow

# The hot path's statement, built once: building a statement per exchange (``.values(...)``)
# cost as much as executing it. Parameters go in as dicts.
_ARCHIVE = sa.insert(Exchange.__table__).returning(Exchange.__table__.c.id)


def _hhmm(t: float) -> str:
    from store.text import utc_clock

    return utc_clock(t, time.time(), seconds=True) + " UTC"


# The default --max-body: response bytes read at most (after decompression); the rest
# is not read, the exchange is archived truncated and failed, not retried.
MAX_BODY = 16 * 1024 * 1024


class _Unstorable(Exception):
    """Parsed answers the database refused (the exchange is archived with a failed outcome)."""


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """The decoded body, at most ``cap`` bytes; True when more was sent (the rest is not read)."""
    chunks: list[bytes] = []
    n = 0
    async for chunk in response.aiter_bytes():
        if n + len(chunk) > cap:
            chunks.append(chunk[:cap - n])
            return b"".join(chunks), True
        chunks.append(chunk)
        n += len(chunk)
    return b"".join(chunks), False


# Seconds of waiting for a send slot after which the leases are checked again before sending.
LEASE_RECHECK_WAIT = 1.0


class _Outage(Exception):
    """The service is down (maintenance page, restarting backend): pause the host, try again."""


@dataclass
class FetchOutcome:
    """What happened to one batch: shas ``answered`` now, shas ``skipped`` (not sent: answered
    or claimed by another worker meanwhile), or a permanent / exhausted failure of the rest."""

    answered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: str | None = None  # permanent failure message (not retried)
    exhausted: str | None = None  # retryable failure, attempts used up
    attempts: int = 0


class Fetcher:
    """Fetches batches for one engine configuration in one epoch."""

    def __init__(
        self,
        db,  # store.db.Database
        adapter,
        client: httpx.AsyncClient,
        pacer: Pacer,
        *,
        config_id: int,
        epoch: int,
        crawl_id: int | None,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], Any] | None = None,
        on_event: Callable[[str], None] | None = None,
        seed: int | None = None,
        before_send: Callable[[list[str]], list[str]] | None = None,
        writer: Writer | DirectWriter | None = None,
        max_body: int = MAX_BODY,
    ) -> None:
        self.db = db
        # Every write of an attempt goes through the writer: the crawl run's one writer
        # thread (group commit), or a transaction per write when built without one.
        self.writer = writer if writer is not None else DirectWriter(db)
        self.adapter = adapter
        self.client = client
        self.pacer = pacer
        self.config_id = config_id
        self.epoch = epoch
        self.crawl_id = crawl_id
        self.policy = policy or RetryPolicy()
        self.sleep = sleep or pacer.clock.sleep
        self.on_event = one_prefix(adapter.engine, on_event or (lambda _m: None))
        self.rng = random.Random(seed)
        # Called (in a thread) after every pacer grant with the batch's shas; returns the shas still
        # to send. The crawl run passes WorkQueue.keep_due: it renews the leases (retries and waits
        # can outlive the lease TTL) and drops texts answered or claimed elsewhere meanwhile.
        self.before_send = before_send
        self.consecutive_failures = 0
        self.attempts = 0
        self.exchanges = 0
        self.outages = 0  # outage answers seen by this fetcher
        self.max_body = max_body
        self.session = session_for(self)  # MCP engines: the worker's session (crawler.mcp_session); else a no-op

    # ------------------------------------------------------------------ public

    async def fetch(self, items: list[tuple[str, str]]) -> FetchOutcome:
        """Fetch (sha, text) items as one request; retries inside. Raises EngineBroken / DeadlineReached."""
        texts = [t for _, t in items]
        outcome = FetchOutcome()
        floor = self.pacer.rate.period / self.pacer.rate.n
        while True:
            # An outage restarts the retry budget: waiting out a maintenance window must
            # not use up the attempts meant for flaky answers (the pacer does the waiting).
            retrying = AsyncRetrying(
                stop=stop_after_attempt(self.policy.max_attempts) | stop_after_delay(self.policy.max_delay),
                wait=Wait(self.policy, floor, self.rng),
                retry=retry_if_exception_type(Retryable),
                sleep=self.sleep,
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        outcome.attempts += 1
                        if outcome.skipped:  # dropped by an earlier attempt's before_send
                            items = [(sha, t) for sha, t in items if sha not in outcome.skipped]
                            texts = [t for _, t in items]
                        await self._attempt(items, texts, outcome.attempts, outcome)
            except Retryable as exc:
                outcome.exhausted = str(exc)
            except _Outage:
                continue
            return outcome

    # ----------------------------------------------------------------- attempt

    def _failure(self, message: str, *, counts: bool = True) -> None:
        if counts:
            self.consecutive_failures += 1
        if self.consecutive_failures >= self.policy.breaker_threshold:
            raise EngineBroken(
                f"{self.adapter.engine}: stopped after {self.consecutive_failures} consecutive failed "
                f"attempts (last: {message})"
            )

    async def _keep_due(self, items: list[tuple[str, str]], outcome: FetchOutcome) -> list[tuple[str, str]]:
        """``before_send``: renew the leases, drop texts answered or claimed elsewhere meanwhile."""
        if self.before_send is None:
            return items
        shas = [sha for sha, _ in items]
        fast = getattr(getattr(self.before_send, "__self__", None), "keep_due_fast", None)
        known = fast(shas) if fast is not None else None  # no database work needed: no thread
        if known is not None:
            keep = set(known)
        else:
            keep = set(await asyncio.to_thread(self.before_send, shas))
        if len(keep) < len(items):
            dropped = [sha for sha, _ in items if sha not in keep]
            outcome.skipped.extend(dropped)
            self.on_event(f"{self.adapter.engine}: {len(dropped)} text(s) answered or claimed by "
                          "another worker meanwhile; not sent")
            items = [(sha, t) for sha, t in items if sha in keep]
        return items

    async def _attempt(
        self, items: list[tuple[str, str]], texts: list[str], attempt: int, outcome: FetchOutcome
    ) -> None:
        items = await self._keep_due(items, outcome)
        if not items:
            return  # nothing left to send, so no slot is taken
        await self.session.ready(attempt)  # MCP: open the session first, preambles paced (EngineBroken if it cannot)
        # The slot is taken last, after the lease check (database work) and building the
        # request: until the departure corrects the send log, other workers count this send
        # from the grant, so every millisecond between the two eats into the safety margin.
        asked = time.monotonic()
        granted = await self.pacer.acquire()
        if time.monotonic() - asked > LEASE_RECHECK_WAIT:
            # A long wait for the slot (courtesy pacing, a pause) can outlive the lease, and
            # another worker may have answered or claimed a text meanwhile: check again, so
            # nothing is sent twice. An unused slot over-counts the log, never under.
            items = await self._keep_due(items, outcome)
            if not items:
                return
        texts = [t for _, t in items]
        exchange, headers, truncated, elapsed = await self._send(texts, attempt, granted)
        await self.session.check_expired(texts, exchange)  # MCP: an ended session is archived, Retryable, re-opened
        if await self._refused(exchange, headers, truncated, attempt, outcome):
            return
        await self._answer(exchange, headers, items, attempt, outcome, elapsed)

    async def _send(self, texts: list[str], attempt: int, granted: float,
                    request: httpx.Request | None = None) -> tuple[dict[str, Any], dict, bool, float]:
        """Send the request (default: the adapter's for ``texts``) and read the response: (the exchange row, the
        headers as received, body truncated, elapsed ms). A transport error or timeout is archived and raises Retryable."""
        request = self.session.build_request(texts) if request is None else request  # MCP: on the session
        body_out = request.content if request.content else None
        left: list[float] = []
        correcting: list[asyncio.Task] = []

        async def trace(name: str, info: Any) -> None:
            # The moment the request starts to leave (after any connect): the send time.
            # Correct the shared send log now, not after the response: other workers compute
            # their windows from it meanwhile, and a response can take seconds. A task, so the
            # database write does not hold the request back.
            if name.endswith("send_request_headers.started") and not left:
                left.append(time.time())
                if defer:
                    self.pacer.correct(granted, left[0], defer=True)  # memory only: no thread, no task
                else:
                    correcting.append(asyncio.ensure_future(self._correct(granted, left[0])))

        async def corrected() -> None:
            if correcting:
                await correcting[0]
            elif defer:
                if not left:
                    self.pacer.correct(granted, sent_wall, defer=True)
            else:
                # Fallback when the event never fired (a transport without trace hooks):
                # the request left no earlier than the call to send.
                await self._correct(granted, sent_wall)

        defer = self.pacer.defers_corrections
        request.extensions["trace"] = trace
        sent_wall = time.time()
        t0 = time.perf_counter()
        self.attempts += 1
        # --timeout bounds the whole exchange, body included (httpx's own timeout is per
        # read: a server dripping a byte a second would never hit it); the run's deadline
        # too. The body is read up to --max-body (decompressed bytes).
        budget = float(getattr(self.adapter, "timeout", None) or 60.0)
        if self.pacer.deadline is not None:
            budget = max(0.0, min(budget, self.pacer.deadline - time.time()))
        truncated = False
        try:
            async with asyncio.timeout(budget):
                response = await self.client.send(request, stream=True)
                try:
                    body, truncated = await _read_capped(response, self.max_body)
                finally:
                    await response.aclose()
        except (httpx.RequestError, TimeoutError) as exc:
            elapsed = (time.perf_counter() - t0) * 1000
            await corrected()
            if isinstance(exc, TimeoutError):
                err = f"Timeout: the exchange took longer than {budget:g} s (--timeout or --deadline; body included)"
            else:
                err = clean_text(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))
            await self._store(self._exchange(request, body_out, texts, attempt, sent_wall, elapsed,
                                             transport_error=err))
            if is_dns_failure(exc):  # no network, or a wrong URL: retrying changes nothing
                raise EngineBroken(f"{self.adapter.engine}: host {self.adapter.host} does not resolve ({err}); "
                                   "no network? not retried: run the same command again when online")
            self._failure(err)
            self.on_event(f"{self.adapter.engine}: attempt {attempt}: {err}")
            raise Retryable(err) from None
        elapsed = (time.perf_counter() - t0) * 1000
        await corrected()
        headers = dict(response.headers)
        exchange = self._exchange(request, body_out, texts, attempt, sent_wall, elapsed, status=response.status_code,
                                  response_headers=headers, response_body=body)
        return exchange, headers, truncated, elapsed

    async def _refused(self, exchange: dict[str, Any], headers: dict, truncated: bool, attempt: int,
                       outcome: FetchOutcome) -> bool:
        """The response's status: archive and retry (raises), or archive a permanent failure
        (True); False for a 2xx body to parse."""
        status, body = exchange["status_code"], exchange["response_body"]
        if truncated:
            # Archived as far as read (exported with WARC-Truncated: length); a body this
            # size is no answer, and asking again would read it again: failed, not retried.
            exchange["body_truncated"] = True
            msg = (f"HTTP {status}: body larger than --max-body ({self.max_body} bytes, decompressed); "
                   "archived truncated, not parsed")
            await self._store(exchange, parse_error=msg)
            self.consecutive_failures = 0
            outcome.failed = msg
            self.on_event(f"{self.adapter.engine}: {msg} (not retried)")
            return True
        now = time.time()
        ra = parse_retry_after(headers.get("retry-after"), now) if (status in (408, 429) or 500 <= status < 600) else (
            self.adapter.pause_seconds(status, headers, body, now)  # a limit reported in the body (Octo)
            if hasattr(self.adapter, "pause_seconds") else None)
        if ra is not None:
            # The server says when to come back: pause every request to this host, in every
            # worker and the next run too (host_state), however long it is (§6.3 item 7).
            await self._store(exchange)
            pause = max(ra, self.pacer.rate.period / self.pacer.rate.n)
            await asyncio.to_thread(self.pacer.pause, now + pause)
            msg = f"HTTP {status} (Retry-After {ra:g} s)"
            self.on_event(f"{self.adapter.engine}: attempt {attempt}: {msg}; host paused until {_hhmm(now + pause)}")
            raise Retryable(msg, retry_after=ra)
        outage_reason = getattr(self.adapter, "outage_reason", None)
        try:
            reason = outage_reason(status, headers, body) if outage_reason is not None else None
        except Exception:  # noqa: BLE001 - a body the outage check chokes on is for the parser to judge
            reason = None
        if reason is not None:
            await self._store(exchange)
            await self._outage(reason)
        if status in (408, 429) or 500 <= status < 600:
            await self._store(exchange)
            if status == 429:
                # Pause every request to this host, not only this task (§6.3 item 7).
                await asyncio.to_thread(self.pacer.pause, now + self.pacer.rate.period / self.pacer.rate.n)
            msg = f"HTTP {status}"
            self._failure(msg, counts=status != 429)
            self.on_event(f"{self.adapter.engine}: attempt {attempt}: {msg}")
            raise Retryable(msg)
        if not 200 <= status < 300:
            await self._store(exchange)
            self.consecutive_failures = 0  # the engine answered; this query is refused
            refusal = getattr(self.adapter, "refusal", None)
            try:
                said = refusal(status, headers, body) if refusal is not None else None
            except Exception:  # noqa: BLE001 - the default line below
                said = None
            outcome.failed = said or f"HTTP {status}: {body[:120].decode('utf-8', 'replace')}"
            self.on_event(f"{self.adapter.engine}: {outcome.failed} (not retried)")
            return True
        return False

    async def _answer(self, exchange: dict[str, Any], headers: dict, items: list[tuple[str, str]], attempt: int,
                      outcome: FetchOutcome, elapsed: float) -> None:
        """A 2xx body: its outcome (:func:`archive.outcome.outcome`) committed with its exchange
        in one transaction: an answer never exists without its archived body, and a parser
        that crashes (a bug, or a body it cannot take) leaves the exchange archived with a
        failed outcome (retried like a parse error; `engines reparse` once the bug is fixed)."""
        parsed = parse_outcome(self.adapter, [t for _, t in items], exchange["status_code"], headers,
                               exchange["response_body"])
        if parsed.kind == OUTAGE:
            await self._store(exchange, parse_error=parsed.error)
            await self._outage(parsed.reason)
        if parsed.kind == REFUSED:
            await self._store(exchange, parse_error=parsed.error)
            self.consecutive_failures = 0
            outcome.failed = parsed.error
            self.on_event(f"{self.adapter.engine}: {parsed.error} (not retried)")
            return
        if parsed.kind == FAILED:
            await self._store(exchange, parse_error=parsed.error)
            self._failure(parsed.error)
            self.on_event(f"{self.adapter.engine}: attempt {attempt}: {parsed.error}")
            raise Retryable(parsed.error)
        self.consecutive_failures = 0
        # A good answer: the host is up again. Cleared in the answer's transaction; not at
        # all when the ledger knows nothing is recorded.
        after = None
        if self.pacer.outage_may_be_recorded():
            def after(conn: sa.Connection) -> None:
                self.pacer.ledger.clear_outage_in(conn, self.pacer.host)
        try:
            outcome.answered = await self._store(exchange, answers=(items, parsed, elapsed), after=after)
        except _Unstorable as exc:
            outcome.failed = str(exc)
            self.on_event(f"{self.adapter.engine}: {exc} (not retried)")

    async def _outage(self, reason: str) -> None:
        """Pause the host with growing backoff and go round again (raises :class:`_Outage`)."""
        self.outages += 1
        p = self.policy
        until, since, count = await asyncio.to_thread(
            self.pacer.outage, reason, p.outage_initial, p.outage_max, self.rng.random())
        self.on_event(f"{self.adapter.engine}: outage since {_hhmm(since)} ({reason}); "
                      f"next try {_hhmm(until)} (outage answer {count})")
        raise _Outage(reason)

    # ------------------------------------------------------------------ writes

    def _exchange(self, request: httpx.Request, body_out: bytes | None, texts: list[str], attempt: int,
                  sent_wall: float, elapsed_ms: float, *, status: int | None = None,
                  response_headers: dict[str, str] | None = None, response_body: bytes | None = None,
                  transport_error: str | None = None) -> dict[str, Any]:
        """The exchange row as archived (secrets redacted)."""
        url = redact_url(str(request.url))
        fp = self.session.fingerprint(request.method, url, body_out)  # MCP: never the JSON-RPC id, _meta, session
        return dict(
            crawl_id=self.crawl_id,
            config_id=self.config_id,
            attempt=attempt,
            epoch=self.epoch,
            query_texts=list(texts),
            request_fingerprint=fp,
            method=request.method,
            url=url,
            request_headers=redact_headers(dict(request.headers)),
            request_body=body_out,
            status_code=status,
            response_headers=redact_headers(response_headers) if response_headers is not None else None,
            response_body=response_body,
            transport_error=transport_error,
            body_truncated=False,
            sent_at=dt.datetime.fromtimestamp(sent_wall, dt.timezone.utc),
            finished_at=utcnow(),
            elapsed_ms=round(elapsed_ms, 3),
        )

    async def _correct(self, granted: float, actual: float) -> None:
        """The departure of a shared-ledger send: in memory now, in the database at once (or
        with this process's next grant, if that comes first)."""
        if self.pacer.departed(granted, actual):
            # Written now, in autocommit (not with the writer's group, which waits for the
            # response): one statement per departure, each one send's own correction.
            await asyncio.to_thread(self.pacer.write_departures)

    async def _store(self, exchange: dict[str, Any], *, parse_error: str | None = None,
                     answers: tuple[list[tuple[str, str]], Outcome, float | None] | None = None,
                     after: Callable[[sa.Connection], None] | None = None) -> list[str]:
        """Archive the exchange (with its parse outcome and answers, if any) in one
        transaction of the writer; return the shas answered now."""
        flush = self.pacer.ledger.flush_corrections if self.pacer.defers_corrections else None
        parser_version = self.adapter.parser_version

        def op(conn: sa.Connection) -> list[str]:
            if flush is not None:
                flush(conn)  # this exchange's departure (and any other deferred one), same commit
            ex_id = conn.execute(_ARCHIVE, exchange).scalar_one()
            if parse_error is not None:
                write_outcomes(conn, self.config_id, parser_version, [
                    Parsed(ex_id, self.epoch, [], failure(FAILED, parse_error), None)])
            if answers is None:
                return []
            items, parsed, latency = answers
            done = write_outcomes(conn, self.config_id, parser_version,
                                  [Parsed(ex_id, self.epoch, items, parsed, latency)])
            if after is not None:
                after(conn)
            return done

        try:
            done = await self.writer.run(op)
        except Exception as exc:  # noqa: BLE001 - see below
            if answers is None or machine_error(exc) is not None or isinstance(exc, (OSError, MemoryError)):
                # Nothing to refuse, or the machine failed (a full disk, a read-only or
                # corrupt file): not this body's fault; the text stays due for the next run.
                raise
            # The database refused what the parser made of the body (the parse path
            # cleans what it knows of, store.text): the exchange is archived all the same,
            # with the refusal as its failed parse outcome.
            msg = clean_text(f"{self.adapter.engine}: answers not storable: {type(exc).__name__}: {exc}"[:500])
            await self._store(exchange, parse_error=msg)
            raise _Unstorable(msg) from None
        self.exchanges += 1
        return done

