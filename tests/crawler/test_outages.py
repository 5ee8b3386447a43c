"""Outages, pauses, exit codes, keys over TLS and `engines reparse`, against stand-ins over
real loopback sockets, on a SQLite file and the real PostgreSQL (issue 11).

Times are scaled: outage backoff starts at 50 ms instead of 30 s; a "long" Retry-After
is a real 400 s, but no test waits for it (the run stops, or the test moves the pause).
"""

from __future__ import annotations

import hashlib
import signal
import time

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from crawler.fetch import RetryPolicy
from crawler.crawl import check_secrets_over_tls, summary_lines
from engines.base import EngineParseError, HitList, Rate
from cli.main import app
from engines.emulate import FaultConfig, StandIn
from engines.emulate.apis import Reply, jreply
from engines.leanexplore import LeanExploreAdapter
from store.db import open_database
from store.errors import InputError
from store.models import Answer, Crawl, EngineConfig, Exchange, HostState, ParseOutcome, Position, WorkLease
from tests.support.crawl import (  # noqa: F401  (fixtures)
    MARGIN, MARGIN_S, N_MPR, RATE, _cli, _load_mpr, assert_send_log_window, assert_server_window, crawl, mpr_url,
    rows, table_count,
)

UNPACED = Rate(1000, 1.0)  # where pacing is not what a test checks
FAST = RetryPolicy(backoff_initial=0.02, backoff_max=0.2, outage_initial=0.05, outage_max=0.2)
runner = CliRunner()


class Scripted(StandIn):
    """A stand-in whose request number i (0-based arrivals) gets ``replies[i]`` when given."""

    def __init__(self, *args, replies: dict[int, Reply] | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self.replies = replies or {}

    async def _respond(self, req, arrival):
        i = self.stats.requests
        if i not in self.replies:
            return await super()._respond(req, arrival)
        reply = self.replies[i]
        st = self.stats
        st.requests += 1
        st.receive_times.append(arrival)
        st.statuses[reply.status] += 1
        st.log.append({"i": i, "t": arrival, "method": req.method, "path": req.path, "fault": "scripted",
                       "status": reply.status})
        return reply


def _host_state(url: str, host: str):
    db = open_database(url)
    try:
        with db.session() as s:
            return s.execute(sa.select(HostState).where(HostState.host == host)).scalar_one_or_none()
    finally:
        db.dispose()


def _host(srv: StandIn) -> str:
    return srv.url.split("/")[2]


# ------------------------------------------------------------------ permanent 4xx


def test_permanent_4xx_is_recorded_not_retried_then_retry_failed(mpr_url: str, rows) -> None:
    not_found = {i: jreply(404, {"detail": "Not Found"}) for i in range(3)}
    with Scripted("leanexplore", rows, rate=RATE, replies=not_found).in_thread() as srv:
        summary, rep = crawl(mpr_url, {"leanexplore": srv}, limit=5)
        res = summary.results[0]
        assert srv.stats.requests == 5  # the three 404s were not retried
        assert res.failed_now == 3 and res.answered_now == 2
        assert res.counts.failed == 3
        assert table_count(mpr_url, WorkLease, WorkLease.status == "failed") == 3
        # Failed texts are not due any more; --retry-failed sends them again.
        summary2, _ = crawl(mpr_url, {"leanexplore": srv}, limit=3, retry_failed=True)
        assert summary2.results[0].answered_now == 3
        assert table_count(mpr_url, WorkLease, WorkLease.status == "failed") == 0


# ------------------------------------------------------------------------ outages


# What the stand-ins of the maintenance test enforce: the crawler's rate with its margin as
# headroom (10 per 0.25 s against the crawler's 10 per 0.5 s + 0.25 s). This test is about
# outages; pacing through them is checked exactly on the crawler's own send log. Next to
# two CPU burners the in-process stand-ins (two of them and the crawler in one process)
# twice timed an arrival late enough to count 11 in 0.5 s, though the sends were spaced
# (stop 28 run 3, margin 150 ms; stop 29, margin 250 ms).
MAINTENANCE_SERVER_RATE = Rate(RATE.n, RATE.period - MARGIN_S)


def test_maintenance_pauses_the_host_then_recovers_others_go_on(any_db_url: str, rows) -> None:
    """Four 405 maintenance answers, then the service is back: nothing failed, the pauses
    grew (50, 100, 200, 200 ms: capped), the other engine kept going, exit 0; every n + 1
    sends to each host span T + margin in the crawler's send log, through the outage."""
    _load_mpr(any_db_url)
    with StandIn("leansearch", rows, rate=MAINTENANCE_SERVER_RATE,
                 faults=FaultConfig(maintenance=(0, 4))).in_thread() as down, \
            StandIn("leanexplore", rows, rate=MAINTENANCE_SERVER_RATE).in_thread() as up:
        summary, rep = crawl(any_db_url, {"leansearch": down, "leanexplore": up}, policy=FAST)
        assert summary.exit_code == 0, rep.lines
        by = {r.engine: r for r in summary.results}
        assert by["leansearch"].counts.failed == 0 and by["leansearch"].counts.answered == N_MPR
        assert by["leansearch"].failed_now == 0 and by["leansearch"].outages == 4
        assert down.stats.statuses[405] == 4 and down.stats.requests == N_MPR + 4
        assert up.stats.requests == N_MPR
        for srv in (down, up):
            assert_server_window(srv, MAINTENANCE_SERVER_RATE)
            assert len(assert_send_log_window(any_db_url, _host(srv), RATE)) == srv.stats.requests
        t = [e["t"] for e in down.stats.log]
        gaps = [b - a for a, b in zip(t[:5], t[1:5])]
        for gap, pause in zip(gaps, (0.05, 0.1, 0.2, 0.2)):
            assert gap >= pause - 0.005, gaps
        outage = (t[0], t[4])
        assert sum(outage[0] < e["t"] < outage[1] for e in up.stats.log) >= 3  # the other engine went on
        assert table_count(any_db_url, WorkLease, WorkLease.status == "failed") == 0
        state = _host_state(any_db_url, _host(down))
        assert state.outage_since is None and state.outage_count == 0  # cleared by the first good answer
        assert sum("outage since" in line for line in rep.lines) == 4


def test_outage_outlasting_the_deadline_exits_3_and_status_shows_it(mpr_url: str, rows) -> None:
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        srv.maintenance = True
        policy = RetryPolicy(backoff_initial=0.02, outage_initial=120.0, outage_max=600.0)
        t0 = time.monotonic()
        summary, rep = crawl(mpr_url, {"leanexplore": srv}, deadline=1.0, policy=policy)
        # Stopped at once: the next try (120 s away) is past the deadline. Waiting for it would
        # take 120 s; the bound is far from any machine's load.
        assert time.monotonic() - t0 < 60.0
        res = summary.results[0]
        assert summary.exit_code == 3 and res.stopped == "outage"
        assert srv.stats.requests == 1
        assert res.counts.failed == 0 and res.counts.pending == N_MPR
        assert res.stop_line.startswith("error: leanexplore: outage since ") and "next try" in res.stop_line
        assert res.stop_line in summary_lines(summary)
        state = _host_state(mpr_url, _host(srv))
        assert state.outage_count == 1 and "HTTP 405" in state.outage_reason
        assert state.paused_until >= state.outage_since + 3.0
        out = runner.invoke(app, ["status", "--bench", "mathlibmpr"], env={"ENGINES_DATABASE_URL": mpr_url})
        assert out.exit_code == 0, out.output
        hhmm = time.strftime("%H:%M", time.gmtime(state.outage_since))
        nxt = time.strftime("%H:%M", time.gmtime(state.paused_until))
        assert f"leanexplore: outage since {hhmm}, next try {nxt}" in out.stdout


# -------------------------------------------------------------- long Retry-After


def test_long_retry_after_is_kept_across_a_kill(any_db_url: str, rows) -> None:
    """A 429 with Retry-After 400 s: the crawler waits (within its 30 min cap); kill it;
    a restart whose deadline comes before the pause ends sends nothing and says until when; so does `engines status`;
    once the pause is over (moved into the past here) the crawl resumes."""
    _load_mpr(any_db_url)
    slow_down = {0: Reply(429, b'{"detail": "Rate limit exceeded"}', headers={"Retry-After": "400"})}
    with Scripted("leanexplore", rows, rate=RATE, replies=slow_down).in_thread() as srv:
        host = _host(srv)
        args = ("crawl", "leanexplore", "--bench", "mathlibmpr", "--rate", "10/0.5s", *MARGIN,
                "--url", f"leanexplore={srv.url}")
        first = _cli(any_db_url, *args)
        try:
            t0 = time.monotonic()
            while (st := _host_state(any_db_url, host)) is None or st.paused_until is None:
                assert time.monotonic() - t0 < 30, "the 429 never paused the host"
                time.sleep(0.05)
            time.sleep(0.3)  # the crawler is now waiting for the pause
            assert first.poll() is None
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=10)
        assert srv.stats.requests == 1
        assert st.paused_until >= time.time() + 390
        again = _cli(any_db_url, *args, "--deadline", "2m")  # the pause ends after it
        _, err = again.communicate(timeout=60)
        assert again.returncode == 3, err
        until = time.strftime("%H:%M", time.gmtime(st.paused_until))
        assert err.count(f"error: leanexplore: paused until {until} UTC") == 1
        assert srv.stats.requests == 1  # nothing sent inside the pause
        out = runner.invoke(app, ["status", "--bench", "mathlibmpr"], env={"ENGINES_DATABASE_URL": any_db_url})
        assert f"leanexplore: paused until {until}" in out.stdout
        # Without a deadline, a pause longer than --max-pause stops the engine the same way.
        capped = runner.invoke(app, [*args, "--max-pause", "5m"], env={"ENGINES_DATABASE_URL": any_db_url})
        assert capped.exit_code == 3 and capped.stderr.count(f"error: leanexplore: paused until {until}") == 1
        assert srv.stats.requests == 1
        db = open_database(any_db_url)
        try:
            with db.session() as s, s.begin():
                s.execute(sa.update(HostState).where(HostState.host == host).values(paused_until=time.time() - 1))
        finally:
            db.dispose()
        summary, rep = crawl(any_db_url, {"leanexplore": srv}, limit=3)
        assert summary.results[0].answered_now == 3 and srv.stats.requests == 4, rep.lines


def test_retry_after_past_the_deadline_stops_that_engine_only(mpr_url: str, rows) -> None:
    slow_down = {0: Reply(429, b'{"detail": "Rate limit exceeded"}', headers={"Retry-After": "400"})}
    with Scripted("leanexplore", rows, rate=RATE, replies=slow_down).in_thread() as paused, \
            StandIn("leansearch", rows, rate=RATE).in_thread() as fine:
        summary, rep = crawl(mpr_url, {"leanexplore": paused, "leansearch": fine}, policy=FAST, deadline=30.0,
                             limit=10)
        by = {r.engine: r for r in summary.results}
        assert summary.exit_code == 3
        assert by["leanexplore"].stopped == "paused" and paused.stats.requests == 1
        assert by["leanexplore"].counts.failed == 0
        assert by["leansearch"].answered_now == 10 and by["leansearch"].stopped == "limit"  # it went on
        assert by["leanexplore"].stop_line.startswith("error: leanexplore: paused until")
        assert by["leanexplore"].stop_line in summary_lines(summary)


# --------------------------------------------------------------------- keys over TLS


def test_key_never_sent_over_plain_http(mpr_url: str, monkeypatch) -> None:
    monkeypatch.setenv("ENGINES_LEANEXPLORE_API_KEY", "k-123")
    env = {"ENGINES_DATABASE_URL": mpr_url, "ENGINES_LEANEXPLORE_API_KEY": "k-123"}
    res = runner.invoke(app, ["crawl", "leanexplore", "--bench", "mathlibmpr",
                              "--url", "leanexplore=http://www.leanexplore.com/api/v2"], env=env)
    assert res.exit_code == 1
    assert res.stderr.startswith("error: leanexplore: refusing to send a credential (ENGINES_LEANEXPLORE_API_KEY)")
    assert res.stderr.count("\n") == 1 and "k-123" not in res.output
    assert table_count(mpr_url, EngineConfig) == 0 and table_count(mpr_url, Exchange) == 0
    assert table_count(mpr_url, Crawl, Crawl.status == "done") == 0
    # Over TLS, or over http to loopback, or with no key sent at all: allowed.
    check_secrets_over_tls(LeanExploreAdapter("https://www.leanexplore.com/api/v2"))
    check_secrets_over_tls(LeanExploreAdapter("http://127.0.0.1:9/api/v2"))
    check_secrets_over_tls(LeanExploreAdapter("http://mirror.example/api/v2"))  # the key goes to its own host only
    with pytest.raises(InputError, match="user:password"):
        check_secrets_over_tls(LeanExploreAdapter("http://me:pw@mirror.example/api/v2"))
    check_secrets_over_tls(LeanExploreAdapter("https://me:pw@mirror.example/api/v2"))


# ------------------------------------------------------------------------- reparse


def _rejected(text: str) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest()[:2], 16) % 4 == 0


class StrictExplore(LeanExploreAdapter):
    """A deliberately strict parser: rejects about a quarter of the bodies, keeps 5 hits."""

    parser_version = 1000

    def parse(self, texts, status_code, headers, body):
        lists = super().parse(texts, status_code, headers, body)
        if _rejected(texts[0]):
            raise EngineParseError("strict: body rejected")
        return [list(h)[:5] for h in lists]


class TolerantExplore(LeanExploreAdapter):
    """The fixed parser: every body, every hit, except the item at rank 3 (dropped, counted)."""

    parser_version = 1001

    def parse(self, texts, status_code, headers, body):
        out = []
        for hits in super().parse(texts, status_code, headers, body):
            kept = HitList([h for h in hits if h.rank != 3])
            if len(kept) < len(hits):
                kept.drop("test: item 3 has no Lean name")
            out.append(kept)
        return out


def _score(url: str) -> tuple[int, dict]:
    """(queries without an answer, every metric's mean) of the one system, from the scorer."""
    from scoring.results import score

    db = open_database(url)
    try:
        [system] = score(db, "mathlibmpr", resamples=10).systems
        return system.unanswered, {k: v["value"] for k, v in system.metrics.items() if v["value"] is not None}
    finally:
        db.dispose()


def test_reparse_round_trip_no_network(any_db_url: str, monkeypatch) -> None:
    from benchmarks import SLICE_CORPUS, SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION
    from engines import registry
    from store.corpus import load_corpus

    _load_mpr(any_db_url)
    db = open_database(any_db_url)
    try:
        load_corpus(db, str(SLICE_CORPUS), name=SLICE_CORPUS_NAME, revision=SLICE_CORPUS_REVISION)
    finally:
        db.dispose()
    env = {"ENGINES_DATABASE_URL": any_db_url}
    strict = RetryPolicy(max_attempts=1, backoff_initial=0.02, breaker_threshold=10_000)
    with StandIn("leanexplore", SLICE_CORPUS).in_thread() as srv:  # pacing is not under test here
        monkeypatch.setitem(registry.ENGINES, "leanexplore", StrictExplore)
        summary, rep = crawl(any_db_url, {"leanexplore": srv}, policy=strict, rate=UNPACED)
        res = summary.results[0]
        n_bad = res.exhausted
        assert 5 <= n_bad <= 35 and summary.exit_code == 3, rep.lines  # rejected texts stay due
        assert res.counts.answered == N_MPR - n_bad
        before = _score(any_db_url)
        assert before[0] > 0  # the scorer sees queries left unanswered by the strict parser
        sent = srv.stats.requests
        assert sent == N_MPR

        monkeypatch.setitem(registry.ENGINES, "leanexplore", TolerantExplore)
        counts = (table_count(any_db_url, ParseOutcome), table_count(any_db_url, Answer))
        dry = runner.invoke(app, ["reparse", "--dry-run"], env=env)
        assert dry.exit_code == 0, dry.output
        assert (table_count(any_db_url, ParseOutcome), table_count(any_db_url, Answer)) == counts
        out = runner.invoke(app, ["reparse", "leanexplore"], env=env)
        assert out.exit_code == 0, out.output
        expected = (f"{N_MPR} exchanges re-parsed with parser v1001, {n_bad} newly parsed, 0 newly failed, "
                    f"{N_MPR - n_bad} answers changed, {n_bad} texts answered without a send")
        assert expected in out.stdout, out.stdout
        print(out.stdout + out.stderr)  # for the closing note (pytest -s)
        assert f"{N_MPR} items dropped" in out.stdout
        assert dry.stdout == out.stdout  # the dry run counted exactly what the real one did
        assert "exchanges/s" in out.stderr
        assert srv.stats.requests == sent  # no network

        # Old answers stay, superseded; one current answer per text, under the new version.
        assert table_count(any_db_url, Answer, Answer.superseded.is_(True)) == N_MPR - n_bad
        assert table_count(any_db_url, Answer, ~Answer.superseded, Answer.parser_version == 1001) == N_MPR
        assert table_count(any_db_url, WorkLease) == 0
        db = open_database(any_db_url)
        try:
            with db.engine.connect() as conn:
                ranks = conn.exec_driver_sql(
                    "SELECT rank FROM v_hits WHERE epoch = 0 AND query_id = "
                    "(SELECT min(query_id) FROM v_hits) ORDER BY rank").scalars().all()
                assert ranks[:4] == [1, 2, 4, 5]  # the dropped item's rank stays empty
                assert conn.exec_driver_sql("SELECT count(*) FROM v_answers").scalar() == N_MPR
        finally:
            db.dispose()
        after = _score(any_db_url)
        assert after[0] == 0 and after[1] != before[1] and before[1]
        assert table_count(any_db_url, Position) > 0

        # Twice: nothing left to do. The next crawl sends nothing.
        again = runner.invoke(app, ["reparse"], env=env)
        assert "0 exchanges re-parsed" in again.stdout
        summary2, _ = crawl(any_db_url, {"leanexplore": srv}, rate=UNPACED)
        assert summary2.exit_code == 0 and srv.stats.requests == sent
        status = runner.invoke(app, ["status", "--bench", "mathlibmpr"], env=env)
        assert f"{N_MPR} item(s) dropped by the parser in {N_MPR} answer(s)" in status.stdout


def test_reparse_rejecting_parser_makes_texts_due_and_unknown_engine_is_one_line(mpr_url: str, rows,
                                                                                 monkeypatch) -> None:
    from engines import registry

    env = {"ENGINES_DATABASE_URL": mpr_url}
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        crawl(mpr_url, {"leanexplore": srv}, limit=8)
    monkeypatch.setitem(registry.ENGINES, "leanexplore", StrictExplore)
    out = runner.invoke(app, ["reparse"], env=env)
    assert out.exit_code == 0, out.output
    n_bad = sum(_rejected(t) for (t,) in _texts(mpr_url))
    assert f"{n_bad} newly failed" in out.stdout and f"{8 - n_bad} answers changed" in out.stdout
    assert table_count(mpr_url, Answer, ~Answer.superseded) == 8 - n_bad
    bad = runner.invoke(app, ["reparse", "bing"], env=env)
    assert bad.exit_code == 1 and bad.stderr.startswith("error: unknown engine 'bing'") and bad.stderr.count("\n") == 1


def _texts(url: str):
    db = open_database(url)
    try:
        with db.session() as s:
            return [(t[0],) for t in s.execute(sa.select(Exchange.query_texts)).scalars()]
    finally:
        db.dispose()


class _Killed(BaseException):
    """Stands in for the process dying mid-batch (not an error the code could handle)."""


def test_reparse_killed_mid_batch_loses_nothing_and_mixes_no_versions(any_db_url: str, rows, monkeypatch) -> None:
    from archive.reparse import reparse
    from engines import registry

    _load_mpr(any_db_url)
    with StandIn("leanexplore", rows).in_thread() as srv:
        crawl(any_db_url, {"leanexplore": srv}, limit=20, rate=UNPACED)
    calls = {"n": 0}

    class DiesAt12(TolerantExplore):
        def parse(self, texts, status_code, headers, body):
            calls["n"] += 1
            if calls["n"] == 12:
                raise _Killed()
            return super().parse(texts, status_code, headers, body)

    monkeypatch.setitem(registry.ENGINES, "leanexplore", DiesAt12)
    db = open_database(any_db_url)
    try:
        with pytest.raises(_Killed):
            reparse(db, batch=5)
        # Two whole batches landed, the third left no trace.
        assert table_count(any_db_url, ParseOutcome, ParseOutcome.parser_version == 1001) == 10
        with db.session() as s:
            latest = dict(s.execute(
                sa.select(ParseOutcome.exchange_id, sa.func.max(ParseOutcome.parser_version))
                .group_by(ParseOutcome.exchange_id)).all())
            current = s.execute(sa.select(Answer.exchange_id, Answer.parser_version).where(~Answer.superseded)).all()
        assert len(current) == 20
        for ex_id, version in current:
            assert version == latest[ex_id]  # never an old answer beside a new outcome, or the reverse
        again = reparse(db, batch=5)
        assert again.results[0].exchanges == 10 and again.results[0].changed == 10
        assert table_count(any_db_url, Answer, ~Answer.superseded, Answer.parser_version == 1001) == 20
        assert table_count(any_db_url, Answer, Answer.superseded.is_(True)) == 20
    finally:
        db.dispose()


def test_crawl_stores_drop_counts_and_in_band_outage_from_the_parser(mpr_url: str, rows, monkeypatch) -> None:
    from engines import registry
    from engines.base import EngineOutage

    seen = {"n": 0}

    class RestartsTwice(TolerantExplore):
        def parse(self, texts, status_code, headers, body):
            seen["n"] += 1
            if seen["n"] <= 2:
                raise EngineOutage("leanexplore: backend restarting")
            return super().parse(texts, status_code, headers, body)

    monkeypatch.setitem(registry.ENGINES, "leanexplore", RestartsTwice)
    with StandIn("leanexplore", rows, rate=RATE).in_thread() as srv:
        summary, rep = crawl(mpr_url, {"leanexplore": srv}, limit=3, policy=FAST)
    res = summary.results[0]
    assert res.answered_now == 3 and res.failed_now == 0 and res.outages == 2 and srv.stats.requests == 5
    db = open_database(mpr_url)
    try:
        with db.session() as s:
            outcomes = s.execute(sa.select(ParseOutcome.ok, ParseOutcome.error, ParseOutcome.dropped_items,
                                           ParseOutcome.drop_reason).order_by(ParseOutcome.id)).all()
            drops = list(s.execute(sa.select(Answer.dropped_items)).scalars())
    finally:
        db.dispose()
    assert [o.ok for o in outcomes] == [False, False, True, True, True]
    assert outcomes[0].error == "outage: leanexplore: backend restarting"
    assert [(o.dropped_items, o.drop_reason) for o in outcomes[2:]] == [(1, "test: item 3 has no Lean name")] * 3
    assert drops == [1, 1, 1]
    assert table_count(mpr_url, WorkLease, WorkLease.status == "failed") == 0


# ------------------------------------------------------------ outages and long pauses


def test_outage_backoff_grows_is_capped_and_cleared_on_both_ledgers(any_db) -> None:
    from crawler.pacing import DbLedger, MemoryLedger, outage_backoff

    assert [outage_backoff(c, 30.0, 1800.0, 0.0) for c in (1, 2, 3, 7, 8, 60)] == [30, 60, 120, 1800, 1800, 1800]
    assert outage_backoff(1, 30.0, 1800.0, 0.999) == pytest.approx(30 * 1.24975)
    assert outage_backoff(7, 30.0, 1800.0, 0.999) == 1800.0  # the cap holds after the jitter
    for ledger in (MemoryLedger(), DbLedger(any_db)):
        now = 1_000.0
        assert ledger.outage("h", "HTTP 405", now, 30.0, 100.0, 0.0) == (1_030.0, now, 1)
        assert ledger.outage("h", "HTTP 502", now + 30, 30.0, 100.0, 0.0) == (1_090.0, now, 2)
        assert ledger.outage("h", "HTTP 502", now + 90, 30.0, 100.0, 0.0) == (1_190.0, now, 3)  # capped at 100
        assert ledger.paused_until("h") == 1_190.0
        ledger.clear_outage("h")
        assert ledger.outage("h", "HTTP 405", 2_000.0, 30.0, 100.0, 0.0) == (2_030.0, 2_000.0, 1)  # a new outage
        # A longer pause already in place (a Retry-After) is never shortened.
        ledger.pause("h", 5_000.0)
        assert ledger.outage("h", "HTTP 405", 2_100.0, 30.0, 100.0, 0.0)[0] == 5_000.0


async def test_pause_longer_than_max_wait_or_past_deadline_raises_with_until() -> None:
    from crawler.pacing import DeadlineReached, MemoryLedger, Pacer
    from engines.base import Rate
    from tests.support.pacing import FakeClock

    clock = FakeClock(100.0)
    ledger = MemoryLedger()
    ledger.pause("h", 500.0)
    with pytest.raises(DeadlineReached) as exc:
        await Pacer("h", Rate(3, 30.0), ledger, clock=clock, max_wait=300.0).acquire()
    assert exc.value.until == 500.0 and clock.now() == 100.0  # no waiting at all
    with pytest.raises(DeadlineReached) as exc:
        await Pacer("h", Rate(3, 30.0), ledger, clock=clock, max_wait=1800.0, deadline=400.0).acquire()
    assert exc.value.until == 500.0
    assert await Pacer("h", Rate(3, 30.0), ledger, clock=clock, max_wait=1800.0).acquire() == 500.0
    assert clock.now() == 500.0  # waited out: within max_wait, no deadline
