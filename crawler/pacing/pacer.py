"""One host's pacer: waits for a send slot from its ledger right before each HTTP attempt.

The slot is granted (and its time taken) just before the request goes out; the pacer
then reports when the request actually left (:meth:`Pacer.correct`,
:meth:`Pacer.departed`), so the send log holds departures, not grants. Clock and sleep
are injectable (:class:`Clock`): the tests drive a pacer with a fake clock and check the
window bound exactly. Times are unix seconds (floats).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from crawler.pacing.ledger import Ledger
from crawler.pacing.memory import MemoryLedger
from crawler.pacing.rule import PAUSE_MAX, default_margin
from engines.base import Rate


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock unix seconds (shared by processes on one machine, stored in send_log)."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


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
        self.ledger: Ledger = ledger if ledger is not None else MemoryLedger()
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
                # A ledger with database work decides off the event loop (reserve_async): a
                # transaction on the loop's thread holds up every other request in flight.
                ok, t = await self.ledger.reserve_async(
                    self.host, self.clock.now, self.rate, self.margin, self.worker, self._credit())
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
        return self.ledger.defers_corrections

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
        ``defer``: in the database with the crawl's next write (``Ledger.correct_later``).
        """
        actual = self._departure(recorded, actual, threshold)
        if defer:
            self.ledger.correct_later(self.host, recorded, actual)
        else:
            self.ledger.correct(self.host, recorded, actual)

    def departed(self, recorded: float, actual: float, threshold: float = 0.001) -> bool:
        """A shared-ledger send left: noted in memory now; True when the ledger then needs
        :meth:`write_departures` (a database write), False when it is already recorded."""
        actual = self._departure(recorded, actual, threshold)
        return self.ledger.note_departure(self.host, recorded, actual)

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
        return self.ledger.outage_recorded(self.host)
