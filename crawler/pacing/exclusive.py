"""The exclusive ledger: a SQLite file under the crawl lock, so this process is its only writer.

Nobody else can change the window or the pause of a host, so both are read from the
database once per host and then kept in memory: a grant is decided in memory and writes
nothing. The departure of a send is corrected in memory at once and inserted into
``send_log`` with the crawl's next write (the exchange's archive transaction:
``correct_later`` / ``flush_corrections``). A crawl that dies before that write leaves
its last sends unknown, so the next crawl of the file waits one whole window before its
first send to each host (``unclean_since``, :meth:`ExclusiveLedger._load`).
"""

from __future__ import annotations

import asyncio
from typing import Callable

import sqlalchemy as sa

from crawler.pacing.rule import earliest_send_span, window_span
from crawler.pacing.sql import SqlLedger
from engines.base import Rate


class ExclusiveLedger(SqlLedger):
    """Window and pause in memory after one read per host; rows written with the crawl's writes."""

    defers_corrections = True

    def __init__(self, db) -> None:  # noqa: ANN001 - store.db.Database
        super().__init__(db)
        self._cache: dict[str, list[list]] = {}  # host → newest sends [[sent_at, pending], ...]
        self._paused: dict[str, float | None] = {}
        self._loaded: dict[str, int] = {}  # host → how many sends the cache was loaded with
        # When the last crawl of this file did not finish (its sends after its last commit
        # are unknown), set by the crawl run; see _load.
        self.unclean_since: float | None = None

    def _load(self, host: str, rate: Rate, margin: float) -> list[list]:
        """The cache of a host: its newest ``rate.n`` sends and its pause, read once.

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

    def _grant(
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

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        self._worker = worker
        return self._grant(host, self._load(host, rate, margin), now, rate, margin, credit)

    async def reserve_async(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        """Decided in memory, on the loop (a thread only for the first read of a host)."""
        self._worker = worker
        log = self._cache.get(host)
        if log is None or self._loaded.get(host, 0) < rate.n:
            log = await asyncio.to_thread(self._load, host, rate, margin)
        return self._grant(host, log, now, rate, margin, credit)

    def _remember_pause(self, host: str, until: float | None, outage: bool = False) -> None:
        if host in self._paused:
            self._paused[host] = until
            if outage:
                self._outage[host] = True

    def _correct_cache(self, host: str, recorded: float, actual: float) -> None:
        for row in self._cache.get(host, ()):
            if row[0] == recorded:
                row[0], row[1] = actual, False
                self._cache[host].sort(key=lambda r: r[0])
                break

    def paused_until(self, host: str) -> float | None:
        if host in self._paused:
            return self._paused[host]
        return super().paused_until(host)

    def clear_outage(self, host: str) -> None:
        if self._outage.get(host) is False:
            return  # nothing recorded, and only this process writes host_state
        super().clear_outage(host)
