"""What a ledger is (the :class:`Ledger` protocol), and which one a crawl gets (:func:`ledger_for`).

A ledger keeps a host's send times, pauses and outage state, and grants send slots by
the rule of ``crawler.pacing.rule``. There is one class per way of keeping them:

- :class:`~crawler.pacing.memory.MemoryLedger`: in memory (unit tests, throwaway runs);
- :class:`~crawler.pacing.exclusive.ExclusiveLedger`: a SQLite file under the crawl lock,
  so this process is the only writer; the window is kept in memory, and the database
  rows follow with the crawl's own writes;
- :class:`~crawler.pacing.shared.SharedSqlLedger`: a database shared by several
  processes, one short transaction per grant under a lock on the host's row;
- :class:`~crawler.pacing.postgres.PgLedger`: PostgreSQL shared by several processes, a
  grant being one call of the server function ``engines_reserve``.

The pacer, the fetcher and the crawl run call only what :class:`Ledger` declares; a
ledger that has nothing to do for a call does nothing (or answers with a constant).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from crawler.pacing.exclusive import ExclusiveLedger
from crawler.pacing.postgres import PgLedger
from crawler.pacing.shared import SharedSqlLedger
from crawler.pacing.sql import SqlLedger
from engines.base import Rate

if TYPE_CHECKING:
    import sqlalchemy as sa


class Ledger(Protocol):
    """Where send times, pauses and outages are kept; ``reserve`` records a send now, if allowed."""

    @property
    def defers_corrections(self) -> bool:
        """True when nobody else reads this ledger: a departure is corrected in memory at
        once (:meth:`correct_later`) and written with the crawl's next write
        (:meth:`flush_corrections`)."""

    def reserve(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        """(True, send time recorded) or (False, earliest allowed time).

        ``now`` is read as late as possible (after any lock is held), so the recorded
        time is as close as it can be to the moment the request leaves.
        """

    async def reserve_async(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        """:meth:`reserve` for the event loop: database work runs off the loop's thread."""

    def pause(self, host: str, until: float) -> None:
        """Hold every send to ``host`` until ``until`` (a later pause already stored stays)."""

    def paused_until(self, host: str) -> float | None: ...

    def correct(self, host: str, recorded: float, actual: float) -> None:
        """Replace a recorded send time by the (later) time the request actually left."""

    def correct_later(self, host: str, recorded: float, actual: float) -> None:
        """:meth:`correct` in memory now; in the database with :meth:`flush_corrections`."""

    def flush_corrections(self, conn: sa.Connection) -> None:
        """Write the departures :meth:`correct_later` kept, inside the caller's transaction."""

    def note_departure(self, host: str, recorded: float, actual: float) -> bool:
        """A send left: True when :meth:`write_departures` must follow to record it,
        False when it is recorded already."""

    def write_departures(self, host: str) -> int:
        """The departures of ``host`` noted by :meth:`note_departure`, written now; how many."""

    def outage(self, host: str, reason: str, now: float, initial: float, cap: float, u: float
               ) -> tuple[float, float, int]:
        """Record an outage answer: pause the host with growing backoff; (until, since, count)."""

    def outage_recorded(self, host: str) -> bool:
        """False only when the ledger knows no outage of ``host`` is recorded."""

    def clear_outage(self, host: str) -> None:
        """A good answer: the host is up again (its outage state is cleared)."""

    def clear_outage_in(self, conn: sa.Connection, host: str) -> None:
        """:meth:`clear_outage` inside the caller's transaction (the answer's)."""


def ledger_for(db, *, exclusive: bool = False) -> SqlLedger:  # noqa: ANN001 - store.db.Database
    """The database ledger for ``db``: exclusive when this process is the only crawler of
    the file (the SQLite crawl lock is held), else shared: through ``engines_reserve`` on
    PostgreSQL, through plain SQL elsewhere."""
    if exclusive:
        return ExclusiveLedger(db)
    if db.dialect == "postgresql":
        return PgLedger(db)
    return SharedSqlLedger(db)


# The name the crawl run and the tests have always built a database ledger with.
DbLedger = ledger_for
