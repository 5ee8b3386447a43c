"""The request loops of one engine, and the watcher that keeps progress lines fresh.

An :class:`EngineLoop` runs one engine's requests as asyncio tasks: each claims texts
from the lease queue (one claim serves several requests), fetches them (pace → send →
archive → parse, with retries), and records the outcome. With ``--concurrency`` unset
the loops grow from one while an exchange takes longer than the pacing interval. A
stop (circuit breaker, deadline, a pause longer than the run waits) ends the engine's
other loops; the stop line names the pause when one is why.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import sqlalchemy as sa

from crawler.fetch import EngineBroken, Fetcher
from crawler.pacing import DeadlineReached
from crawler.plan import Counts
from crawler.progress import Reporter
from crawler.setup import CrawlEngine


def texts_to_send(eng: CrawlEngine, limit: int | None) -> int:
    """Texts this run will still send: the due ones, capped by what ``--limit`` leaves."""
    pending = eng.result.counts.pending
    return pending if limit is None else max(0, min(pending, limit - eng.result.sent_texts))


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


class EngineLoop:
    """One engine's request loops (asyncio tasks) in a crawl run: ``await EngineLoop(...).run()``.

    ``limit``: texts this run sends at most (``--limit``); ``concurrency``: requests in
    flight (None: grown from 1 up to AUTO_CONCURRENCY_MAX)."""

    def __init__(self, db, eng: CrawlEngine, fetcher: Fetcher, reporter: Reporter,
                 stop_at: float | None, pauses: dict[str, float | None] | None = None, *,
                 limit: int | None = None, concurrency: int | None = None) -> None:
        self.db = db
        self.eng = eng
        self.fetcher = fetcher
        self.limit = limit
        self.reporter = reporter
        self.stop_at = stop_at
        self.pauses = pauses
        self.res = eng.result
        self.batch = eng.adapter.batch_size
        self.interval = fetcher.pacer.interval
        self.st = _Loop(counted_at=time.monotonic())
        self.fixed = concurrency
        self.claim_lock = asyncio.Lock()
        self.tasks: set[asyncio.Task] = set()

    async def take(self, k: int) -> list[tuple[str, str]]:
        """Up to k claimed texts; one lease transaction claims for several requests."""
        st, eng, limit = self.st, self.eng, self.limit
        async with self.claim_lock:
            if not st.buffer:
                loops = max(1, len(self.tasks))
                # Several workers share the queue on PostgreSQL: claim a little ahead only
                # (two requests per loop, or CLAIM_AHEAD seconds of sends at the pace seen),
                # so the last texts are spread over the workers instead of queued behind one.
                if eng.queue.exclusive:
                    ahead = CLAIM_CHUNK
                else:
                    per_request = max(self.interval, (st.cycle or math.inf) / loops)
                    ahead = max(2 * loops, math.ceil(CLAIM_AHEAD / per_request))
                want = min(CLAIM_CHUNK, max(k, k * ahead))
                if limit is not None:
                    want = min(want, limit - st.taken)
                if want > 0:
                    st.buffer = await asyncio.to_thread(eng.queue.claim, want)
            items, st.buffer = st.buffer[:k], st.buffer[k:]
            st.taken += len(items)
            return items

    @property
    def under_way(self) -> bool:
        """Whether this engine's progress line is still live: it is not finished, texts are
        due, and either no loop has stopped or a request is still out. A loop that reaches
        ``--limit`` (or the deadline) stops claiming and marks the engine stopped while the
        other loops' requests may still be waiting out a host's pause."""
        res = self.eng.result
        return (not self.eng.finished and res.counts.pending > 0
                and (res.stopped is None or self.st.in_flight > 0))

    def spawn(self) -> None:
        task = asyncio.create_task(self.loop())
        self.tasks.add(task)

    async def loop(self) -> None:
        """One request loop: claim, fetch, record, until the engine has nothing left for it."""
        st, limit, res = self.st, self.limit, self.res
        while True:
            if limit is not None and st.taken >= limit:
                res.stopped = "limit"
                return
            if self.stop_at is not None and time.time() >= self.stop_at:
                res.stopped = "deadline"
                return
            k = self.batch if limit is None else min(self.batch, limit - st.taken)
            t0 = time.monotonic()
            items = await self.take(k)
            if not items:
                if await self._nothing_claimed():
                    continue
                return
            # Leases are renewed by the fetcher after every pacer grant (WorkQueue.keep_due).
            st.in_flight += 1
            try:
                outcome = await self.fetcher.fetch(items)
            finally:
                st.in_flight -= 1
            await self._record(items, outcome)
            self._paced(t0, outcome)

    async def _nothing_claimed(self) -> bool:
        """Nothing to claim: True to go round again (after a wait or a re-seed), False to stop."""
        st, eng = self.st, self.eng
        if await asyncio.to_thread(eng.queue.others_holding):
            # Other workers hold the rest: wait for them, and take over any lease
            # that expires (a dead worker) instead of exiting with work remaining.
            await asyncio.sleep(min(5.0, max(0.2, self.interval)))
            return True
        if st.in_flight:
            # Another request of this engine is still out: it goes round again when
            # done. A re-seed now could race its answer (re-creating the lease row of
            # a text answered between seed's two reads), so the last loop does it.
            return False
        if not st.reseeded:
            # Workers that stopped early deleted their claims; bring back what is due.
            st.reseeded = True
            await asyncio.to_thread(eng.queue.seed)
            return True
        return False

    async def _record(self, items: list[tuple[str, str]], outcome) -> None:
        """A fetch's outcome into the queue, the result and the counts."""
        st, eng, res = self.st, self.eng, self.res
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
            self.reporter.log(f"{eng.name}: gave up on {len(sent)} text(s) for this run after "
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

    def _paced(self, t0: float, outcome) -> None:
        """After a fetch: the measured pace, the progress line, and (auto) one more loop."""
        st, eng, interval, tasks, fixed = self.st, self.eng, self.interval, self.tasks, self.fixed
        if outcome.answered:
            cycle = time.monotonic() - t0
            st.cycle = cycle if st.cycle is None else 0.8 * st.cycle + 0.2 * cycle
            # In auto mode the loops are heading for ``want`` (one is added per answer):
            # the pace it will run at within a few requests.
            loops = len(tasks) if fixed is not None else max(len(tasks), _want(st.cycle, interval))
            self.reporter.set_pace(eng.name, st.cycle / max(1, loops))
        self.reporter.update(eng.name, self.res.counts, interval, self.batch, todo=texts_to_send(eng, self.limit),
                             paused_until=(self.pauses or {}).get(eng.adapter.host))
        if fixed is None and outcome.answered:
            # Auto concurrency: as many requests in flight as the pacing interval fits into
            # one exchange's time, so a limit above 1/latency is reached; a courtesy limit
            # (interval much longer than an exchange) keeps one.
            want = _want(st.cycle, interval)
            if len(tasks) < want:
                self.spawn()

    async def _supervise(self) -> None:
        """Start the loops and wait for them; one loop's error stops the others and is raised."""
        tasks = self.tasks
        for _ in range(self.fixed or 1):
            self.spawn()
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

    async def run(self) -> None:
        """Crawl this engine until nothing is due for it, a limit, the deadline or a stop."""
        eng, res, fetcher = self.eng, self.res, self.fetcher
        try:
            await self._supervise()
        except EngineBroken as exc:
            res.stopped = f"broken: {exc}"
            self.reporter.log(f"error: {exc}; other engines continue")
        except DeadlineReached as exc:
            res.stopped = "deadline"
            line = await asyncio.to_thread(_pause_line, self.db, eng, exc.until)
            if line is not None:
                res.stopped, res.stop_line = line  # printed once, in the summary
                self.reporter.log(f"{eng.name}: stopped for this run ({res.stopped}); other engines continue")
        finally:
            for task in self.tasks:
                task.cancel()
            eng.finished = True
            res.attempts = fetcher.attempts
            res.exchanges = fetcher.exchanges
            res.outages = fetcher.outages
            eng.queue.release()
            res.counts = eng.queue.counts()


async def watch_pauses(loops: list[EngineLoop], reporter: Reporter,
                       pauses: dict[str, float | None], every: float = 0.5) -> None:
    """Read each host's pause from the pacer's ledger now and then, and refresh the
    progress lines meanwhile: a paused engine completes nothing, so without this its
    line would neither say "paused until" nor let its ETA grow. That holds for an engine
    whose claims reached ``--limit`` too, while its last requests wait out the pause
    (:attr:`EngineLoop.under_way`; they were skipped once a loop had said "limit")."""
    while True:
        hosts = {lp.eng.adapter.host: lp.fetcher.pacer for lp in loops}
        for host, pacer in hosts.items():
            try:
                pauses[host] = await asyncio.to_thread(pacer.ledger.paused_until, host)
            except Exception:  # noqa: BLE001 - a progress line must never stop a crawl
                pauses[host] = None
        for lp in loops:
            eng = lp.eng
            if lp.under_way:
                reporter.update(eng.name, eng.result.counts, lp.fetcher.pacer.interval, eng.adapter.batch_size,
                                todo=texts_to_send(eng, lp.limit), paused_until=pauses.get(eng.adapter.host))
        await asyncio.sleep(every)


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


def _pause_line(db, eng: CrawlEngine, until: float | None) -> tuple[str, str] | None:
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

