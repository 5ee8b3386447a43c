"""Courtesy pacing per engine host: a sliding-window log plus a minimum spacing.

A limit "n requests per T seconds" means: no window of length T holds more than n
sends to that host (DESIGN.md, Pacing). ``aiolimiter.AsyncLimiter(n, T)`` alone lets
2n-1 through in one window (PERFORMANCE-NOTES.md §6.1), so this module implements the
recipe of §6.3 itself:

- a send at time t is allowed only when t >= (n-th most recent send) + T + margin
  (the window bound, by construction, on actual send times) and t >= (last send) + T/n
  (minimum spacing: no bursts, even after an idle period; counted from the slot the
  last send was scheduled for, so timer lateness does not pile up send after send),
  and t >= the host's ``paused_until`` (a 429 / Retry-After pauses the whole host);
  the sustained rate is n per T + margin;
- the time is taken when the send slot is granted, just before the HTTP call;
- the send times live in a *ledger*. :class:`MemoryLedger` keeps them in memory
  (unit tests); :class:`DbLedger` keeps them in the ``send_log`` / ``host_state``
  tables, so a restart right after a burst reloads them, and on PostgreSQL the
  "check the window + insert the send" step runs under a row lock on the host's
  ``host_state`` row (``SELECT ... FOR UPDATE``), so processes sharing one database
  share one budget per host and never exceed it together. A send is written *pending*
  at its grant and, for the window, counts as leaving "now" for every other reader until
  the sender corrects it to its departure (``Pacer.correct``), so a sender that the
  machine delays between grant and departure cannot make another worker's window start
  early (the spacing T/n counts from its grant: :func:`window_span`).

Clock and sleep are injectable (:class:`Clock`), so tests drive the pacer with a fake
clock and assert the window bound exactly. Times are unix seconds (floats).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar

import sqlalchemy as sa

from crawler.writer import on_rollback
from engines.base import Rate
from engines.base import parse_rate as _parse_rate
from store.text import clean_text

T = TypeVar("T")

# The longest pause stored for a host (seconds from now): a Retry-After is untrusted input.
PAUSE_MAX = 86400.0

# ------------------------------------------------------------------------- rates

parse_rate = _parse_rate  # "3/30s" -> Rate(3, 30.0); one parser for adapters and CLI


def default_margin(rate: Rate) -> float:
    """Safety margin added to the window: 1 % of T + 5 ms, at least 100 ms, at most 1 s.

    Send times are recorded when the request starts to leave (see ``Pacer.correct``),
    and a granted send that has not left yet counts as leaving *now* for every other
    worker (``send_log.pending``), so the time between a grant and the departure no
    longer eats into the window. What the margin still has to absorb is the jitter
    between the departure and the moment the server counts the request: measured with
    ``perf/pacing_load.py`` (3 workers on PostgreSQL, one CPU burner per core on a
    2-core machine already at load 6–9; 2026-12-01) as median 4–9 ms, p99 35–83 ms,
    max 44–116 ms. The grant-to-departure jitter on the same runs was median 12–22 ms,
    p99 165–343 ms, max 227–483 ms: what a margin alone would have had to cover before
    pending sends. The 100 ms floor covers the arrival jitter's observed tail;
    3/30s → 0.305 s, 24/60s → 0.605 s, 1/s and 20/2s → 0.1 s. The sustained rate is n
    per (T + margin). ``--margin`` sets it explicitly (e.g. 1 s for a jittery network).
    """
    return min(1.0, max(0.1, 0.005 + 0.01 * rate.period))


# ------------------------------------------------------------------------- clocks


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock unix seconds (shared by processes on one machine, stored in send_log)."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


# ------------------------------------------------------------------------ ledgers


def earliest_send(
    history: list[float], paused_until: float | None, rate: Rate, margin: float,
    credit: tuple[float, float] | None = None,
) -> float:
    """The earliest time a new send is allowed, given the host's send history (any order).

    ``credit`` = (time of this pacer's last send, how late it left after its planned
    slot): when that send is still the newest, the spacing counts from its planned slot,
    so timer lateness does not accumulate send after send. The window bound always uses
    the actual send times.
    """
    t = paused_until or 0.0
    if history:
        recent = sorted(history)[-rate.n:]
        base = recent[-1]
        if credit is not None and credit[0] == base:
            base -= credit[1]
        t = max(t, base + rate.period / rate.n)
        if len(recent) >= rate.n:
            t = max(t, recent[0] + rate.period + margin)
    return t


def earliest_send_span(
    count: int, oldest: float | None, newest: float | None, paused_until: float | None, rate: Rate,
    margin: float, credit: tuple[float, float] | None = None,
) -> float:
    """:func:`earliest_send` from the last n sends reduced to (how many, oldest, newest):
    the window counts from ``oldest``, the spacing T/n from ``newest`` (see :func:`window_span`)."""
    t = paused_until or 0.0
    if count and newest is not None:
        base = newest
        if credit is not None and credit[0] == base:
            base -= credit[1]
        t = max(t, base + rate.period / rate.n)
        if count >= rate.n and oldest is not None:
            t = max(t, oldest + rate.period + margin)
    return t


def window_span(last: list, now: float) -> tuple[int, float | None, float | None]:
    """(how many, oldest, newest) of a host's last n sends ``[(sent_at, pending), ...]``
    for :func:`earliest_send_span`, as ``engines_reserve`` (migration 0006) computes them.

    The window (the hard bound: n per T + margin) counts a granted send that has not left
    yet as leaving *now*, so a sender held up between grant and departure cannot make the
    window start early. The spacing T/n (smoothing only) counts from the newest recorded
    time, a pending send's grant included: counting pending sends as "now" there too held
    every other request loop back while any grant was on its way out (a third of the
    grants of two workers were refused, each a round trip and a sleep), for no bound the
    window does not already give.
    """
    if not last:
        return 0, None, None
    lapsed = now - PENDING_MAX
    oldest = min(now if p and lapsed < t < now else t for t, p in last)
    return len(last), oldest, max(t for t, _ in last)


class Ledger(Protocol):
    """Where send times and pauses are kept. ``reserve`` records a send now, if allowed."""

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        """(True, send time recorded) or (False, earliest allowed time).

        ``now`` is read as late as possible (after any lock is held), so the recorded
        time is as close as it can be to the moment the request leaves.
        """

    def pause(self, host: str, until: float) -> None: ...

    def paused_until(self, host: str) -> float | None: ...

    def correct(self, host: str, recorded: float, actual: float) -> None:
        """Replace a recorded send time by the (later) time the request actually left."""

    def outage(self, host: str, reason: str, now: float, initial: float, cap: float, u: float
               ) -> tuple[float, float, int]:
        """Record an outage answer: pause the host with growing backoff; (until, since, count)."""

    def clear_outage(self, host: str) -> None:
        """A good answer: the host is up again (its outage state is cleared)."""


def outage_backoff(count: int, initial: float, cap: float, u: float) -> float:
    """Pause after the ``count``-th consecutive outage answer: ``initial`` doubling, capped.

    ``u`` in [0, 1) adds up to 25 % jitter (so workers that saw the same outage do not
    come back in lockstep); the cap holds after the jitter.
    """
    base = initial * 2.0 ** min(max(0, count - 1), 60)
    return min(cap, base * (1.0 + 0.25 * u))


class MemoryLedger:
    """In-process ledger (tests, or a throwaway run); ``history`` seeds it, e.g. from a restart."""

    def __init__(self, history: dict[str, list[float]] | None = None) -> None:
        self.sends: dict[str, list[float]] = {h: sorted(v) for h, v in (history or {}).items()}
        self.pauses: dict[str, float] = {}
        self.outages: dict[str, tuple[float, str, int]] = {}  # host → (since, reason, count)

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        log = self.sends.setdefault(host, [])
        t = earliest_send(log[-rate.n:], self.pauses.get(host), rate, margin, credit)
        current = now()
        if t > current:
            return False, t
        log.append(current)
        return True, current

    def pause(self, host: str, until: float) -> None:
        self.pauses[host] = max(self.pauses.get(host, 0.0), until)

    def correct(self, host: str, recorded: float, actual: float) -> None:
        log = self.sends.get(host, [])
        if recorded in log:
            log[log.index(recorded)] = actual
            log.sort()

    def paused_until(self, host: str) -> float | None:
        return self.pauses.get(host)

    def outage(self, host: str, reason: str, now: float, initial: float, cap: float, u: float
               ) -> tuple[float, float, int]:
        since, _, count = self.outages.get(host, (now, reason, 0))
        count += 1
        until = now + outage_backoff(count, initial, cap, u)
        self.outages[host] = (since, reason, count)
        self.pause(host, until)
        return max(until, self.pauses[host]), since, count

    def clear_outage(self, host: str) -> None:
        self.outages.pop(host, None)


# PostgreSQL, through the driver (DbLedger._autocommit): a send slot (migrations 0005, 0006),
# and a departure replacing its grant's time.
_RESERVE_SQL = ("SELECT granted, earliest, outage FROM engines_reserve(%s::text, %s::double precision, "
                "%s::integer, %s::double precision, %s::double precision, %s::double precision, "
                "%s::double precision, %s::double precision, %s::text, %s::double precision[])")
_DEPARTED_SQL = "UPDATE send_log SET sent_at = %s, pending = false WHERE host = %s AND sent_at = %s"

# How long a granted send counts as "may leave any moment" when its sender never
# corrects it (killed between grant and departure): then its recorded time counts.
PENDING_MAX = 10.0


class DbLedger:
    """Send times in ``send_log`` and pauses in ``host_state``: shared by every process.

    ``reserve`` is one short transaction: lock the host's ``host_state`` row
    (``FOR UPDATE`` on PostgreSQL; SQLite serialises writers and the crawler holds an
    exclusive lock file there), read the last n sends, insert the new one if the
    window allows it. No sleeping happens inside the transaction.
    """

    def __init__(self, db, *, exclusive: bool = False) -> None:  # noqa: ANN001 - store.db.Database
        from store.models import HostState, SendLog

        self.db = db
        self._hs = HostState.__table__
        self._sl = SendLog.__table__
        self._known: set[str] = set()
        # exclusive: this process is the only writer of send_log / host_state (a SQLite file
        # under the crawl lock). Then the window and the pause are kept in memory after one
        # read per host, and reserve only appends the send: nobody else can change them.
        # A send's row is written with its exchange; a restart after a crawl that died
        # before writing its last sends waits one window (unclean_since, _load).
        self.exclusive = exclusive
        self._cache: dict[str, list[list]] = {}  # host → newest sends [[sent_at, pending], ...]
        self._paused: dict[str, float | None] = {}
        self._outage: dict[str, bool] = {}  # host → an outage is recorded in host_state
        self._loaded: dict[str, int] = {}  # host → how many sends the cache was loaded with
        self._send_insert = sa.insert(self._sl)
        # The shared reserve's statements, built once (building them per send cost as much as
        # running them). A granted send that has not left yet may leave any moment: it counts
        # as leaving now, so the window never starts before its real departure however late
        # its sender runs (a busy machine); a dead sender's mark lapses after PENDING_MAX.
        # Only the oldest and newest of the last n (so adjusted) matter: the database reduces
        # them, instead of sending n rows per request (n = 1000 at 1000/s).
        hs, sl = self._hs, self._sl
        self._lock_host = (sa.select(hs.c.paused_until, hs.c.outage_since, hs.c.outage_count)
                           .where(hs.c.host == sa.bindparam("h")).with_for_update())
        last = (sa.select(sl.c.sent_at, sl.c.pending).where(sl.c.host == sa.bindparam("h"))
                .order_by(sl.c.sent_at.desc()).limit(sa.bindparam("n", type_=sa.Integer, literal_execute=True)).subquery())
        now_ = sa.bindparam("now", type_=sa.Float)
        adjusted = sa.case(
            (sa.and_(last.c.pending, last.c.sent_at > sa.bindparam("lapsed", type_=sa.Float), last.c.sent_at < now_),
             now_),
            else_=last.c.sent_at,
        )
        self._span = sa.select(sa.func.count(), sa.func.min(adjusted), sa.func.max(last.c.sent_at)).select_from(last)
        self._send_correct = sa.update(self._sl).where(self._sl.c.host == sa.bindparam("h"),
                                                       self._sl.c.sent_at == sa.bindparam("r"))
        self._deferred: deque = deque()  # exclusive: departures not yet written (send_log rows)
        self._departures: dict[tuple[str, float], float] = {}  # shared: (host, granted) → departure
        # Exclusive ledgers: when the last crawl of this file did not finish (its sends after
        # its last commit are unknown), set by the crawl run; see _load.
        self.unclean_since: float | None = None
        self._worker = ""

    def _ensure_host(self, conn: sa.Connection, host: str) -> None:
        if host in self._known:
            return
        exists = conn.execute(sa.select(self._hs.c.host).where(self._hs.c.host == host)).first()
        if exists is None:
            if conn.dialect.name == "postgresql":
                from sqlalchemy.dialects.postgresql import insert
            else:
                from sqlalchemy.dialects.sqlite import insert
            from store.types import utcnow

            conn.execute(
                insert(self._hs).values(host=host, paused_until=None, updated_at=utcnow()).on_conflict_do_nothing()
            )
        self._known.add(host)

    def _load(self, host: str, rate: Rate, margin: float) -> list[list]:
        """The exclusive cache of a host: its newest ``rate.n`` sends and its pause, read once.

        After a crawl of this file that never finished (``unclean_since``: killed, crashed,
        power loss) the sends it made after its last commit are unknown, so the first send
        to the host waits one whole window (T + margin) from then: nothing it sent can
        still be in the window.
        """
        n = rate.n
        log = self._cache.get(host)
        if log is None or self._loaded.get(host, 0) < n:
            hs = self._hs
            with self.db.engine.connect() as conn:
                rows = conn.execute(
                    sa.select(self._sl.c.sent_at, self._sl.c.pending).where(self._sl.c.host == host)
                    .order_by(self._sl.c.sent_at.desc()).limit(n)
                ).all()
                state = conn.execute(sa.select(hs.c.paused_until, hs.c.outage_since, hs.c.outage_count)
                                     .where(hs.c.host == host)).first()
            log = sorted(([t, bool(p)] for t, p in rows), key=lambda r: r[0])
            self._cache[host] = log
            self._loaded[host] = n
            paused = state[0] if state else None
            if self.unclean_since is not None:
                paused = max(paused or 0.0, self.unclean_since + rate.period + margin)
            self._paused[host] = paused
            self._outage[host] = bool(state and (state[1] is not None or (state[2] or 0) > 0))
        return log

    def _grant_exclusive(
        self, host: str, log: list[list], now: Callable[[], float], rate: Rate, margin: float,
        credit: tuple[float, float] | None,
    ) -> tuple[bool, float]:
        """The window and the pause from memory; a grant is a pending entry until it leaves.

        Nothing is written here: the departure is inserted into ``send_log`` with the crawl's
        next write (``correct_later`` / ``flush_corrections``), and a crawl that dies before
        that makes the next one wait a window (``_load``).
        """
        current = now()
        count, oldest, newest = window_span(log[-rate.n:], current)
        t = earliest_send_span(count, oldest, newest, self._paused.get(host), rate, margin, credit)
        if t > current:
            return False, t
        log.append([current, True])
        log.sort(key=lambda r: r[0])
        del log[:-max(rate.n, 1)]
        return True, current

    def _reserve_exclusive(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None,
    ) -> tuple[bool, float]:
        self._worker = worker
        return self._grant_exclusive(host, self._load(host, rate, margin), now, rate, margin, credit)

    async def reserve_async(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        """``reserve`` for the event loop: exclusive ledgers decide in memory (a thread only for
        the first read of a host); shared ones run their transaction in a worker thread."""
        if not self.exclusive:
            return await asyncio.to_thread(self.reserve, host, now, rate, margin, worker, credit)
        self._worker = worker
        log = self._cache.get(host)
        if log is None or self._loaded.get(host, 0) < rate.n:
            log = await asyncio.to_thread(self._load, host, rate, margin)
        return self._grant_exclusive(host, log, now, rate, margin, credit)

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        if self.exclusive:
            return self._reserve_exclusive(host, now, rate, margin, worker, credit)
        if self.db.dialect == "postgresql":
            return self._reserve_pg(host, now, rate, margin, worker, credit)
        with self.db.engine.connect() as conn:
            self._ensure_host(conn, host)
            conn.commit()
            with conn.begin():
                # The host row's lock first, then the send log: read after the lock is held, so
                # a send another worker committed while we waited for it is counted.
                paused, since, outages = conn.execute(self._lock_host, {"h": host}).one()
                # This process's departures not yet written: now, under the lock, so its own
                # sends that already left do not count as pending ("now") against the grant.
                self.apply_departures(conn, host)
                # Known as of this grant: a good answer clears a recorded outage (clear_outage_in).
                self._outage[host] = since is not None or (outages or 0) > 0
                current = now()
                count, lo, hi = conn.execute(self._span, {"h": host, "n": rate.n, "now": current,
                                                          "lapsed": current - PENDING_MAX}).one()
                t = earliest_send_span(count, lo, hi, paused, rate, margin, credit)
                if t > current:
                    return False, t
                conn.execute(self._send_insert, {"host": host, "sent_at": current, "worker": worker, "pending": True})
        return True, current

    def _autocommit(self, call: Callable[[Any], T]) -> T:
        """``call(driver connection)`` on a pooled PostgreSQL connection in autocommit: one
        statement, committed by the server when it ends, so a lock it takes is released
        without waiting for this client's COMMIT (a round trip, and this thread's turn at the
        GIL; held for milliseconds, it serialized the workers sharing a host). Through the
        driver: SQLAlchemy's statement machinery cost as much client CPU as the call."""
        pooled = self.db.engine.raw_connection()
        try:
            driver = pooled.driver_connection
            driver.autocommit = True
            try:
                return call(driver)  # a dead connection fails here and the pool drops it (test_pacing)
            finally:
                if not driver.closed:
                    driver.autocommit = False
        finally:
            pooled.close()

    def write_departures(self, host: str) -> int:
        """The noted departures of ``host``, written now, each its own statement (no
        transaction of the caller's); how many. (Shared ledgers.)"""
        if self.db.dialect != "postgresql":
            with self.db.engine.connect() as conn:
                return self.apply_departures(conn.execution_options(isolation_level="AUTOCOMMIT"), host)
        taken = self._take_departures(host)
        if taken:
            rows = [(a, host, r) for r, a in taken]
            self._autocommit(lambda driver: driver.cursor().executemany(_DEPARTED_SQL, rows))
            for r, a in taken:
                self._correct_cache(host, r, a)
        return len(taken)

    def _reserve_pg(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None,
    ) -> tuple[bool, float]:
        """The same steps as the generic reserve above, in one call of the server function
        ``engines_reserve`` (migrations 0005, 0006): the host row stays locked for the
        server's microseconds, not for five round trips of a busy client."""
        taken = self._take_departures(host)
        if host not in self._known:
            with self.db.engine.connect() as conn:
                self._ensure_host(conn, host)
                conn.commit()
        deps = [t for pair in taken for t in pair] or None

        def call(driver) -> tuple:  # noqa: ANN001 - a psycopg connection
            return driver.execute(_RESERVE_SQL, (
                host, now(), rate.n, rate.period, margin, PENDING_MAX, credit[0] if credit else None,
                credit[1] if credit else None, worker, deps), prepare=True).fetchone()

        granted, t, outage = self._autocommit(call)
        for r, a in taken:
            self._correct_cache(host, r, a)
        self._outage[host] = bool(outage)
        return bool(granted), float(t)

    def pause(self, host: str, until: float) -> None:
        from store.types import utcnow

        with self.db.engine.connect() as conn:
            self._ensure_host(conn, host)
            conn.commit()
            with conn.begin():
                cur = conn.execute(
                    sa.select(self._hs.c.paused_until).where(self._hs.c.host == host).with_for_update()
                ).scalar()
                if cur is None or until > cur:
                    conn.execute(
                        sa.update(self._hs).where(self._hs.c.host == host).values(paused_until=until, updated_at=utcnow())
                    )
                    cur = until
        if host in self._paused:
            self._paused[host] = cur

    def correct(self, host: str, recorded: float, actual: float) -> None:
        with self.db.engine.begin() as conn:
            conn.execute(self._send_correct, {"h": host, "r": recorded, "sent_at": actual, "pending": False})
        self._correct_cache(host, recorded, actual)

    def note_departure(self, host: str, recorded: float, actual: float) -> None:
        """Shared ledgers: the send granted at ``recorded`` left at ``actual``; written by
        :meth:`write_departures` (right after the send) or by this process's next grant to the
        host (inside it), whichever comes first."""
        self._departures[(host, recorded)] = actual

    def _take_departures(self, host: str) -> list[tuple[float, float]]:
        """The noted (granted, departed) pairs of ``host``, each taken by one writer only."""
        taken = []
        for key in [k for k in list(self._departures) if k[0] == host]:
            actual = self._departures.pop(key, None)
            if actual is not None:  # not taken meanwhile by the other writer of departures
                taken.append((key[1], actual))
        return taken

    def apply_departures(self, conn: sa.Connection, host: str) -> int:
        """Write the noted departures of ``host`` inside ``conn``'s transaction; how many."""
        taken = self._take_departures(host)
        if taken:
            conn.execute(self._send_correct,
                         [{"h": host, "r": r, "sent_at": a, "pending": False} for r, a in taken])
            for r, a in taken:
                self._correct_cache(host, r, a)
        return len(taken)

    def _correct_cache(self, host: str, recorded: float, actual: float) -> None:
        for row in self._cache.get(host, ()):
            if row[0] == recorded:
                row[0], row[1] = actual, False
                self._cache[host].sort(key=lambda r: r[0])
                break

    def correct_later(self, host: str, recorded: float, actual: float) -> None:
        """Exclusive ledgers: the window in memory now, the send's ``send_log`` row with the
        crawl's next write (the exchange's archive)."""
        self._correct_cache(host, recorded, actual)
        self._deferred.append({"host": host, "sent_at": actual, "worker": self._worker, "pending": False})

    def flush_corrections(self, conn: sa.Connection) -> None:
        """Insert the deferred departures inside the caller's transaction (a transaction of
        ``crawler.writer``'s, which puts them back in memory if it is rolled back: a send
        must not go unrecorded because a write it shared a group with failed)."""
        rows = []
        while True:
            try:
                rows.append(self._deferred.popleft())
            except IndexError:
                break
        if not rows:
            return
        hosts = {r["host"] for r in rows}
        unknown = hosts - self._known

        def undo() -> None:
            self._deferred.extendleft(reversed(rows))
            self._known.difference_update(unknown)  # their host_state rows were rolled back too

        on_rollback(conn, undo)
        for host in hosts:
            self._ensure_host(conn, host)
        conn.execute(self._send_insert, rows)

    def paused_until(self, host: str) -> float | None:
        if self.exclusive and host in self._paused:
            return self._paused[host]
        with self.db.engine.connect() as conn:
            return conn.execute(sa.select(self._hs.c.paused_until).where(self._hs.c.host == host)).scalar()

    def outage(self, host: str, reason: str, now: float, initial: float, cap: float, u: float
               ) -> tuple[float, float, int]:
        from store.types import utcnow

        hs = self._hs
        with self.db.engine.connect() as conn:
            self._ensure_host(conn, host)
            conn.commit()
            with conn.begin():
                paused, since, count = conn.execute(
                    sa.select(hs.c.paused_until, hs.c.outage_since, hs.c.outage_count)
                    .where(hs.c.host == host).with_for_update()
                ).one()
                count = (count or 0) + 1
                since = since if since is not None else now
                until = max(paused or 0.0, now + outage_backoff(count, initial, cap, u))
                conn.execute(sa.update(hs).where(hs.c.host == host).values(
                    paused_until=until, outage_since=since, outage_reason=clean_text(reason[:1000]), outage_count=count,
                    updated_at=utcnow()))
        if host in self._paused:
            self._paused[host], self._outage[host] = until, True
        return until, since, count

    def outage_recorded(self, host: str) -> bool:
        """Whether host_state may hold an outage of ``host``: unless known not to (exclusive
        ledgers; shared ones as of this process's last grant or outage write)."""
        return self._outage.get(host) is not False

    def clear_outage(self, host: str) -> None:
        if self.exclusive and self._outage.get(host) is False:
            return  # nothing recorded, and only this process writes host_state
        with self.db.engine.begin() as conn:
            self.clear_outage_in(conn, host)

    def clear_outage_in(self, conn: sa.Connection, host: str) -> None:
        """``clear_outage`` inside the caller's transaction (the answer's: one commit fewer)."""
        from store.types import utcnow

        hs = self._hs
        conn.execute(
            sa.update(hs)
            .where(hs.c.host == host, sa.or_(hs.c.outage_since.is_not(None), hs.c.outage_count > 0))
            .values(outage_since=None, outage_reason=None, outage_count=0, updated_at=utcnow())
        )
        if host in self._outage:
            self._outage[host] = False

    def history(self, host: str, since: float) -> list[float]:
        with self.db.engine.connect() as conn:
            return list(
                conn.execute(
                    sa.select(self._sl.c.sent_at)
                    .where(self._sl.c.host == host, self._sl.c.sent_at >= since)
                    .order_by(self._sl.c.sent_at)
                ).scalars()
            )


# -------------------------------------------------------------------------- pacer


class DeadlineReached(Exception):
    """The next allowed send is past the run's deadline (or further off than ``max_wait``).

    ``until`` is that next allowed send time (unix seconds), when known."""

    def __init__(self, message: str, until: float | None = None) -> None:
        super().__init__(message)
        self.until = until


@dataclass
class PacerStats:
    sends: int = 0
    waited: float = 0.0  # seconds spent waiting for a slot
    # grant -> departure of the last sends (seconds): the send jitter perf/pacing_load.py reports
    send_delays: deque = field(default_factory=lambda: deque(maxlen=10_000))


class Pacer:
    """One host's pacer: ``await pacer.acquire()`` right before each HTTP attempt.

    An ``asyncio.Lock`` makes waiting first-come-first-served inside the process; the
    ledger makes the budget shared between processes. Create pacers inside the running
    event loop (one per host per crawl run).
    """

    def __init__(
        self,
        host: str,
        rate: Rate,
        ledger: Ledger | None = None,
        *,
        margin: float | None = None,
        clock: Clock | None = None,
        worker: str = "",
        deadline: float | None = None,
        max_wait: float | None = None,
    ) -> None:
        if rate.n < 1 or not rate.period > 0 or math.isinf(rate.period):
            raise ValueError(f"invalid rate {rate}")
        self.host = host
        self.rate = rate
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self.margin = default_margin(rate) if margin is None else margin
        self.clock = clock or SystemClock()
        self.worker = worker
        self.deadline = deadline
        # The longest single wait for a slot (a long Retry-After or outage pause); a longer
        # one raises DeadlineReached instead of holding the run. The window wait is never
        # longer than T + margin, so that much is always allowed.
        self.max_wait = max_wait
        self.stats = PacerStats()
        self._lock = asyncio.Lock()
        self._last: tuple[float, float] | None = None  # (last send as recorded, its planned slot)

    @property
    def interval(self) -> float:
        """Seconds per send at the sustained rate (what ETAs are computed from)."""
        return (self.rate.period + self.margin) / self.rate.n

    async def acquire(self) -> float:
        """Wait for a send slot; return the send time recorded in the ledger."""
        async with self._lock:
            planned: float | None = None
            while True:
                args = (self.host, self.clock.now, self.rate, self.margin, self.worker, self._credit())
                # A ledger with database work decides off the event loop (reserve_async): a
                # transaction on the loop's thread holds up every other request in flight.
                reserve_async = getattr(self.ledger, "reserve_async", None)
                if reserve_async is not None:
                    ok, t = await reserve_async(*args)
                else:
                    ok, t = self.ledger.reserve(*args)
                if ok:
                    self.stats.sends += 1
                    self._last = (t, t if planned is None else planned)
                    return t
                now = self.clock.now()
                if self.deadline is not None and t > self.deadline:
                    raise DeadlineReached(f"next send to {self.host} allowed at {t:.1f}, after the deadline", t)
                if self.max_wait is not None and t - now > max(self.max_wait, self.rate.period + self.margin):
                    raise DeadlineReached(f"next send to {self.host} allowed in {t - now:.0f} s, "
                                          f"more than the {self.max_wait:.0f} s this run waits", t)
                planned = t
                wait = t - now
                self.stats.waited += wait
                await self.clock.sleep(wait)

    def _credit(self) -> tuple[float, float] | None:
        if self._last is None:
            return None
        sent, planned = self._last
        return sent, min(max(0.0, sent - planned), self.interval / 2)

    @property
    def defers_corrections(self) -> bool:
        """True when nobody else reads this ledger (SQLite under the crawl lock): a departure
        is corrected in memory at once and in the database with the exchange's archive
        transaction (the pending row, if that never happens, counts conservatively)."""
        return bool(getattr(self.ledger, "exclusive", False)) and hasattr(self.ledger, "correct_later")

    def _departure(self, recorded: float, actual: float, threshold: float) -> float:
        """The departure to record for the send granted at ``recorded`` (and this pacer's
        credit moved to it)."""
        self.stats.send_delays.append(actual - recorded)
        if actual - recorded <= threshold:
            actual = recorded  # not worth moving; recording it still clears the pending mark
        if self._last is not None and self._last[0] == recorded:
            self._last = (actual, self._last[1])
        return actual

    def correct(self, recorded: float, actual: float, threshold: float = 0.001, *, defer: bool = False) -> None:
        """The request granted at ``recorded`` left at ``actual``: keep the log exact.

        Between the grant and the bytes leaving there can be milliseconds (a commit, the
        GIL, the scheduler); a window counted from the recorded time would be that much
        short on the server's side, so a late departure replaces the recorded time.
        """
        actual = self._departure(recorded, actual, threshold)
        later = getattr(self.ledger, "correct_later", None) if defer else None
        if later is not None:
            later(self.host, recorded, actual)
        else:
            self.ledger.correct(self.host, recorded, actual)

    def departed(self, recorded: float, actual: float, threshold: float = 0.001) -> bool:
        """A shared-ledger send left: noted in memory now; True when the ledger then needs
        :meth:`write_departures` (a database write), False when it is already recorded."""
        actual = self._departure(recorded, actual, threshold)
        note = getattr(self.ledger, "note_departure", None)
        if note is None:
            self.ledger.correct(self.host, recorded, actual)
            return False
        note(self.host, recorded, actual)
        return True

    def write_departures(self) -> None:
        """A shared ledger's noted departures of this host, written now (autocommit)."""
        self.ledger.write_departures(self.host)

    def pause(self, until: float) -> None:
        """Hold every send to this host until ``until`` (429 / Retry-After), at most
        :data:`PAUSE_MAX` from now (a server asking for more is asked again then)."""
        cap = self.clock.now() + PAUSE_MAX
        self.ledger.pause(self.host, until if math.isfinite(until) and until < cap else cap)

    def outage(self, reason: str, initial: float, cap: float, u: float) -> tuple[float, float, int]:
        """The host answered "down": pause it with growing backoff; (until, since, count)."""
        return self.ledger.outage(self.host, reason, self.clock.now(), initial, cap, u)

    def clear_outage(self) -> None:
        self.ledger.clear_outage(self.host)

    def outage_may_be_recorded(self) -> bool:
        """False only when the ledger knows no outage is recorded (then clearing is a no-op)."""
        known = getattr(self.ledger, "outage_recorded", None)
        return True if known is None else known(self.host)


def max_in_window(times: list[float], period: float) -> int:
    """The most sends inside any closed window [t, t + period] (stricter than half-open)."""
    ts = sorted(times)
    best = 0
    j = 0
    for i, t in enumerate(ts):
        while ts[j] < t - period:
            j += 1
        best = max(best, i - j + 1)
    return best
