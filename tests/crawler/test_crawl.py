"""The crawler against stand-in servers over real loopback sockets, at scaled rates.

Every stand-in enforces the same limit the crawler is given and counts what breaks it
from its own side (``stats.violations``, arrival times). Databases are real SQLite
files and the real PostgreSQL server (``pg_url``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import signal
import time

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import httpx

from crawler.fetch import Fetcher, RetryPolicy, parse_retry_after
from crawler.pacing import MemoryLedger, Pacer, SharedSqlLedger, max_in_window
from crawler.crawl import CrawlOptions, crawl_engines, run_crawl
from engines.base import Rate
from cli.main import app
from engines.emulate import FaultConfig, StandIn
from store.db import open_database
from store.models import Answer, EngineConfig, Exchange, ParseOutcome, SendLog, WorkLease
from tests.support.crawl import (  # noqa: F401  (fixtures)
    MARGIN, MARGIN_S, N_MPR, Quiet, RATE, _cli, _load_mpr, assert_send_log_window, assert_server_window, crawl,
    mpr_url, rows, table_count,
)


def test_retry_after_forms() -> None:
    now = 1_000_000.0
    assert parse_retry_after("5", now) == 5.0
    assert parse_retry_after(" 2.5 ", now) == 2.5
    http_date = "Mon, 12 Jan 1970 13:46:50 GMT"  # 1,000,010 s after the epoch
    assert parse_retry_after(http_date, now) == pytest.approx(10.0)
    assert parse_retry_after("Mon, 01 Jan 1970 00:00:00 GMT", now) == 0.0
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None


# ----------------------------------------------------------------- happy path


def test_two_engines_concurrently_zero_violations_and_fetch_once(mpr_url: str, rows) -> None:
    with StandIn("leansearch", rows, rate=RATE).in_thread() as a, \
            StandIn("leanexplore", rows, rate=RATE).in_thread() as b:
        summary, rep = crawl(mpr_url, {"leansearch": a, "leanexplore": b})
        assert summary.exit_code == 0, rep.lines
        for srv in (a, b):
            assert_server_window(srv, RATE)
            assert srv.stats.requests == N_MPR  # one request per text, nothing sent twice
        # Concurrent engines, not one after the other: each engine's paced run (69 / 20 per s
        # ≈ 3.5 s) overlaps the other's. Checked on the servers' arrival times, not a wall clock.
        ta, tb = a.stats.receive_times, b.stats.receive_times
        assert tb[0] < ta[-1] and ta[0] < tb[-1], (ta[0], ta[-1], tb[0], tb[-1])
        assert table_count(mpr_url, Answer) == 2 * N_MPR
        assert table_count(mpr_url, Exchange) == 2 * N_MPR
        assert table_count(mpr_url, ParseOutcome, ParseOutcome.ok.is_(True)) == 2 * N_MPR
        assert table_count(mpr_url, SendLog) == 2 * N_MPR
        for host in {a.url.split("/")[2], b.url.split("/")[2]}:
            # Recorded times: any n + 1 consecutive sends span T + margin; spacing >= T/n
            # counted from the scheduled slot (a late send may be followed a bit sooner).
            sends = assert_send_log_window(mpr_url, host, RATE)
            assert len(sends) == N_MPR
            assert (sends[-1] - sends[0]) >= (N_MPR - 1) * RATE.period / RATE.n
        assert table_count(mpr_url, WorkLease) == 0
        # Fetch once: a second run sends nothing.
        summary2, _ = crawl(mpr_url, {"leansearch": a, "leanexplore": b})
        assert summary2.exit_code == 0
        assert a.stats.requests == N_MPR and b.stats.requests == N_MPR
        # --refresh opens epoch 1; epoch 0 stays intact.
        summary3, _ = crawl(mpr_url, {"leansearch": a}, refresh=True, limit=5)
        assert summary3.exit_code == 3  # limit reached, work remains in the new epoch
        assert a.stats.requests == N_MPR + 5
        assert table_count(mpr_url, Answer, Answer.epoch == 1) == 5
        assert table_count(mpr_url, Answer, Answer.epoch == 0) == 2 * N_MPR
        assert_server_window(a, RATE)
    # The views answer the documented questions.
    db = open_database(mpr_url)
    try:
        with db.engine.connect() as conn:
            row = conn.exec_driver_sql(
                "SELECT engine, query_id, query_text, rank, returned_name, resolved_full_name, fetched_at "
                "FROM v_hits WHERE engine = 'leansearch' AND epoch = 0 AND rank = 1 ORDER BY query_id LIMIT 1"
            ).one()
            assert row.query_id.startswith("mathlibmpr_") and row.returned_name
            n = conn.exec_driver_sql("SELECT count(*) FROM v_answers WHERE epoch = 0").scalar()
            assert n == 2 * N_MPR
    finally:
        db.dispose()


# ------------------------------------------------------------------- faults


def test_faults_are_survived_and_archived(mpr_url: str, rows) -> None:
    faults = FaultConfig(error_5xx=0.15, reset=0.05, timeout=0.05, html_200=0.05, truncated=0.05)
    with StandIn("leanfinder", rows, rate=RATE, faults=faults, seed=7).in_thread() as srv:
        summary, rep = crawl(mpr_url, {"leanfinder": srv}, limit=30, timeout=0.4,
                             policy=RetryPolicy(max_attempts=8, backoff_initial=0.02, backoff_max=0.1,
                                                outage_initial=0.02, outage_max=0.1))
        assert_server_window(srv, RATE)
        injected = sum(srv.stats.faults.values())
        assert injected >= 3, srv.stats.faults  # the faults did happen
        res = summary.results[0]
        assert res.answered_now == 30 and res.exhausted == 0, rep.lines
        assert summary.exit_code == 3  # limit 30 of 69
        # Every attempt is archived: the server's requests equal the archived exchanges. On a busy
        # machine the client's 0.4 s timeout can also fire on a request the server had not yet
        # read (archived as a transport error, unseen by the server): those are the only surplus.
        exchanges = table_count(mpr_url, Exchange)
        n_transport = table_count(mpr_url, Exchange, Exchange.transport_error.is_not(None))
        injected_transport = srv.stats.faults["reset"] + srv.stats.faults["timeout"]
        late = n_transport - injected_transport  # client timeouts the stand-in did not inject
        assert exchanges == res.attempts and late >= 0
        assert srv.stats.requests <= exchanges <= srv.stats.requests + late
        # Parse failures are stored against their exchange and never become answers.
        bad = table_count(mpr_url, ParseOutcome, ParseOutcome.ok.is_(False))
        assert bad == srv.stats.faults["html_200"] + srv.stats.faults["truncated"]
        assert table_count(mpr_url, Answer) == 30
        db = open_database(mpr_url)
        try:
            with db.session() as s:
                failed_ex = set(s.execute(sa.select(ParseOutcome.exchange_id).where(ParseOutcome.ok.is_(False))).scalars())
                answer_ex = set(s.execute(sa.select(Answer.exchange_id)).scalars())
                assert not failed_ex & answer_ex
                ua = s.execute(sa.select(Exchange.request_headers)).scalars().first()
                assert ua["user-agent"].startswith("engines/")
        finally:
            db.dispose()


def test_429_with_retry_after_pauses_the_host(mpr_url: str, rows) -> None:
    """The client is told a faster rate than the server allows: the server's 429 +
    Retry-After must hold every later request until the pause is over."""
    server_rate = Rate(4, 0.5)
    with StandIn("leanexplore", rows, rate=server_rate).in_thread() as srv:
        summary, rep = crawl(mpr_url, {"leanexplore": srv}, rate=Rate(20, 0.5), limit=12)
        assert summary.results[0].answered_now == 12, rep.lines
        log = srv.stats.log
        limited = [e for e in log if e.get("status") == 429]
        assert limited, "the server never rate-limited: the test lost its teeth"
        for e in limited:
            later = [x["t"] for x in log if x["i"] > e["i"]]
            if later:  # Retry-After is at least 1 s (rounded up by the server)
                assert min(later) >= e["t"] + 1.0 - 0.01 or _sent_before_the_429_arrived(mpr_url, e["t"], later)
        assert any("Retry-After" in line for line in rep.lines)


def _sent_before_the_429_arrived(url: str, t429: float, later: list[float]) -> bool:
    """A request the crawler sent before the 429 reached it cannot be recalled: on a loaded
    machine it may reach the server just after the 429. Every request the crawler sent
    after it received a 429 must still wait out the Retry-After (the crawler's own times)."""
    db = open_database(url)
    try:
        with db.session() as s:
            rows = s.execute(sa.select(Exchange.status_code, Exchange.sent_at, Exchange.finished_at)
                             .order_by(Exchange.sent_at)).all()
    finally:
        db.dispose()
    ts = lambda d: d.replace(tzinfo=d.tzinfo or dt.timezone.utc).timestamp()  # noqa: E731
    got_429 = [ts(f) for code, _, f in rows if code == 429 and f is not None]
    received = min((f for f in got_429 if f >= t429 - 0.5), default=None)
    if received is None:
        return False
    early = [x for x in later if x < t429 + 1.0 - 0.01]
    sent_after = [ts(sent) for _, sent, _ in rows if ts(sent) > received]
    # the early arrivals were all sent before the 429 arrived, and nothing sent after it was early
    return len(early) <= len([ts(sent) for _, sent, _ in rows if t429 - 0.5 <= ts(sent) <= received]) and \
        all(t >= received + 1.0 - 0.01 for t in sent_after)


def test_circuit_breaker_stops_one_engine_others_continue(mpr_url: str, rows) -> None:
    with StandIn("leansearch", rows, rate=RATE, faults=FaultConfig(schema_drift=1.0)).in_thread() as bad, \
            StandIn("leanexplore", rows, rate=RATE).in_thread() as good:
        summary, rep = crawl(mpr_url, {"leansearch": bad, "leanexplore": good},
                             policy=RetryPolicy(max_attempts=3, backoff_initial=0.01, backoff_max=0.05,
                                                breaker_threshold=4))
        assert summary.exit_code == 4
        by = {r.engine: r for r in summary.results}
        assert by["leansearch"].stopped.startswith("broken")
        assert bad.stats.requests == 4  # stopped at exactly K consecutive failures
        assert by["leanexplore"].counts.pending == 0 and good.stats.requests == N_MPR
        assert sum("consecutive failed attempts" in line for line in rep.lines) == 1
        assert table_count(mpr_url, Answer, Answer.config_id == by["leansearch"].config_id) == 0


# ------------------------------------------------------- processes and CLI


def _wait_answers(url: str, n: int, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while table_count(url, Answer) < n:
        assert time.monotonic() - t0 < timeout, "crawler made no progress"
        time.sleep(0.05)


def test_sigkill_mid_crawl_then_restart_answers_everything_once(mpr_url: str, rows) -> None:
    # Half the stand-in's limit: the 69 texts take about 7 s, so the first crawler is still
    # running when the second starts, even on a loaded machine (Python start-up ~1-2 s).
    args = ("crawl", "leansearch", "--bench", "mathlibmpr", "--rate", "5/0.5s", "--backoff", "0.02", *MARGIN)
    with StandIn("leansearch", rows, rate=RATE, faults=FaultConfig(latency=0.01)).in_thread() as srv:
        args = (*args, "--url", f"leansearch={srv.url}")
        first = _cli(mpr_url, *args)
        try:
            _wait_answers(mpr_url, 20)
            # A second crawler on the same SQLite file is refused with one clear line.
            second = _cli(mpr_url, *args)
            out, err = second.communicate(timeout=60)
            assert second.returncode == 5, err
            assert "already crawling" in err and err.count("\n") == 1
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=10)
        killed_at = table_count(mpr_url, Answer)
        assert 20 <= killed_at < N_MPR
        restart = _cli(mpr_url, *args)
        out, err = restart.communicate(timeout=60)
        assert restart.returncode == 0, err
        assert_server_window(srv, RATE)  # across the kill and the restart
        db = open_database(mpr_url)
        try:
            with db.session() as s:
                shas = list(s.execute(sa.select(Answer.query_sha256)).scalars())
                n_ex = s.scalar(sa.select(sa.func.count()).select_from(Exchange))
        finally:
            db.dispose()
        assert len(shas) == len(set(shas)) == N_MPR  # every text answered exactly once
        # No exchange lost: at most the one request in flight at the kill is missing.
        assert srv.stats.requests - n_ex in (0, 1)
        assert srv.stats.requests <= N_MPR + 1  # nothing answered was sent again
        # The restart answered what the kill left (" 0 answered now" would also match "40 ...").
        assert not re.search(r"(?<!\d)0 answered now", err) and "exit 0" in err


@pytest.mark.postgres
def test_two_workers_on_postgres_split_work_without_duplicates(pg_url: str, rows) -> None:
    _load_mpr(pg_url)
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        args = ("crawl", "leanexplore", "--bench", "mathlibmpr", "--rate", "10/0.5s", *MARGIN,
                "--url", f"leanexplore={srv.url}")
        procs = [_cli(pg_url, *args) for _ in range(2)]
        outs = [p.communicate(timeout=90) for p in procs]
        for p, (_, err) in zip(procs, outs):
            assert p.returncode == 0, err
        # One pacing budget for both processes: zero violations from the server's side.
        assert_server_window(srv, RATE)
        assert srv.stats.requests == N_MPR  # no text sent twice
        db = open_database(pg_url)
        try:
            with db.session() as s:
                per_crawl = dict(s.execute(
                    sa.select(Exchange.crawl_id, sa.func.count()).group_by(Exchange.crawl_id)).all())
                shas = list(s.execute(sa.select(Answer.query_sha256)).scalars())
                sends = list(s.execute(sa.select(SendLog.sent_at)).scalars())
        finally:
            db.dispose()
        assert len(shas) == len(set(shas)) == N_MPR
        assert len(per_crawl) == 2 and all(v > 0 for v in per_crawl.values()), per_crawl
        # The shared log itself: any n + 1 consecutive sends (both workers) span T + margin.
        sends.sort()
        assert min(b - a for a, b in zip(sends, sends[RATE.n:])) >= RATE.period + MARGIN_S - 1e-6
        assert max_in_window(sends, RATE.period) <= RATE.n


def test_status_and_readonly_sql(mpr_url: str, rows) -> None:
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        crawl(mpr_url, {"leanexplore": srv}, limit=4)
    runner = CliRunner()
    env = {"ENGINES_DATABASE_URL": mpr_url}
    res = runner.invoke(app, ["status", "--bench", "mathlibmpr"], env=env)
    assert res.exit_code == 0, res.output
    assert "4/69" in res.stdout and "65" in res.stdout
    res = runner.invoke(app, ["sql", "--tsv", "SELECT engine, count(*) AS n FROM v_answers GROUP BY engine"], env=env)
    assert res.exit_code == 0 and res.stdout.splitlines() == ["engine\tn", "leanexplore\t4"]
    res = runner.invoke(app, ["sql", "DELETE FROM answers"], env=env)
    assert res.exit_code == 2 and res.stderr.startswith("engines sql: refused: DELETE is not a query")
    assert table_count(mpr_url, Answer) == 4
    res = runner.invoke(app, ["sql", "SELECT * FROM nonsense"], env=env)
    assert res.exit_code == 1 and res.stderr.startswith("error: SQL error")
    res = runner.invoke(app, ["sql", "SELECT 1; DELETE FROM answers"], env=env)
    assert res.exit_code == 2 and "one statement only" in res.stderr
    res = runner.invoke(app, ["sql", "--tsv", "SELECT ';' AS s;"], env=env)
    assert res.exit_code == 0 and res.stdout.splitlines() == ["s", ";"]


@pytest.mark.postgres
def test_sql_is_read_only_on_postgres(pg_url: str) -> None:
    _load_mpr(pg_url)
    runner = CliRunner()
    env = {"ENGINES_DATABASE_URL": pg_url}
    res = runner.invoke(app, ["sql", "DELETE FROM queries"], env=env)
    assert res.exit_code == 2 and res.stderr.startswith("engines sql: refused: DELETE is not a query")
    res = runner.invoke(app, ["sql", "COMMIT; DELETE FROM queries"], env=env)
    assert res.exit_code == 2
    res = runner.invoke(app, ["sql", "--tsv", "SELECT count(*) AS n FROM queries"], env=env)
    assert res.exit_code == 0 and res.stdout.splitlines() == ["n", "138"]


def test_deadline_stops_with_work_remaining_and_all_styles(mpr_url: str, rows) -> None:
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        t0 = time.monotonic()
        summary, _ = crawl(mpr_url, {"leanexplore": srv}, deadline=1.0, all_styles=True)
        took = time.monotonic() - t0
    res = summary.results[0]
    assert summary.exit_code == 3 and res.stopped == "deadline"
    assert res.counts.total == 2 * N_MPR  # --all-styles adds the formal statements
    assert 0 < res.counts.answered < 2 * N_MPR and took < 3.0
    assert table_count(mpr_url, WorkLease, WorkLease.leased_until > 0) == 0  # claims released


def test_archived_but_unparsed_response_is_recovered_without_network(mpr_url: str, rows) -> None:
    """A kill between 'exchange committed' and 'answer written' loses nothing: the next
    run parses the archived bytes instead of sending the query again."""
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        crawl(mpr_url, {"leanexplore": srv}, limit=3)
        db = open_database(mpr_url)
        try:
            with db.session() as s, s.begin():
                ans = s.execute(sa.select(Answer).order_by(Answer.id)).scalars().first()
                ex_id, sha = ans.exchange_id, ans.query_sha256
                s.execute(sa.delete(ParseOutcome).where(ParseOutcome.exchange_id == ex_id))
                s.delete(ans)  # as if the process died right after archiving the exchange
        finally:
            db.dispose()
        before = srv.stats.requests
        summary, rep = crawl(mpr_url, {"leanexplore": srv}, limit=1)
        assert summary.results[0].recovered == 1
        assert srv.stats.requests == before + 1  # only the one new text went out
        db = open_database(mpr_url)
        try:
            with db.session() as s:
                again = s.execute(sa.select(Answer).where(Answer.query_sha256 == sha)).scalar_one()
                assert again.exchange_id == ex_id and again.n_returned > 0
        finally:
            db.dispose()
        assert table_count(mpr_url, Answer) == 4  # 3 - 1 lost + 1 recovered + 1 new


# ------------------------------------------- leases, send-time correction, redaction


def _engine(url: str, srv: StandIn, worker: str, lease_ttl: float):
    """The crawl run's own per-engine setup (adapter, config, epoch, seeded lease queue)."""
    db = open_database(url)
    opts = CrawlOptions(engines=["leanexplore"], bench="mathlibmpr", urls={"leanexplore": srv.url},
                        lease_ttl=lease_ttl)
    eng = crawl_engines(db, opts, worker)[0]
    eng.queue.seed()
    return db, eng


def _fetcher(db, eng, client, pacer, **kw) -> Fetcher:
    return Fetcher(db, eng.adapter, client, pacer, config_id=eng.config_id, epoch=eng.epoch, crawl_id=None,
                   policy=RetryPolicy(backoff_initial=0.02, backoff_max=0.2), **kw)


async def test_lease_renewed_after_pacer_wait_and_answered_text_not_resent(pg_url: str, rows) -> None:
    """A fetch that outlives its lease (here: a pacer wait longer than the TTL) renews it
    before sending, so a second PostgreSQL worker cannot claim the text; and a text the
    other worker answered meanwhile is dropped before the send, not sent twice."""
    _load_mpr(pg_url)
    ttl = 1.0
    with StandIn("leanexplore", rows).in_thread() as srv:
        db_a, a = _engine(pg_url, srv, "worker-a", ttl)
        db_b, b = _engine(pg_url, srv, "worker-b", ttl)
        try:
            async with httpx.AsyncClient(trust_env=False) as client:
                # 1. The pacer makes A wait 1.3 s (> TTL) for its slot: the lease expires meanwhile.
                host = a.adapter.host
                seen_by_b: list[list] = []

                def keep_then_b_claims(shas: list[str]) -> list[str]:
                    keep = a.queue.keep_due(shas)
                    seen_by_b.append(b.queue.claim(5))  # B competes right after A's grant
                    return keep

                items = a.queue.claim(1)
                assert len(items) == 1
                sha = items[0][0]
                # The last send is "now", after the claim: the 1.3 s wait starts after the lease
                # did, however long the claim took on a busy machine.
                t0 = time.time()
                pacer = Pacer(host, Rate(1, 1.3), MemoryLedger({host: [t0]}), margin=0.0)
                out = await _fetcher(db_a, a, client, pacer, before_send=keep_then_b_claims).fetch(items)
                assert time.time() - t0 >= ttl  # the wait really outlived the lease
                assert out.answered == [sha] and out.skipped == []
                # Checked before the slot and again after the long wait (the wait outlived the
                # lease): B claims right after each check and never gets A's text.
                assert len(seen_by_b) == 2 and all(seen_by_b)
                assert all(sha not in [s for s, _ in claimed] for claimed in seen_by_b)  # renewed

                # 2. A claims a text, its lease lapses, B claims and answers it; A's fetch sends nothing.
                b.queue.release()
                items = a.queue.claim(1)
                sha2 = items[0][0]
                await asyncio.sleep(ttl + 0.1)
                taken = b.queue.claim(1)
                assert [s for s, _ in taken] == [sha2]
                fast = Pacer(host, Rate(100, 1.0), MemoryLedger(), margin=0.0)
                out_b = await _fetcher(db_b, b, client, fast).fetch(taken)
                assert out_b.answered == [sha2]
                before = srv.stats.requests
                out_a = await _fetcher(db_a, a, client, fast, before_send=a.queue.keep_due).fetch(items)
                assert out_a.skipped == [sha2] and out_a.answered == []
                assert srv.stats.requests == before  # nothing left to send: no request
            with db_a.session() as s:
                n_answers = s.scalar(sa.select(sa.func.count()).select_from(Answer)
                                     .where(Answer.query_sha256 == sha2))
                sent = [t for (t,) in s.execute(sa.select(Exchange.query_texts)).all()]
            assert n_answers == 1
            assert sum(items[0][1] in t for t in sent) == 1  # sent once, by B
        finally:
            db_a.dispose()
            db_b.dispose()


class _LateClock:
    """Grants 50 ms in the past, so every send leaves measurably after its recorded grant."""

    def now(self) -> float:
        return time.time() - 0.05

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _TimedLedger(SharedSqlLedger):
    def __init__(self, db) -> None:
        super().__init__(db)
        self.corrected_at: list[float] = []

    def write_departures(self, host: str) -> int:
        n = super().write_departures(host)
        if n:
            self.corrected_at.append(time.time())
        return n


async def test_send_time_correction_lands_before_the_response(mpr_url: str, rows) -> None:
    """Other workers read send_log while a request is in flight: the departure time must be
    in the shared log before the (here 0.4 s slow) response arrives, not after it."""
    with StandIn("leanexplore", rows, faults=FaultConfig(latency=0.4)).in_thread() as srv:
        db, eng = _engine(mpr_url, srv, "worker-a", 900.0)
        try:
            ledger = _TimedLedger(db)
            pacer = Pacer(eng.adapter.host, Rate(100, 1.0), ledger, margin=0.0, clock=_LateClock())
            responses: list[float] = []

            async def on_response(_r: httpx.Response) -> None:
                responses.append(time.time())

            async with httpx.AsyncClient(trust_env=False, event_hooks={"response": [on_response]}) as client:
                items = eng.queue.claim(1)
                out = await _fetcher(db, eng, client, pacer).fetch(items)
            assert out.answered == [items[0][0]]
            assert len(ledger.corrected_at) == 1 and len(responses) == 1
            assert ledger.corrected_at[0] < responses[0]
            [logged] = ledger.history(eng.adapter.host, 0.0)
            with db.session() as s:
                sent_at = s.scalar(sa.select(Exchange.sent_at)).timestamp()
            assert logged >= sent_at  # the departure, not the grant (50 ms before it)
        finally:
            db.dispose()


def test_userinfo_and_secret_query_values_never_archived(mpr_url: str, rows) -> None:
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        url = srv.url.replace("http://", "http://crawler:pw-s3cret@")
        db = open_database(mpr_url)
        try:
            opts = CrawlOptions(engines=["leanexplore"], bench="mathlibmpr", rates={"*": RATE},
                                urls={"leanexplore": url}, limit=1, margin=MARGIN_S)
            summary = run_crawl(db, opts, Quiet())
            assert summary.results[0].answered_now == 1
            with db.session() as s:
                [(archived, headers)] = s.execute(sa.select(Exchange.url, Exchange.request_headers)).all()
                [(params, label)] = s.execute(sa.select(EngineConfig.params, EngineConfig.label)).all()
        finally:
            db.dispose()
    assert archived.startswith(srv.root_url) and "s3cret" not in archived and "crawler" not in archived
    assert "s3cret" not in json.dumps(headers)
    # The configuration (stored params, label shown in tables and reports) has no credentials either.
    assert params["base_url"] == srv.url and "s3cret" not in label
