"""The pacer with a fake clock: the sliding-window bound exactly, restarts, retries, pauses.

The fake clock's sleep advances time instantly, so these tests check the schedule the
pacer produces, not wall time. The DbLedger cases use a real SQLite file.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from crawler.pacing import (
    DbLedger,
    DeadlineReached,
    MemoryLedger,
    Pacer,
    default_margin,
    earliest_send,
    max_in_window,
    parse_rate,
)
from engines.base import Rate
from store.db import open_database
from store.errors import InputError
from tests.support.pacing import FakeClock


def near(expected, abs: float = 1e-6):  # noqa: A002
    """pytest.approx with an absolute tolerance: its default (relative 1e-6) is ±1 s at the
    unix-time magnitudes these tests use."""
    return pytest.approx(expected, rel=0, abs=abs)


def windows_ok(times: list[float], rate: Rate) -> bool:
    return max_in_window(times, rate.period) <= rate.n


async def test_strict_spacing_and_window_bound_exact() -> None:
    clock = FakeClock()
    rate = Rate(3, 30.0)
    pacer = Pacer("h", rate, clock=clock, margin=0.5)
    times = [await pacer.acquire() for _ in range(10)]
    rel = [t - times[0] for t in times]
    # Minimum spacing T/n (no burst, even at the start); every n-th send waits for the
    # window T + margin: 0, 10, 20, 30.5, 40.5, 50.5, 61, ...
    assert rel == near([0, 10, 20, 30.5, 40.5, 50.5, 61, 71, 81, 91.5])
    assert max_in_window(times, 30.0) == 3
    # Any n + 1 consecutive sends span at least T + margin.
    assert all(times[i + 3] - times[i] >= 30.5 - 1e-9 for i in range(len(times) - 3))


async def test_window_bound_after_idle_period_is_not_a_burst() -> None:
    clock = FakeClock()
    rate = Rate(5, 10.0)
    pacer = Pacer("h", rate, clock=clock, margin=0.1)
    times = [await pacer.acquire() for _ in range(5)]
    clock.advance(100.0)  # idle: an aiolimiter bucket would now admit 5 at once
    t0 = clock.now()
    times += [await pacer.acquire() for _ in range(5)]
    assert times[5] == t0  # the first after the idle period goes at once ...
    assert times[6] - times[5] == near(10.0 / 5)  # ... the rest are spaced
    assert windows_ok(times, rate)


def test_earliest_send_window_dominates_spacing() -> None:
    rate = Rate(3, 30.0)
    # Three sends close together (e.g. written by another process with another rate).
    hist = [100.0, 100.5, 101.0]
    assert earliest_send(hist, None, rate, 0.5) == near(130.5)
    assert earliest_send(hist[-1:], None, rate, 0.5) == near(101.0 + 10.0)
    # A late last send (credit: it left 2 s after its slot) does not push the schedule back.
    assert earliest_send(hist[-1:], None, rate, 0.5, credit=(101.0, 2.0)) == near(109.0)
    assert earliest_send(hist[-1:], None, rate, 0.5, credit=(99.0, 2.0)) == near(111.0)
    assert earliest_send([], 500.0, rate, 0.5) == 500.0
    assert earliest_send(hist, 1000.0, rate, 0.5) == 1000.0


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_demand_never_exceeds_window(seed: int) -> None:
    """Requests arrive at random times (several tasks); the send log still obeys the bound."""
    rng = random.Random(seed)
    clock = FakeClock()
    rate = Rate(4, 2.0)
    ledger = MemoryLedger()
    pacer = Pacer("h", rate, ledger, clock=clock, margin=0.0)

    async def user(k: int) -> None:
        for _ in range(k):
            if rng.random() < 0.3:
                clock.advance(rng.random() * 3)
            await pacer.acquire()

    await asyncio.gather(*(user(15) for _ in range(3)))
    sends = ledger.sends["h"]
    assert len(sends) == 45
    # margin 0: the bound holds for half-open windows exactly (n sends in [t, t + T)).
    assert max_in_window([s + 1e-9 * i for i, s in enumerate(sends)], rate.period - 1e-6) <= rate.n


async def test_restart_right_after_burst_reloads_send_log(tmp_path) -> None:
    """Sends persisted in send_log are honoured by a new process (new pacer, same DB)."""
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    rate = Rate(3, 30.0)
    clock = FakeClock()
    db = open_database(url)
    try:
        first = Pacer("api.example:443", rate, DbLedger(db), clock=clock, margin=0.5)
        before = [await first.acquire() for _ in range(3)]
    finally:
        db.dispose()
    clock.advance(1.0)  # "restart" one second after the burst
    db = open_database(url)
    try:
        ledger = DbLedger(db)
        second = Pacer("api.example:443", rate, ledger, clock=clock, margin=0.5)
        after = [await second.acquire() for _ in range(4)]
        stored = ledger.history("api.example:443", 0.0)
    finally:
        db.dispose()
    assert stored == before + after
    assert after[0] >= before[0] + 30.5  # the fourth send waits for the first to leave the window
    assert max_in_window(before + after, 30.0) == 3
    # Without the reload the new pacer would have sent at once: the check has teeth.
    fresh = Pacer("api.example:443", rate, MemoryLedger(), clock=clock, margin=0.5)
    assert await fresh.acquire() == clock.now()


async def test_restart_with_other_rate_still_bounded_by_history() -> None:
    clock = FakeClock()
    hist = {"h": [clock.now() - 1.0, clock.now() - 0.5, clock.now() - 0.1]}
    pacer = Pacer("h", Rate(3, 10.0), MemoryLedger(hist), clock=clock, margin=0.2)
    t = await pacer.acquire()
    assert t == near(hist["h"][0] + 10.2)


async def test_retries_are_repaced() -> None:
    """A retried call goes back through the pacer: attempts obey the window too."""
    clock = FakeClock()
    rate = Rate(2, 4.0)
    pacer = Pacer("h", rate, clock=clock, margin=0.0)
    attempts: list[float] = []

    async def flaky_call(fail_times: int) -> None:
        for attempt in range(fail_times + 1):
            attempts.append(await pacer.acquire())  # limiter inside the retried function
            if attempt < fail_times:
                await clock.sleep(0.01)  # a tiny backoff: the pacer, not the backoff, spaces them

    for fails in (3, 0, 2):
        await flaky_call(fails)
    assert len(attempts) == 8
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    assert min(gaps) >= 2.0 - 1e-9
    assert max_in_window([a + 1e-9 * i for i, a in enumerate(attempts)], rate.period - 1e-6) <= 2


async def test_pause_holds_every_request_to_host() -> None:
    clock = FakeClock()
    ledger = MemoryLedger()
    a = Pacer("h", Rate(10, 1.0), ledger, clock=clock, margin=0.0)
    other = Pacer("other", Rate(10, 1.0), ledger, clock=clock, margin=0.0)
    await a.acquire()
    a.pause(clock.now() + 5.0)
    t_other = await other.acquire()
    t = await a.acquire()
    assert t_other < clock.now() - 4.0  # other hosts are not paused
    assert t == near(t_other + 5.0)


async def test_pause_in_db_is_seen_by_another_pacer(tmp_path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        clock = FakeClock()
        l1, l2 = DbLedger(db), DbLedger(db)
        p1 = Pacer("h", Rate(5, 1.0), l1, clock=clock, margin=0.0)
        p2 = Pacer("h", Rate(5, 1.0), l2, clock=clock, margin=0.0)
        start = clock.now()
        p1.pause(start + 7.0)
        p1.pause(start + 3.0)  # an earlier time never shortens a pause
        assert l2.paused_until("h") == start + 7.0
        assert await p2.acquire() == start + 7.0
    finally:
        db.dispose()


async def test_deadline_stops_waiting() -> None:
    clock = FakeClock()
    pacer = Pacer("h", Rate(1, 60.0), clock=clock, margin=0.0, deadline=clock.now() + 30.0)
    await pacer.acquire()
    with pytest.raises(DeadlineReached):
        await pacer.acquire()


def test_parse_rate_and_margin() -> None:
    assert parse_rate("3/30s") == Rate(3, 30.0)
    assert parse_rate("20/2s") == Rate(20, 2.0)
    assert parse_rate("24/1m") == Rate(24, 60.0)
    with pytest.raises(InputError):
        parse_rate("fast")
    with pytest.raises(InputError):
        parse_rate("0/30s")
    assert default_margin(Rate(3, 30.0)) == near(0.305)
    assert default_margin(Rate(10, 0.5)) == near(0.1)  # the floor: arrival jitter under load
    assert default_margin(Rate(1, 3600.0)) == 1.0


def test_max_in_window_counts_closed_windows() -> None:
    assert max_in_window([0.0, 1.0, 2.0], 2.0) == 3
    assert max_in_window([0.0, 1.0, 2.0001], 2.0) == 2
    assert max_in_window([], 1.0) == 0


async def test_late_departure_corrects_the_log_and_next_window(tmp_path) -> None:
    """A request that left 40 ms after its grant is logged at its departure time, and the
    window of the send n later counts from there (SQLite ledger and memory ledger)."""
    for kind in ("memory", "db"):
        clock = FakeClock()
        db = open_database(f"sqlite:///{tmp_path / (kind + '.db')}") if kind == "db" else None
        try:
            ledger = DbLedger(db) if db else MemoryLedger()
            pacer = Pacer("h", Rate(2, 10.0), ledger, clock=clock, margin=0.0)
            t1 = await pacer.acquire()
            pacer.correct(t1, t1 + 0.04)  # left late
            pacer.correct(t1 + 0.04, t1 + 0.0405)  # below the 1 ms threshold: ignored
            t2 = await pacer.acquire()
            pacer.correct(t2, t2)  # left on time (the fetcher always reports the departure)
            t3 = await pacer.acquire()
            assert t2 == near(t1 + 5.0)  # spacing counts from the planned slot
            assert t3 == near(t1 + 0.04 + 10.0)  # the window from the actual departure
            stored = ledger.history("h", 0.0) if db else ledger.sends["h"]
            assert stored == near([t1 + 0.04, t2, t3])
        finally:
            if db:
                db.dispose()


async def test_pending_send_counts_as_leaving_now_until_corrected(tmp_path) -> None:
    """Worker A is granted a slot but has not sent yet (a busy machine): worker B must not
    count A's window from the grant. It waits while A's send is pending; a mark that is
    never corrected (A killed) lapses after PENDING_MAX."""
    from crawler.pacing import PENDING_MAX

    clock = FakeClock()
    db = open_database(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        ledger = DbLedger(db)
        rate = Rate(1, 2.0)
        a = Pacer("h", rate, ledger, clock=clock, margin=0.0, worker="a")
        b = Pacer("h", rate, ledger, clock=clock, margin=0.0, worker="b")
        ta = await a.acquire()
        clock.advance(1.5)  # A is descheduled for 1.5 s between its grant and its departure
        ok, when = ledger.reserve("h", clock.now, rate, 0.0, "b")
        assert not ok and when == near(ta + 1.5 + 2.0)  # counted from "now", not from ta + 2
        a.correct(ta, ta + 1.5)  # A leaves now
        ok, when = ledger.reserve("h", clock.now, rate, 0.0, "b")
        assert not ok and when == near(ta + 1.5 + 2.0)  # from the real departure
        tb = await b.acquire()
        assert tb == near(ta + 3.5)
        b.correct(tb, tb)
        # A killed between grant and departure: its mark holds the host for PENDING_MAX at most.
        tc = await a.acquire()
        td = await b.acquire()
        assert td == near(tc + PENDING_MAX)
        assert ledger.history("h", 0.0) == near([ta + 1.5, tb, tc, td])
        assert a.stats.send_delays[0] == near(1.5)
    finally:
        db.dispose()


@pytest.mark.parametrize("ledger_kind", ["exclusive", "shared sqlite", "shared postgres"])
def test_spacing_counts_from_a_pending_grant_and_the_window_from_now(ledger_kind: str, request) -> None:
    """A granted send on its way out holds the window (it counts as leaving now) but not
    the spacing, which counts from its grant. Each kind of ledger decides the same."""
    url = request.getfixturevalue("pg_url" if ledger_kind == "shared postgres" else "sqlite_url")
    db = open_database(url)
    t0 = 1_000_000.0
    try:
        ledger = DbLedger(db, exclusive=ledger_kind == "exclusive")
        # 4 per 2 s: spacing 0.5 s. A's send granted at t0 is still pending at t0 + 0.2:
        # the next may go at t0 + 0.5 (counting it as leaving now would say t0 + 0.7).
        rate = Rate(4, 2.0)
        assert ledger.reserve("s", lambda: t0, rate, 0.0, "a") == (True, t0)
        assert ledger.reserve("s", lambda: t0 + 0.2, rate, 0.0, "b") == (False, near(t0 + 0.5))
        # 2 per 2 s: A's grant at t0 never leaves (pending); B's at t0 + 1 leaves at once.
        # At t0 + 1.3 the window's oldest is A's send counted as leaving now (t0 + 1.3), so
        # the window starts at B's departure: t0 + 1 + 2 s. Counted from A's grant it
        # would allow t0 + 2.
        rate = Rate(2, 2.0)
        assert ledger.reserve("w", lambda: t0, rate, 0.0, "a") == (True, t0)
        assert ledger.reserve("w", lambda: t0 + 1.0, rate, 0.0, "b") == (True, t0 + 1.0)
        ledger.correct("w", t0 + 1.0, t0 + 1.0)
        assert ledger.reserve("w", lambda: t0 + 1.3, rate, 0.0, "c") == (False, near(t0 + 3.0))
    finally:
        db.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("seed", range(3))
def test_postgres_reserve_function_decides_as_earliest_send(pg_url: str, seed: int) -> None:
    """On PostgreSQL a slot is decided by the server function engines_reserve (migration
    0005, 0006): the same decision as crawler.pacing.earliest_send over the same history,
    with pending sends counted as leaving now for the window (the spacing from the newest
    recorded time), pauses, the credit and noted departures."""
    import sqlalchemy as sa

    from crawler.pacing import PENDING_MAX, earliest_send, earliest_send_span
    from store.models import HostState, SendLog

    rng = random.Random(seed)
    db = open_database(pg_url)
    try:
        ledger = DbLedger(db)
        for case in range(60):
            host = f"h{case}"
            rate = Rate(rng.choice([1, 2, 3, 5]), rng.choice([0.5, 2.0, 30.0]))
            margin = rng.choice([0.0, 0.1, 0.3])
            now = 1_000_000.0 + rng.uniform(0, 100)
            hist = sorted(now - rng.uniform(-0.5, 40) for _ in range(rng.randint(0, 7)))
            pending = [rng.random() < 0.3 for _ in hist]
            paused = rng.choice([None, None, now - 1.0, now + rng.uniform(0, 5)])
            credit = (hist[-1], rng.uniform(0, 0.2)) if hist and rng.random() < 0.4 else None
            noted = [(t, t + 0.01) for t, p in zip(hist, pending) if p and rng.random() < 0.5]
            with db.engine.begin() as conn:
                conn.execute(sa.insert(HostState.__table__).values(host=host, paused_until=paused,
                                                                    updated_at=sa.func.now()))
                if hist:
                    conn.execute(sa.insert(SendLog.__table__), [
                        {"host": host, "sent_at": t, "worker": "x", "pending": p} for t, p in zip(hist, pending)])
            for recorded, actual in noted:
                ledger.note_departure(host, recorded, actual)
            fixed = {r: a for r, a in noted}
            rows = sorted(((fixed.get(t, t), p and t not in fixed) for t, p in zip(hist, pending)),
                          key=lambda r: r[0])[-rate.n:]
            # The window counts a pending send as leaving now; the spacing counts from the
            # newest recorded time (migration 0006).
            recent = [now if p and now - PENDING_MAX < t < now else t for t, p in rows]
            want = earliest_send(recent, paused, rate, margin, credit)
            if rows:
                want = earliest_send_span(len(rows), min(recent), max(t for t, _ in rows), paused, rate, margin,
                                          credit)
            ok, t = ledger.reserve(host, lambda: now, rate, margin, "w", credit)
            assert (ok, t) == ((True, now) if want <= now else (False, near(want))), (case, rows, paused)
            with db.engine.connect() as conn:
                logged = sorted(conn.execute(sa.select(SendLog.sent_at, SendLog.pending)
                                             .where(SendLog.host == host)).all())
            expect = sorted([(fixed.get(t, t), p and t not in fixed) for t, p in zip(hist, pending)]
                            + ([(now, True)] if ok else []))
            assert logged == [tuple(x) for x in expect]
    finally:
        db.dispose()


@pytest.mark.parametrize("any_db_url", ["sqlite", "postgres"], indirect=True)
def test_noted_departures_are_written_once_and_replace_their_grants(any_db_url: str) -> None:
    """Shared ledgers: a send's departure, noted when it leaves, replaces its pending grant
    in send_log when written (PostgreSQL: through the driver, in autocommit); each noted
    departure is written once, and only this host's."""
    import sqlalchemy as sa

    from store.models import SendLog

    db = open_database(any_db_url)
    t0 = 1_000_000.0
    try:
        ledger = DbLedger(db)
        rate = Rate(5, 1.0)
        assert ledger.reserve("h", lambda: t0, rate, 0.0, "w") == (True, t0)
        assert ledger.reserve("h", lambda: t0 + 0.25, rate, 0.0, "w") == (True, t0 + 0.25)
        assert ledger.reserve("other", lambda: t0, rate, 0.0, "w") == (True, t0)
        ledger.note_departure("h", t0, t0 + 0.01)
        ledger.note_departure("h", t0 + 0.25, t0 + 0.3)
        ledger.note_departure("other", t0, t0 + 0.02)
        assert ledger.write_departures("h") == 2
        assert ledger.write_departures("h") == 0
        with db.engine.connect() as conn:
            rows = conn.execute(sa.select(SendLog.host, SendLog.sent_at, SendLog.pending)
                                .order_by(SendLog.host, SendLog.sent_at)).all()
        assert [tuple(r) for r in rows] == [("h", near(t0 + 0.01), False), ("h", near(t0 + 0.3), False),
                                            ("other", near(t0), True)]
        # The next grant writes what is still noted (here the other host's), inside its call.
        assert ledger.reserve("other", lambda: t0 + 0.5, rate, 0.0, "w") == (True, t0 + 0.5)
        with db.engine.connect() as conn:
            assert conn.execute(sa.select(SendLog.sent_at, SendLog.pending).where(SendLog.host == "other")
                                .order_by(SendLog.sent_at)).all() == [(near(t0 + 0.02), False), (near(t0 + 0.5), True)]
    finally:
        db.dispose()


@pytest.mark.postgres
def test_a_send_slot_on_a_dead_connection_fails_once_and_the_next_one_reconnects(pg_url: str) -> None:
    """Send slots go through the driver: a pooled connection whose server process died
    fails that call, is dropped from the pool, and the next call opens a new one."""
    import psycopg
    import sqlalchemy as sa

    db = open_database(pg_url)
    t0 = 1_000_000.0
    try:
        ledger = DbLedger(db)
        rate = Rate(100, 1.0)
        assert ledger.reserve("h", lambda: t0, rate, 0.0, "w") == (True, t0)
        db.engine.dispose()  # the pool empty: the next slot opens the one connection it will hold
        assert ledger.reserve("h", lambda: t0 + 0.5, rate, 0.0, "w") == (True, t0 + 0.5)
        admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as other:
            other.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                                  "AND query LIKE '%%engines_reserve%%'")
        admin.dispose()
        with pytest.raises(psycopg.OperationalError):
            ledger.reserve("h", lambda: t0 + 1.0, rate, 0.0, "w")
        assert ledger.reserve("h", lambda: t0 + 2.0, rate, 0.0, "w") == (True, t0 + 2.0)
    finally:
        db.dispose()
