"""The shared SQL ledger: several processes grant sends from one database, in plain SQL.

A grant is one short transaction: lock the host's ``host_state`` row (``FOR UPDATE``
where the database has it; SQLite serialises its writers), read the last n sends, and
insert the new one, *pending*, if the window allows it. Processes sharing the database
therefore share one budget per host and never exceed it together. No sleeping happens
inside the transaction. A pending send counts as leaving "now" for every other reader
until its sender records the departure (``note_departure`` / ``write_departures``), so a
sender held up between grant and departure cannot make another's window start early.
On PostgreSQL the same steps run in the server instead: ``crawler.pacing.postgres``.
"""

from __future__ import annotations

from typing import Callable

import sqlalchemy as sa

from crawler.pacing.rule import PENDING_MAX, earliest_send_span
from crawler.pacing.sql import SqlLedger
from engines.base import Rate


class SharedSqlLedger(SqlLedger):
    """Send times in ``send_log`` and pauses in ``host_state``, re-read under a row lock at each grant."""

    def __init__(self, db) -> None:  # noqa: ANN001 - store.db.Database
        super().__init__(db)
        # The grant's statements, built once (building them per send cost as much as running
        # them). A granted send that has not left yet may leave any moment: it counts as
        # leaving now, so the window never starts before its real departure however late its
        # sender runs (a busy machine); a dead sender's mark lapses after PENDING_MAX. Only
        # the oldest and newest of the last n (so adjusted) matter: the database reduces
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

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
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
