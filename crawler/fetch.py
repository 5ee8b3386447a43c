"""Fetch one batch of query texts from one engine: pace, send, archive, parse, retry.

Order per attempt (PERFORMANCE-NOTES.md §6.3–6.4): the pacer is *inside* the retried
function, so every retry is re-paced; before each attempt ``before_send`` renews the
leases and drops texts answered or claimed elsewhere meanwhile (nothing left: no
send); the slot is granted right before sending; when the request headers start to leave, the send log is corrected to that
moment (before the response, so other workers' windows see it); the exchange
(request as sent with secrets redacted by :func:`engines.base.redact_headers` /
:func:`engines.base.redact_url`, status, headers, raw body or the transport error) is
committed before anything else looks at it; only then is the body parsed, and every
parse writes a ``parse_outcomes`` row. Parse errors never create an answer.

Classification:

- transport errors, timeouts, 408, 429, 5xx, and 2xx bodies that do not parse (HTML
  page, truncated or malformed JSON, schema drift) are retried with jittered
  exponential backoff (tenacity); a ``Retry-After`` (seconds or HTTP date) on 429/503
  pauses the whole host and sets the wait, clamped to [T/n, ``retry_after_cap``];
- other 3xx/4xx, and errors the engine reports inside a 2xx body, are permanent for
  that query: recorded, not retried;
- a circuit breaker counts consecutive failed attempts of the engine (429s excluded:
  they are the server pacing us); at K it raises :class:`EngineBroken`.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, stop_after_delay

from crawler.pacing import Pacer
from engines.base import EngineHTTPError, EngineParseError, redact_headers, redact_url
from store.models import Exchange, ParseOutcome, WorkLease
from store.types import utcnow
from store.writes import HitRow, add_answer

def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)


@dataclass
class RetryPolicy:
    max_attempts: int = 5
    max_delay: float = 600.0  # seconds since the first attempt of a batch
    backoff_initial: float = 2.0
    backoff_max: float = 60.0
    retry_after_cap: float = 300.0  # a longer Retry-After stops the engine instead
    breaker_threshold: int = 10  # consecutive failed attempts that stop an engine


class Retryable(Exception):
    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EngineBroken(Exception):
    """The circuit breaker opened (K consecutive failures) or the server asked for a too-long pause."""


@dataclass
class FetchOutcome:
    """What happened to one batch: shas ``answered`` now, shas ``skipped`` (not sent: answered
    or claimed by another worker meanwhile), or a permanent / exhausted failure of the rest."""

    answered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: str | None = None  # permanent failure message (not retried)
    exhausted: str | None = None  # retryable failure, attempts used up
    attempts: int = 0


class _Wait:
    """Retry-After when the server sent one, else jittered exponential backoff."""

    def __init__(self, policy: RetryPolicy, floor: float, rng: random.Random) -> None:
        self.policy = policy
        self.floor = floor
        self.rng = rng

    def __call__(self, retry_state: Any) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, Retryable) and exc.retry_after is not None:
            return max(self.floor, exc.retry_after)
        p = self.policy
        base = min(p.backoff_max, p.backoff_initial * 2 ** (retry_state.attempt_number - 1))
        return base + self.rng.uniform(0, min(base, p.backoff_initial))


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
    ) -> None:
        self.db = db
        self.adapter = adapter
        self.client = client
        self.pacer = pacer
        self.config_id = config_id
        self.epoch = epoch
        self.crawl_id = crawl_id
        self.policy = policy or RetryPolicy()
        self.sleep = sleep or pacer.clock.sleep
        self.on_event = on_event or (lambda _m: None)
        self.rng = random.Random(seed)
        # Called (in a thread) after every pacer grant with the batch's shas; returns the
        # shas still to send. The crawl run passes WorkQueue.keep_due: it renews the leases
        # (a fetch with retries and Retry-After waits can outlive the lease TTL) and drops
        # texts another worker answered or claimed meanwhile, so nothing is sent twice.
        self.before_send = before_send
        self.consecutive_failures = 0
        self.attempts = 0
        self.exchanges = 0

    # ------------------------------------------------------------------ public

    async def fetch(self, items: list[tuple[str, str]]) -> FetchOutcome:
        """Fetch (sha, text) items as one request; retries inside. Raises EngineBroken / DeadlineReached."""
        texts = [t for _, t in items]
        outcome = FetchOutcome()
        floor = self.pacer.rate.period / self.pacer.rate.n
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.policy.max_attempts) | stop_after_delay(self.policy.max_delay),
            wait=_Wait(self.policy, floor, self.rng),
            retry=retry_if_exception_type(Retryable),
            sleep=self.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    outcome.attempts = attempt.retry_state.attempt_number
                    if outcome.skipped:  # dropped by an earlier attempt's before_send
                        items = [(sha, t) for sha, t in items if sha not in outcome.skipped]
                        texts = [t for _, t in items]
                    await self._attempt(items, texts, outcome.attempts, outcome)
        except Retryable as exc:
            outcome.exhausted = str(exc)
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

    async def _attempt(
        self, items: list[tuple[str, str]], texts: list[str], attempt: int, outcome: FetchOutcome
    ) -> None:
        if self.before_send is not None:
            keep = set(await asyncio.to_thread(self.before_send, [sha for sha, _ in items]))
            if len(keep) < len(items):
                dropped = [sha for sha, _ in items if sha not in keep]
                outcome.skipped.extend(dropped)
                self.on_event(f"{self.adapter.engine}: {len(dropped)} text(s) answered or claimed by "
                              "another worker meanwhile; not sent")
                items = [(sha, t) for sha, t in items if sha in keep]
                texts = [t for _, t in items]
        if not items:
            return  # nothing left to send, so no slot is taken
        request = self.adapter.build_request(texts)
        body_out = request.content if request.content else None
        # The slot is taken last, after the lease check (database work) and building the
        # request: until the departure corrects the send log, other workers count this send
        # from the grant, so every millisecond between the two eats into the safety margin.
        granted = await self.pacer.acquire()
        left: list[float] = []
        correcting: list[asyncio.Task] = []

        async def trace(name: str, info: Any) -> None:
            # The moment the request starts to leave (after any connect): the send time.
            # Correct the shared send log now, not after the response: other workers compute
            # their windows from it meanwhile, and a response can take seconds. A task, so the
            # database write does not hold the request back (which would make it later still).
            if name.endswith("send_request_headers.started") and not left:
                left.append(time.time())
                correcting.append(asyncio.create_task(asyncio.to_thread(self.pacer.correct, granted, left[0])))

        async def corrected() -> None:
            if correcting:
                await correcting[0]
            else:
                # Fallback when the event never fired (a transport without trace hooks):
                # the request left no earlier than the call to send.
                await asyncio.to_thread(self.pacer.correct, granted, sent_wall)

        request.extensions["trace"] = trace
        sent_wall = time.time()
        t0 = time.perf_counter()
        self.attempts += 1
        try:
            response = await self.client.send(request)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            elapsed = (time.perf_counter() - t0) * 1000
            await corrected()
            err = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
            await asyncio.to_thread(self._archive, request, body_out, texts, attempt, sent_wall, elapsed,
                                    transport_error=err)
            self._failure(err)
            self.on_event(f"{self.adapter.engine}: attempt {attempt}: {err}")
            raise Retryable(err) from None
        elapsed = (time.perf_counter() - t0) * 1000
        await corrected()
        status = response.status_code
        headers = dict(response.headers)
        body = response.content
        # Database work runs in a thread: the event loop stays free to wake the other
        # engines' pacers on time (a blocked loop makes every send late).
        ex_id = await asyncio.to_thread(self._archive, request, body_out, texts, attempt, sent_wall, elapsed,
                                        status=status, response_headers=headers, response_body=body)

        if status in (408, 429) or 500 <= status < 600:
            now = time.time()
            ra = parse_retry_after(response.headers.get("retry-after"), now)
            if ra is not None and ra > self.policy.retry_after_cap:
                raise EngineBroken(
                    f"{self.adapter.engine}: server asked to wait {ra:.0f} s (HTTP {status} Retry-After), "
                    f"more than the {self.policy.retry_after_cap:.0f} s cap; try again later"
                )
            if status == 429 or ra is not None:
                # Pause every request to this host, not only this task (§6.3 item 7).
                pause = max(ra if ra is not None else 0.0, self.pacer.rate.period / self.pacer.rate.n)
                self.pacer.pause(now + pause)
            msg = f"HTTP {status}" + (f" (Retry-After {ra:g} s)" if ra is not None else "")
            self._failure(msg, counts=status != 429)
            self.on_event(f"{self.adapter.engine}: attempt {attempt}: {msg}")
            raise Retryable(msg, retry_after=ra)
        if not 200 <= status < 300:
            self.consecutive_failures = 0  # the engine answered; this query is refused
            outcome.failed = f"HTTP {status}: {body[:120].decode('utf-8', 'replace')}"
            self.on_event(f"{self.adapter.engine}: {outcome.failed} (not retried)")
            return

        try:
            parsed = self.adapter.parse(texts, status, headers, body)
            if len(parsed) != len(texts):
                raise EngineParseError(f"{len(parsed)} answer lists for {len(texts)} queries")
        except EngineHTTPError as exc:
            await asyncio.to_thread(self._record_parse, ex_id, ok=False, error=str(exc))
            self.consecutive_failures = 0
            outcome.failed = str(exc)
            self.on_event(f"{self.adapter.engine}: {exc} (not retried)")
            return
        except EngineParseError as exc:
            await asyncio.to_thread(self._record_parse, ex_id, ok=False, error=str(exc))
            self._failure(str(exc))
            self.on_event(f"{self.adapter.engine}: attempt {attempt}: {exc}")
            raise Retryable(str(exc)) from None
        self.consecutive_failures = 0
        outcome.answered = await asyncio.to_thread(self._write_answers, ex_id, items, parsed, elapsed)

    # ------------------------------------------------------------------ writes

    def _archive(
        self,
        request: httpx.Request,
        body_out: bytes | None,
        texts: list[str],
        attempt: int,
        sent_wall: float,
        elapsed_ms: float,
        *,
        status: int | None = None,
        response_headers: dict[str, str] | None = None,
        response_body: bytes | None = None,
        transport_error: str | None = None,
    ) -> int:
        import datetime as dt

        url = redact_url(str(request.url))
        fp = hashlib.sha256(
            b"\0".join([request.method.encode(), url.encode(), body_out or b""])
        ).hexdigest()
        row = Exchange(
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
            sent_at=dt.datetime.fromtimestamp(sent_wall, dt.timezone.utc),
            finished_at=utcnow(),
            elapsed_ms=round(elapsed_ms, 3),
        )
        with self.db.session() as s, s.begin():
            s.add(row)
            s.flush()
            ex_id = row.id
        self.exchanges += 1
        return ex_id

    def _record_parse(self, exchange_id: int, *, ok: bool, error: str | None) -> None:
        with self.db.session() as s, s.begin():
            s.add(ParseOutcome(exchange_id=exchange_id, parser_version=self.adapter.parser_version, ok=ok, error=error))

    def _write_answers(
        self, exchange_id: int, items: list[tuple[str, str]], parsed: list[list[Any]], elapsed_ms: float | None
    ) -> list[str]:
        """Parse outcome + one answer per text + lease removal, in one transaction."""
        return write_answers(
            self.db, self.adapter.parser_version, self.config_id, self.epoch, exchange_id, items, parsed, elapsed_ms
        )


def write_answers(
    db,
    parser_version: int,
    config_id: int,
    epoch: int,
    exchange_id: int,
    items: list[tuple[str, str]],
    parsed: list[list[Any]],
    latency_ms: float | None,
) -> list[str]:
    done: list[str] = []
    with db.session() as s, s.begin():
        s.add(ParseOutcome(exchange_id=exchange_id, parser_version=parser_version, ok=True, error=None))
        for (sha, text), hits in zip(items, parsed):
            try:
                with s.begin_nested():
                    add_answer(
                        s,
                        config_id=config_id,
                        query_text=text,
                        query_sha256=sha,
                        hits=[HitRow(rank=h.rank, name=h.name, raw=h.raw) for h in hits],
                        epoch=epoch,
                        exchange_id=exchange_id,
                        parser_version=parser_version,
                        latency_ms=latency_ms,
                    )
            except IntegrityError:
                continue  # answered meanwhile (another path); fetch-once keeps the first
            done.append(sha)
        if items:
            s.execute(
                sa.delete(WorkLease).where(
                    WorkLease.config_id == config_id,
                    WorkLease.epoch == epoch,
                    WorkLease.query_sha256.in_([sha for sha, _ in items]),
                )
            )
    return done

