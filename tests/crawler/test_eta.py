"""Honest ETAs: the pacing bound or the observed pace, whichever is slower; "paused until".

The accuracy test drives the reporter with a simulated crawl on an injected clock, once
with the courtesy limit binding and once with the server's speed binding, and compares
the ETA shown at 10 % and 50 % with the simulated time that remained. A real crawl over
loopback checks what load cannot change: the ETA never falls below what the server's
latency allows. The wall-clock comparison of a real crawl is perf/eta.py (a test that
depends on how busy the machine is failed on a loaded one, issue 22).
"""

from __future__ import annotations

import io
import re
import time

import pytest

from crawler.crawl import AUTO_CONCURRENCY_MAX, CrawlOptions, EtaEstimator, Reporter, eta, run_crawl
from crawler.fetch import RetryPolicy
from crawler.plan import Counts
from engines.base import Rate
from engines.emulate import FaultConfig, StandIn
from store.db import open_database
from tests.support.crawl import _load_mpr, rows  # noqa: F401 - the fixture

LIMIT = 30


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_estimator_takes_the_slower_of_pacing_and_observed_pace() -> None:
    clock = Clock()
    est = EtaEstimator(min_window=30.0, clock=clock)
    assert est.seconds(100, 0.5, 1) == 50.0  # nothing observed yet: the pacing bound
    est.observe(0)
    clock.t += 30  # a slow start (seeding, connecting) does not count
    est.observe(1)
    assert est.seconds(99, 0.001, 1) == pytest.approx(0.099)  # one completion: no pace yet
    clock.t += 10
    est.observe(21)  # 2 texts/s since the first completion, slower than the pacing's 1000/s
    assert est.seconds(80, 0.001, 1) == pytest.approx(40.0)
    assert est.seconds(80, 1.0, 1) == 80.0  # pacing at 1/s binds: 80 s, not the observed 40
    assert est.seconds(80, 1.0, 4) == pytest.approx(40.0)  # batches of 4: pacing 20 s, observed 40 s
    clock.t += 10  # a stall: nothing completed, the observed pace falls, the ETA grows
    est.observe(21)
    assert est.seconds(80, 0.001, 1) == pytest.approx(80.0)
    assert est.seconds(0, 0.001, 1) == 0.0


def test_estimator_window_forgets_an_old_pace() -> None:
    clock = Clock()
    est = EtaEstimator(min_window=30.0, clock=clock)
    est.observe(0)
    est.observe(1)  # the first completion, where the pace is timed from
    for _ in range(10):  # 100 s at 1 text/s
        clock.t += 10
        est.observe(est._samples[-1][1] + 10)
    for _ in range(10):  # then 100 s at 0.1 text/s
        clock.t += 10
        est.observe(est._samples[-1][1] + 1)
    # A long pacing interval widens the window to 30 intervals (here 300 s: everything).
    assert est.observed_rate(10.0) == pytest.approx(110 / 200)
    # A window of 30 s (tiny interval): only the slow pace counts.
    assert est.observed_rate(0.001) == pytest.approx(0.1)


def test_no_eta_until_it_is_meaningful() -> None:
    """Issue 34: no "ETA 10s" from the pacing bound alone at the start: an ETA is shown once
    ETA_MIN_DONE texts are done in this run and ETA_MIN_SECONDS have passed."""
    from crawler.progress import ETA_MIN_DONE, ETA_MIN_SECONDS

    clock = Clock()
    out = io.StringIO()
    rep = Reporter(stream=out, every=0.0)
    rep._estimators["e"] = EtaEstimator(clock=clock)
    rep.start("e", Counts(100, 0, 0), 0.1, 1)
    t0 = clock.t
    for done in range(1, ETA_MIN_DONE + 1):
        clock.t += 0.1
        rep.update("e", Counts(100, done, 0), 0.1, 1)
    clock.t = t0 + ETA_MIN_SECONDS - 0.5
    rep.update("e", Counts(100, ETA_MIN_DONE + 1, 0), 0.1, 1)  # enough texts, too early
    clock.t = t0 + ETA_MIN_SECONDS + 0.5
    rep.update("e", Counts(100, ETA_MIN_DONE + 2, 0), 0.1, 1)
    lines = out.getvalue().splitlines()
    assert lines[0] == "e: 0/100 answered, 100 due, 0 failed"
    assert all("ETA" not in line for line in lines[:-1]), lines
    assert re.fullmatch(r"e: 5/100 answered, 95 due; ETA \w+", lines[-1]), lines[-1]


def test_reporter_says_paused_until_in_both_modes() -> None:
    out = io.StringIO()
    rep = Reporter(stream=out, every=1e9)
    c = Counts(1013, 1005, 0)
    until = time.time() + 90
    clock = Clock()
    rep._estimators["e"] = est = EtaEstimator(clock=clock)
    est.observe(0)  # enough progress in this run for an ETA to be shown, at a pace the pacing bounds
    clock.t += 6
    est.observe(1005)
    rep.start("e", c, 1.0, 1)
    rep.update("e", c, 1.0, 1, paused_until=until)
    rep.update("e", c, 1.0, 1, paused_until=until)  # the same pause is logged once
    rep.update("e", c, 1.0, 1, paused_until=time.time() - 1)  # over: a number again (not logged)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("ETA 8s")
    assert lines[1].endswith("paused until " + time.strftime("%H:%M:%S", time.localtime(until)))
    assert re.search(r"paused until \d\d:\d\d:\d\d$", lines[1])
    rich = pytest.importorskip("rich")
    from crawler.crawl import RichReporter

    rr = RichReporter.__new__(RichReporter)  # the bar's text, without starting a live display
    Reporter.__init__(rr, stream=io.StringIO())
    assert rr.eta_text("e", c, 1.0, 1) == ""  # nothing done yet: no ETA
    rr._estimators["e"] = est
    assert rr.eta_text("e", c, 1.0, 1, paused_until=until).startswith("paused until ")
    assert rr.eta_text("e", c, 1.0, 1) == "ETA 8s"
    assert rich is not None


class Recorder(Reporter):
    """Remembers (time, texts completed, ETA in seconds) at every progress update."""

    def __init__(self) -> None:
        super().__init__(stream=io.StringIO(), every=1e9)
        self.points: list[tuple[float, int, float]] = []
        self.points_todo: list[tuple[float, int, float, int | None]] = []
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)

    def update(self, engine, counts, interval, batch, **kw) -> None:
        super().update(engine, counts, interval, batch, **kw)
        self.points.append((time.monotonic(), counts.answered + counts.failed, self.last_eta[engine]))
        self.points_todo.append((time.monotonic(), counts.answered + counts.failed, self.last_eta[engine], kw.get("todo")))


def _crawl_recording(url: str, srv: StandIn, rate: Rate, margin: float) -> tuple[Recorder, float]:
    db = open_database(url)
    rep = Recorder()
    try:
        opts = CrawlOptions(engines=["leanexplore"], bench="mathlibmpr", rates={"*": rate}, urls={"leanexplore": srv.url},
                            policy=RetryPolicy(backoff_initial=0.02, backoff_max=0.2), limit=LIMIT, margin=margin)
        summary = run_crawl(db, opts, rep)
    finally:
        db.dispose()
    assert summary.results[0].answered_now == LIMIT
    end = max(t for t, done, _ in rep.points if done == LIMIT)
    return rep, end


def _eta_at(rep: Recorder, end: float, share: float) -> tuple[float, float]:
    """(ETA shown, time that really remained) at the first update with ``share`` done."""
    t, _, shown = next(p for p in rep.points if p[1] >= share * LIMIT)
    return shown, end - t


def _simulate(case: str) -> list[tuple[float, int, float]]:
    """A crawl of LIMIT texts on a simulated clock, fed to a Reporter the way
    ``run_crawl``'s request loops feed it (``set_pace`` then ``update`` after every
    answer): (time, texts done, ETA shown) at every update. No wall clock, so a loaded
    machine cannot move it; the real crawl's accuracy is measured by perf/eta.py."""
    clock = Clock()
    rep = Reporter(stream=io.StringIO(), every=1e9)
    rep._estimators["e"] = EtaEstimator(clock=clock)
    if case == "courtesy limit binds":  # one send per 120 ms, an exchange takes 10 ms: one loop
        interval, latency, loops = 0.12, 0.01, 1
        cycle = interval  # a loop's time per exchange includes its pacing wait
    else:  # 1000/s allowed, 200 ms a request: AUTO_CONCURRENCY_MAX loops in flight
        interval, latency, loops = 0.001, 0.2, AUTO_CONCURRENCY_MAX
        cycle = latency
    points = []
    rep.start("e", Counts(LIMIT, 0, 0), interval, 1, todo=LIMIT)
    for done in range(1, LIMIT + 1):
        clock.t += cycle / loops  # completions arrive evenly once the loops are running
        rep.set_pace("e", cycle / loops)
        rep.update("e", Counts(LIMIT, done, 0), interval, 1, todo=LIMIT - done)
        points.append((clock.t, done, rep.last_eta["e"]))
    return points


@pytest.mark.parametrize("case", ["courtesy limit binds", "server speed binds"])
def test_eta_within_25_percent_at_10_and_50_percent(case: str) -> None:
    points = _simulate(case)
    end = points[-1][0]
    interval = 0.12 if case == "courtesy limit binds" else 0.001
    for share in (0.1, 0.5):
        t, done, shown = next(p for p in points if p[1] >= share * LIMIT)
        real = end - t
        bound = eta(LIMIT - done, interval, 1)
        assert 0.75 * real <= shown <= 1.25 * real, (case, share, shown, real)
        if case == "server speed binds":  # the pacing bound alone would be far off
            assert bound < 0.25 * real, (bound, real)


def test_eta_of_a_real_crawl_is_never_below_what_the_server_allows(sqlite_url: str, rows) -> None:  # noqa: F811
    """A real crawl where the server's speed binds (200 ms a request, a limit 20x above
    what that allows): the ETA shown uses the crawl's measured pace, never the pacing
    bound. Asserted only from below, with a bound a loaded machine cannot break: every
    request takes at least the server's 200 ms and at most AUTO_CONCURRENCY_MAX are in
    flight. (Whether it is also close to the time that really remained depends on how
    busy the machine is: perf/eta.py measures that.)"""
    _load_mpr(sqlite_url)
    rate, latency = Rate(50, 0.05), 0.2
    with StandIn("leanexplore", rows, rate=rate, faults=FaultConfig(latency=latency)).in_thread() as srv:
        rep, _ = _crawl_recording(sqlite_url, srv, rate, 0.0)
    interval = rate.period / rate.n
    checked = 0
    for _, done, shown, todo in rep.points_todo:
        if done == 0 or todo == 0:
            continue  # before the first answer there is no pace yet; at the end nothing is left
        assert shown >= 0.99 * todo * latency / AUTO_CONCURRENCY_MAX, (done, todo, shown)
        assert shown >= 10 * eta(todo, interval, 1), (done, todo, shown)
        checked += 1
    assert checked >= LIMIT // 2, rep.points_todo


def test_a_paused_host_shows_paused_until(sqlite_url: str, rows) -> None:  # noqa: F811
    """The server allows less than the client was told: its 429 + Retry-After pauses the
    host, and the progress line says so while it lasts."""
    _load_mpr(sqlite_url)
    db = open_database(sqlite_url)
    rep = Recorder()
    with StandIn("leanexplore", rows, rate=Rate(4, 0.5)).in_thread() as srv:
        try:
            opts = CrawlOptions(engines=["leanexplore"], bench="mathlibmpr", rates={"*": Rate(20, 0.5)},
                                urls={"leanexplore": srv.url}, limit=8, margin=0.15,
                                policy=RetryPolicy(backoff_initial=0.02, backoff_max=0.2))
            summary = run_crawl(db, opts, rep)
        finally:
            db.dispose()
    assert summary.results[0].answered_now == 8
    assert any("Retry-After" in line for line in rep.lines), "the server never paused us: the test lost its teeth"
    assert any(re.search(r"; paused until \d\d:\d\d:\d\d$", line) for line in rep.lines), rep.lines


def test_the_pause_watcher_refreshes_an_engine_whose_last_requests_wait_out_a_pause() -> None:
    """A loop that reached --limit marks the engine stopped ("limit") while the other loops'
    requests still wait out a host's pause: the watcher must still say "paused until" (it
    skipped such an engine, and the line never said it on a loaded machine, issue 22)."""
    import asyncio
    from types import SimpleNamespace

    from crawler.loop import EngineLoop, watch_pauses
    from crawler.pacing import MemoryLedger

    until = time.time() + 60
    ledger = MemoryLedger()
    ledger.pause("h", until)
    pacer = SimpleNamespace(ledger=ledger, interval=0.1)
    result = SimpleNamespace(counts=Counts(10, 4, 0), sent_texts=4, stopped="limit")
    eng = SimpleNamespace(name="e", adapter=SimpleNamespace(host="h", batch_size=1), result=result, finished=False)
    out = io.StringIO()
    rep = Reporter(stream=out, every=1e9)
    opts = CrawlOptions(engines=["e"], bench="b", limit=8)

    async def one_round(in_flight: int) -> None:
        loop = EngineLoop(None, eng, SimpleNamespace(pacer=pacer), rep, None, {}, limit=opts.limit)
        loop.st.in_flight = in_flight
        watcher = asyncio.create_task(watch_pauses([loop], rep, {}, every=0.01))
        await asyncio.sleep(0.05)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)

    asyncio.run(one_round(in_flight=0))  # stopped, nothing out: no line
    assert out.getvalue() == ""
    asyncio.run(one_round(in_flight=2))  # stopped claiming, two requests waiting out the pause
    assert out.getvalue().rstrip().endswith("paused until " + time.strftime("%H:%M:%S", time.localtime(until)))
