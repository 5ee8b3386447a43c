"""The memory ledger: send times, pauses and outages of one process, in memory only.

For unit tests and throwaway runs: nothing survives the process, and nothing is shared
with another one. Every departure is recorded at once, so the calls that exist for a
database's sake (deferred corrections, noted departures) record it directly or do nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from crawler.pacing.rule import earliest_send, outage_backoff
from crawler.writer import on_rollback
from engines.base import Rate

if TYPE_CHECKING:
    import sqlalchemy as sa


class MemoryLedger:
    """In-process ledger; ``history`` seeds it, e.g. from a restart."""

    defers_corrections = False

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

    async def reserve_async(
        self, host: str, now: Callable[[], float], rate: Rate, margin: float, worker: str,
        credit: tuple[float, float] | None = None,
    ) -> tuple[bool, float]:
        """No database work: decided on the loop."""
        return self.reserve(host, now, rate, margin, worker, credit)

    def pause(self, host: str, until: float) -> None:
        self.pauses[host] = max(self.pauses.get(host, 0.0), until)

    def paused_until(self, host: str) -> float | None:
        return self.pauses.get(host)

    def correct(self, host: str, recorded: float, actual: float) -> None:
        log = self.sends.get(host, [])
        if recorded in log:
            log[log.index(recorded)] = actual
            log.sort()

    def correct_later(self, host: str, recorded: float, actual: float) -> None:
        """Nothing to write later: corrected now."""
        self.correct(host, recorded, actual)

    def flush_corrections(self, conn: sa.Connection) -> None:
        """Nothing deferred."""

    def note_departure(self, host: str, recorded: float, actual: float) -> bool:
        """Recorded now; no write follows."""
        self.correct(host, recorded, actual)
        return False

    def write_departures(self, host: str) -> int:
        """Nothing noted: every departure is recorded at once."""
        return 0

    def outage(self, host: str, reason: str, now: float, initial: float, cap: float, u: float
               ) -> tuple[float, float, int]:
        since, _, count = self.outages.get(host, (now, reason, 0))
        count += 1
        until = now + outage_backoff(count, initial, cap, u)
        self.outages[host] = (since, reason, count)
        self.pause(host, until)
        return max(until, self.pauses[host]), since, count

    def outage_recorded(self, host: str) -> bool:
        """Always worth clearing (a dictionary lookup)."""
        return True

    def clear_outage(self, host: str) -> None:
        self.outages.pop(host, None)

    def clear_outage_in(self, conn: sa.Connection, host: str) -> None:
        """Cleared now, and put back if the caller's transaction (the answer's) is rolled back."""
        state = self.outages.pop(host, None)
        if state is not None:
            on_rollback(conn, lambda: self.outages.setdefault(host, state))
