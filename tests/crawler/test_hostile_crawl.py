"""Issue 21, the crawl: nothing a server sends stops the crawl, loses the exchange or
blocks a later run; size and time bounded; Retry-After untrusted; remote text escaped;
credentials in --url never stored. Each hostile server is built here (tests/support/hostile.py,
real loopback sockets); after each case a crawl against the healed server answers.
Bounds are checked by counting bytes, never by the clock.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import zlib
import io
import json
import math
import time

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from crawler.fetch import RETRY_AFTER_MAX, RetryPolicy, parse_retry_after
from crawler.crawl import CrawlOptions, Reporter, run_crawl
from engines.base import Rate
from cli.main import app
from store.benchmarks import load_benchmark_file
from store.corpus import load_corpus
from store.db import open_database
from store.models import Answer, Exchange, Hit, HostState, ParseOutcome, SendLog
from store.text import clean_json, escaped, utc_clock
from tests.support.hostile import Hostile, healthy, loogle_body, response

RATE = Rate(20, 0.5)


class Lines(Reporter):
    """The plain reporter (what a piped crawl prints), into a buffer."""

    def __init__(self) -> None:
        self.buf = io.StringIO()
        super().__init__(stream=self.buf, every=1e9)

    @property
    def text(self) -> str:
        return self.buf.getvalue()


def _tiny_bench(url: str, tmp_path) -> str:
    """A three-text MathlibQR-format benchmark (loading the shipped one costs seconds)."""
    path = tmp_path / "MathlibQR.json"
    path.write_text(json.dumps([{"id": f"t{i}", "full_name": f"Nat.x{i}", "q1c_natural": f"text {i}"}
                                for i in range(3)]))
    db = open_database(url)
    try:
        load_benchmark_file(db, path, name="tiny", allow_modified=True)
    finally:
        db.dispose()
    return url


@pytest.fixture
def mpr(any_db_url: str, tmp_path) -> str:
    return _tiny_bench(any_db_url, tmp_path)


@pytest.fixture
def mpr_sqlite(sqlite_url: str, tmp_path) -> str:
    return _tiny_bench(sqlite_url, tmp_path)


def crawl(url: str, base: str, *, limit: int = 1, attempts: int = 1, **kw):
    db = open_database(url)
    rep = Lines()
    policy = RetryPolicy(max_attempts=attempts, backoff_initial=0.01, backoff_max=0.05,
                         retry_after_cap=kw.pop("retry_after_cap", 1800.0))
    try:
        opts = CrawlOptions(engines=["loogle"], bench="tiny", rates={"*": RATE}, urls={"loogle": base},
                            policy=policy, limit=limit, margin=0.05, **kw)
        summary = run_crawl(db, opts, rep)
    finally:
        db.dispose()
    return summary, rep


def rows(url: str, stmt):
    db = open_database(url)
    try:
        with db.session() as s:
            return s.execute(stmt).all()
    finally:
        db.dispose()


def answers_normally(url: str) -> None:
    """After the hostile case: the healed server is crawled and answered."""
    with Hostile(healthy) as srv:
        summary, rep = crawl(url, srv.url)
    assert summary.results[0].answered_now == 1, rep.text


# ------------------------------------------------------ bodies that break parsers or DBs


def test_a_body_nested_200000_deep_is_a_failed_parse_and_the_next_runs_work(mpr: str) -> None:
    deep = b'{"hits": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with Hostile(lambda i: response(deep)) as srv:
        summary, rep = crawl(mpr, srv.url)  # before: RecursionError out of run_crawl
    assert srv.requests == 1
    (ex_id, body), = rows(mpr, sa.select(Exchange.id, Exchange.response_body))
    assert bytes(body) == deep  # archived first, whole
    (ok, error), = rows(mpr, sa.select(ParseOutcome.ok, ParseOutcome.error))
    assert ok is False and "RecursionError" in error, error
    assert summary.results[0].answered_now == 0
    answers_normally(mpr)


def test_a_poisoned_archive_no_longer_kills_start_up(mpr: str) -> None:
    """What today's code left behind: a 2xx exchange with a nested body and no parse outcome
    (the crawl died parsing it). Every later crawl died in the start-up recovery."""
    deep = b'{"hits": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with Hostile(healthy) as srv:
        crawl(mpr, srv.url)  # creates the configuration and epoch
        db = open_database(mpr)
        try:
            with db.session() as s, s.begin():
                ex = s.execute(sa.select(Exchange)).scalars().one()
                old = ex.sent_at - datetime.timedelta(hours=2)  # a dead run's (recovery waits for those)
                s.add(Exchange(crawl_id=None, config_id=ex.config_id, attempt=1, epoch=ex.epoch,
                               query_texts=["poisoned text"], request_fingerprint="0" * 64, method="GET",
                               url=ex.url, request_headers={}, status_code=200,
                               response_headers={"content-type": "application/json"}, response_body=deep,
                               sent_at=old, finished_at=old, elapsed_ms=1.0))
        finally:
            db.dispose()
        summary, rep = crawl(mpr, srv.url)  # before: RecursionError at start-up, every time
    assert summary.results[0].answered_now == 1, rep.text
    errors = [e for _, e in rows(mpr, sa.select(ParseOutcome.ok, ParseOutcome.error)) if e]
    assert len(errors) == 1 and "RecursionError" in errors[0]


def test_surrogates_and_nul_in_hits_are_stored_as_replacement_characters(mpr: str) -> None:
    body = (b'{"count": 2, "hits": [{"name": "Nat.bad\\ud800name", "type": "T"},'
            b' {"name": "Nul\\u0000Name", "type": "a\\u0000b", "\\u0000key": "\\udc00"}]}')
    page = response(b"<html>\x00 down \xff</html>", ctype="text/html")
    with Hostile(lambda i: page) as srv:
        summary, rep = crawl(mpr, srv.url)  # before: NUL refused in parse_outcomes.error (PostgreSQL)
    (error,), = rows(mpr, sa.select(ParseOutcome.error))
    assert "HTML page instead of JSON" in error and "<html>\ufffd down \ufffd</html>" in error, error
    with Hostile(lambda i: response(body)) as srv:
        summary, rep = crawl(mpr, srv.url)  # before: UnicodeEncodeError (SQLite) / NUL refused (PostgreSQL)
    assert summary.results[0].answered_now == 1, rep.text
    assert rows(mpr, sa.select(Exchange.response_body).order_by(Exchange.id))[-1][0] == body  # raw bytes unchanged
    hits = rows(mpr, sa.select(Hit.rank, Hit.name, Hit.raw).order_by(Hit.rank))
    assert [(r, n) for r, n, _ in hits] == [(1, "Nat.bad\ufffdname"), (2, "Nul\ufffdName")]
    assert hits[1][2] == {"name": "Nul\ufffdName", "type": "a\ufffdb", "\ufffdkey": "\ufffd"}
    answers_normally(mpr)


def test_clean_json_is_iterative_and_leaves_clean_values_alone() -> None:
    deep: list = []
    cur = deep
    for _ in range(50_000):  # deeper than any recursion limit
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    cur.append("a\x00")
    clean_json(deep)
    assert cur == ["a\ufffd"]
    value = {"a": ["b", 1, None]}
    assert clean_json(value) is value and value == {"a": ["b", 1, None]}


# ------------------------------------------------------------------- size and time


@functools.cache
def _bomb(mib: int = 32) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    block = bytes(1024 * 1024)
    return b"".join([*(z.compress(block) for _ in range(mib)), z.flush()])


def test_a_gzip_bomb_is_read_up_to_max_body_archived_truncated_and_not_retried(mpr_sqlite: str, tmp_path,
                                                                                monkeypatch) -> None:
    mpr = mpr_sqlite  # the reader is the same on both backends
    bomb = _bomb()  # 32 MiB from 32 KB
    cap = 1024 * 1024
    with Hostile(lambda i: response(bomb, headers={"Content-Encoding": "gzip"})) as srv:
        summary, rep = crawl(mpr, srv.url, attempts=3, max_body=cap)  # before: the whole 200 MiB in memory
    assert srv.requests == 1  # failed, not retried
    (body, truncated), = rows(mpr, sa.select(Exchange.response_body, Exchange.body_truncated))
    assert len(body) == cap and truncated is True
    (ok, error), = rows(mpr, sa.select(ParseOutcome.ok, ParseOutcome.error))
    assert ok is False and "--max-body" in error
    assert summary.results[0].failed_now == 1 and summary.exit_code == 3
    # Exported with WARC-Truncated: length; imported back as truncated.
    monkeypatch.setenv("ENGINES_DATABASE_URL", mpr)
    res = CliRunner().invoke(app, ["export", "--out", str(tmp_path / "b.warc")])
    assert res.exit_code == 0, res.output
    assert b"WARC-Truncated: length\r\n" in (tmp_path / "b.warc").read_bytes()
    other = f"sqlite:///{tmp_path / 'other.db'}"
    monkeypatch.setenv("ENGINES_DATABASE_URL", other)
    res = CliRunner().invoke(app, ["import", str(tmp_path / "b.warc")])
    assert res.exit_code == 0, res.output
    assert rows(other, sa.select(Exchange.body_truncated)) == [(True,)]
    answers_normally(mpr)


def test_an_endless_chunked_body_stops_at_max_body(mpr_sqlite: str) -> None:
    chunk = b"[" * 65536
    cap = 256 * 1024

    async def endless(srv: Hostile, writer: asyncio.StreamWriter) -> None:
        srv.send(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4096):  # 256 MiB unless the client stops reading
            srv.send(writer, b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()

    with Hostile(lambda i: endless) as srv:
        summary, rep = crawl(mpr_sqlite, srv.url, max_body=cap)
    (body, truncated), = rows(mpr_sqlite, sa.select(Exchange.response_body, Exchange.body_truncated))
    assert len(body) == cap and truncated is True
    # The server could write only what the socket buffers hold beyond what was read.
    assert srv.sent_bytes < 64 * 1024 * 1024, srv.sent_bytes
    answers_normally(mpr_sqlite)


def _drip(n: int, every: float):
    async def drip(srv: Hostile, writer: asyncio.StreamWriter) -> None:
        srv.send(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % n)
        await writer.drain()
        for _ in range(n):
            await asyncio.sleep(every)
            if writer.is_closing():
                return
            srv.body_bytes = getattr(srv, "body_bytes", 0) + 1
            srv.send(writer, b" ")
            await writer.drain()
    return drip


@pytest.mark.parametrize("bound", ["timeout", "deadline"])
def test_a_dripping_server_is_cut_by_timeout_and_deadline(mpr_sqlite: str, bound: str) -> None:
    n = 80  # bytes at 0.1 s each: 8 s to send the whole body
    kw = {"timeout": 0.6} if bound == "timeout" else {"timeout": 60.0, "deadline": 0.6}
    with Hostile(lambda i: _drip(n, 0.1)) as srv:
        summary, rep = crawl(mpr_sqlite, srv.url, **kw)  # before: the whole body was waited for
    # Counted from the server's side: the client hung up long before the body's end.
    assert getattr(srv, "body_bytes", 0) < n // 2, (srv.body_bytes, rep.text)
    (err, body), = rows(mpr_sqlite, sa.select(Exchange.transport_error, Exchange.response_body))
    assert body is None and err.startswith("Timeout: the exchange took longer than"), err
    if bound == "timeout":
        answers_normally(mpr_sqlite)


# ------------------------------------------------------------------- Retry-After


def test_retry_after_forms_are_untrusted() -> None:
    now = 1_000_000.0
    assert parse_retry_after("5", now) == 5.0
    assert parse_retry_after("99999999999", now) == RETRY_AFTER_MAX == 86400.0
    for bad in ("1e400", "inf", "nan", "-5", "1e3", "0x10", "", "Mon, 01 Jan 99999 00:00:00 GMT"):
        assert parse_retry_after(bad, now) is None, bad
    far = "Fri, 31 Dec 9999 23:59:59 GMT"
    assert parse_retry_after(far, now) == RETRY_AFTER_MAX


def test_utc_clock_shows_the_date_when_not_today_and_never_raises() -> None:
    now = 1_800_000_000.0  # 2027-01-15 08:00 UTC
    assert utc_clock(now + 60, now) == "08:01"
    assert utc_clock(now + 86400, now) == "2027-01-16 08:00"
    assert utc_clock(math.inf, now) == "(a time beyond the calendar)"
    assert utc_clock(math.nan, now) == "(not a time)"


def test_a_huge_retry_after_pauses_the_host_24_hours_at_most(mpr: str, monkeypatch) -> None:
    _huge_retry_after(mpr, "99999999999", monkeypatch)


def test_retry_after_1e400_stores_no_inf(mpr_sqlite: str, monkeypatch) -> None:
    _huge_retry_after(mpr_sqlite, "1e400", monkeypatch)  # the parse is the same on both backends


def _huge_retry_after(mpr: str, value: str, monkeypatch) -> None:
    reply = response(b'{"error": "slow down"}', status=429, headers={"Retry-After": value})
    before = time.time()
    with Hostile(lambda i: reply) as srv:
        summary, rep = crawl(mpr, srv.url, attempts=2)
    (host, paused), = rows(mpr, sa.select(HostState.host, HostState.paused_until))
    assert math.isfinite(paused)  # before: Inf ("1e400" was parsed as float) or the year 5195
    if value == "99999999999":
        assert before + 86400 <= paused <= time.time() + 86400 + 1
        assert summary.exit_code == 3 and summary.results[0].stopped == "paused"
    # The next crawl and `engines status` work, and the pause shows its date (not today).
    summary, rep = crawl(mpr, srv.url)
    monkeypatch.setenv("ENGINES_DATABASE_URL", mpr)
    res = CliRunner().invoke(app, ["status"])
    assert res.exit_code == 0, res.output
    if value == "99999999999":
        tomorrow = time.strftime("%Y-%m-%d", time.gmtime(paused))
        assert f"paused until {tomorrow} " in res.output, res.output


# --------------------------------------------------------------- escaped output


def test_escaped_shows_controls_and_keeps_text() -> None:
    assert escaped("\x1b]0;pwned\x07\x1b[2J\rNat.add_comm\n") == "\\x1b]0;pwned\\x07\\x1b[2J\\rNat.add_comm\\n"
    assert escaped("Nat.succ_le_iff ∀ ℕ") == "Nat.succ_le_iff ∀ ℕ"
    assert escaped("a\u202eb\x9bc") == "a\\u202eb\\x9bc"


def test_terminal_escapes_from_a_server_are_escaped_in_the_crawl_log(mpr_sqlite: str) -> None:
    evil = b"\x1b]0;pwned\x07\x1b[2J\rloogle: 69/69 answered"
    with Hostile(lambda i: response(evil, status=400, ctype="text/plain")) as srv:
        summary, rep = crawl(mpr_sqlite, srv.url)
    assert "\\x1b]0;pwned" in rep.text  # the event is logged, escaped
    assert "\x1b" not in rep.text and "\r" not in rep.text and "\x07" not in rep.text


# -------------------------------------------------------------- credentials


def test_credentials_in_url_are_sent_but_never_stored_or_printed(mpr: str) -> None:
    seen: list[bytes] = []

    def reply(i: int) -> bytes:
        return healthy(i)

    with Hostile(reply) as srv:
        secret = srv.url.replace("http://", "http://alice:S3cretPW@")
        summary, rep = crawl(mpr, secret)
    assert summary.results[0].answered_now == 1, rep.text
    assert "S3cretPW" not in rep.text
    hosts = [h for (h,) in rows(mpr, sa.select(HostState.host))] + \
            [h for (h,) in rows(mpr, sa.select(SendLog.host))]
    assert hosts and all(h == f"127.0.0.1:{srv.port}" for h in hosts), hosts  # before: alice:S3cretPW@...
    url, = rows(mpr, sa.select(Exchange.url))[0]
    assert "S3cretPW" not in url and "alice" not in url


def test_terminal_escapes_in_hit_names_are_escaped_by_sql_drift_and_status(mpr_sqlite: str, monkeypatch,
                                                                              tmp_path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"name": ["Nat", f"x{i}"], "kind": "theorem"}) + "\n" for i in range(3)))
    db = open_database(mpr_sqlite)
    try:
        load_corpus(db, str(corpus), name="tiny", revision="r1")
    finally:
        db.dispose()
    evil = "\x1b]0;pwned\x07\x1b[2J"
    bodies = [loogle_body([f"Nat.x{i % 3}", f"{evil}Nat.fake{i}"]) for i in range(6)]
    with Hostile(lambda i: response(bodies[i])) as srv:
        crawl(mpr_sqlite, srv.url, limit=3)
        crawl(mpr_sqlite, srv.url, limit=3, refresh=True)  # a second epoch, for drift
    outage = response(b"\x1b]0;owned\x07 down for maintenance", status=503, ctype="text/plain")
    with Hostile(lambda i: outage) as srv2:
        crawl(mpr_sqlite, srv2.url, retry_after_cap=0.01)  # an outage reason from the body in host_state
    monkeypatch.setenv("ENGINES_DATABASE_URL", mpr_sqlite)
    runner = CliRunner()
    outputs = {
        "sql": runner.invoke(app, ["sql", "SELECT name FROM hits ORDER BY id"]),
        "drift": runner.invoke(app, ["drift", "loogle", "--bench", "tiny", "--top", "3"]),
        "status": runner.invoke(app, ["status"]),
    }
    for cmd, res in outputs.items():
        assert res.exit_code == 0, (cmd, res.output)
        assert "\x1b" not in res.output and "\x07" not in res.output, (cmd, res.output)
    assert "\\x1b]0;pwned\\x07" in outputs["sql"].output
    assert "\\x1b]0;pwned" in outputs["drift"].output
    assert "\\x1b]0;owned" in outputs["status"].output
