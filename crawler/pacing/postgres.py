"""The PostgreSQL ledger: several processes grant sends through the server function ``engines_reserve``.

The steps of the shared SQL grant (``crawler.pacing.shared``: lock the host's row, write
this process's noted departures, count the window, insert the pending send) run in one
call of ``engines_reserve`` (migrations 0005, 0006), so the host's row stays locked for
the server's microseconds rather than for several round trips of a busy client. The
calls go through the driver in autocommit (:meth:`PgLedger._autocommit`).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from crawler.pacing.rule import PENDING_MAX
from crawler.pacing.sql import SqlLedger
from engines.base import Rate

T = TypeVar("T")

# Through the driver (PgLedger._autocommit): a send slot (migrations 0005, 0006), and a
# departure replacing its grant's time.
_RESERVE_SQL = ("SELECT granted, earliest, outage FROM engines_reserve(%s::text, %s::double precision, "
                "%s::integer, %s::double precision, %s::double precision, %s::double precision, "
                "%s::double precision, %s::double precision, %s::text, %s::double precision[])")
_DEPARTED_SQL = "UPDATE send_log SET sent_at = %s, pending = false WHERE host = %s AND sent_at = %s"


class PgLedger(SqlLedger):
    """A shared ledger on PostgreSQL: one server-function call per grant."""

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

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
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
        self._outage[host] = bool(outage)
        return bool(granted), float(t)

    def write_departures(self, host: str) -> int:
        """The noted departures of ``host``, written now in autocommit through the driver
        (no transaction of the caller's); how many."""
        taken = self._take_departures(host)
        if taken:
            rows = [(a, host, r) for r, a in taken]
            self._autocommit(lambda driver: driver.cursor().executemany(_DEPARTED_SQL, rows))
        return len(taken)
