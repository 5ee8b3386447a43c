"""What every database ledger shares: the ``send_log`` / ``host_state`` rows and their writes.

Send times live in ``send_log`` (one row per send, ``pending`` until its departure is
recorded) and pauses and outages in ``host_state`` (one row per host), so a restart right
after a burst reloads them and every process sharing the database sees them. How a send
slot is granted is each mode's own (``reserve``, ``reserve_async``): see
``crawler.pacing.exclusive``, ``crawler.pacing.shared`` and ``crawler.pacing.postgres``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Callable

import sqlalchemy as sa

from crawler.pacing.rule import outage_backoff
from crawler.writer import on_rollback
from engines.base import Rate
from store.text import clean_text


class SqlLedger:
    """The part of a database ledger that does not depend on how slots are granted."""

    defers_corrections = False

    def __init__(self, db) -> None:  # noqa: ANN001 - store.db.Database
        from store.models import HostState, SendLog

        self.db = db
        self._hs = HostState.__table__
        self._sl = SendLog.__table__
        self._known: set[str] = set()  # hosts whose host_state row exists
        # host → whether host_state holds an outage, as this process last saw it (a grant
        # or an outage write); a good answer then skips clearing what is not there.
        self._outage: dict[str, bool] = {}
        self._send_insert = sa.insert(self._sl)
        self._send_correct = sa.update(self._sl).where(self._sl.c.host == sa.bindparam("h"),
                                                       self._sl.c.sent_at == sa.bindparam("r"))
        self._deferred: deque = deque()  # correct_later: departures not yet written (send_log rows)
        self._departures: dict[tuple[str, float], float] = {}  # note_departure: (host, granted) → departure
        self._worker = ""  # the worker of the last grant (correct_later's rows)

    # ------------------------------------------------------------ hooks of the modes

    def _remember_pause(self, host: str, until: float | None, outage: bool = False) -> None:
        """A pause (and, with ``outage``, an outage) just written for ``host``: ledgers that
        keep the host's state in memory update it."""

    def _correct_cache(self, host: str, recorded: float, actual: float) -> None:
        """A departure just recorded: ledgers that keep the window in memory move it there."""

    async def reserve_async(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        """``reserve`` for the event loop: its transaction runs in a worker thread (one on
        the loop's thread would hold up every other request in flight)."""
        return await asyncio.to_thread(self.reserve, host, now, rate, margin, worker, credit)

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        raise NotImplementedError

    # ------------------------------------------------------------------- host rows

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
        self._remember_pause(host, cur)

    def paused_until(self, host: str) -> float | None:
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
        self._remember_pause(host, until, outage=True)
        return until, since, count

    def outage_recorded(self, host: str) -> bool:
        """Whether host_state may hold an outage of ``host``: unless known not to (exclusive
        ledgers; shared ones as of this process's last grant or outage write)."""
        return self._outage.get(host) is not False

    def clear_outage(self, host: str) -> None:
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

    # ------------------------------------------------------------------ departures

    def correct(self, host: str, recorded: float, actual: float) -> None:
        with self.db.engine.begin() as conn:
            conn.execute(self._send_correct, {"h": host, "r": recorded, "sent_at": actual, "pending": False})
        self._correct_cache(host, recorded, actual)

    def note_departure(self, host: str, recorded: float, actual: float) -> bool:
        """The send granted at ``recorded`` left at ``actual``; written by
        :meth:`write_departures` (right after the send) or by this process's next grant to the
        host (inside it), whichever comes first. True: a write is still due."""
        self._departures[(host, recorded)] = actual
        return True

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

    def write_departures(self, host: str) -> int:
        """The noted departures of ``host``, written now, each its own statement (no
        transaction of the caller's); how many."""
        with self.db.engine.connect() as conn:
            return self.apply_departures(conn.execution_options(isolation_level="AUTOCOMMIT"), host)

    def correct_later(self, host: str, recorded: float, actual: float) -> None:
        """The window in memory now, the send's ``send_log`` row with the crawl's next write
        (the exchange's archive; see :meth:`flush_corrections`)."""
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
