"""Honest ETAs: the pacing bound or the observed pace, whichever is slower; "paused until".

The crawl tests run real crawls against stand-ins over loopback, once with the courtesy
limit binding (a tight rate, no server latency) and once with the server's speed binding
(50 ms latency, a rate 20× faster than that allows), and compare the ETA shown at 10 %
and 50 % of the run with the time that actually remained.
"""

from __future__ import annotations

import io
import re
import time

import pytest

from crawler.run import CrawlOptions, EtaEstimator, Reporter, eta, run_crawl
from crawler.fetch import RetryPolicy
from crawler.plan import Counts
from engines.base import Rate
from engines.emulate import FaultConfig, StandIn
from store.db import open_database
from tests.test_crawl import _load_mpr, rows  # noqa: F401 - the fixture

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


def test_reporter_says_paused_until_in_both_modes() -> None:
    out = io.StringIO()
    rep = Reporter(stream=out, every=1e9)
    c = Counts(10, 2, 0)
    until = time.time() + 90
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
    from crawler.run import RichReporter

    rr = RichReporter.__new__(RichReporter)  # the bar's text, without starting a live display
    Reporter.__init__(rr, stream=io.StringIO())
    assert rr.eta_text("e", c, 1.0, 1, paused_until=until).startswith("paused until ")
    assert rr.eta_text("e", c, 1.0, 1) == "ETA 8s"
    assert rich is not None


class Recorder(Reporter):
    """Remembers (time, texts completed, ETA in seconds) at every progress update."""

    def __init__(self) -> None:
        super().__init__(stream=io.StringIO(), every=1e9)
        self.points: list[tuple[float, int, float]] = []
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)

    def update(self, engine, counts, interval, batch, **kw) -> None:
        super().update(engine, counts, interval, batch, **kw)
        self.points.append((time.monotonic(), counts.answered + counts.failed, self.last_eta[engine]))


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


@pytest.mark.parametrize("case", ["courtesy limit binds", "server speed binds"])
def test_eta_within_25_percent_at_10_and_50_percent(case: str, sqlite_url: str, rows) -> None:  # noqa: F811
    _load_mpr(sqlite_url)
    if case == "courtesy limit binds":
        # One send per 120 ms: several times what the crawler needs per exchange even on a
        # loaded 2-core machine, so the limit really binds.
        rate, margin, faults = Rate(1, 0.11), 0.01, FaultConfig()
    else:
        rate, margin, faults = Rate(50, 0.05), 0.0, FaultConfig(latency=0.2)  # 1000/s allowed, 200 ms a request
    with StandIn("leanexplore", rows, rate=rate, faults=faults).in_thread() as srv:
        rep, end = _crawl_recording(sqlite_url, srv, rate, margin)
    interval = (rate.period + margin) / rate.n
    for share in (0.1, 0.5):
        shown, real = _eta_at(rep, end, share)
        bound = eta(round(LIMIT * (1 - share)), interval, 1)
        print(f"{case}: at {share:.0%} ETA {shown:.2f} s, really {real:.2f} s ({shown / real:.2f}); "
              f"the pacing bound alone {bound:.2f} s ({bound / real:.2f})")
        assert 0.75 * real <= shown <= 1.25 * real, (case, share, shown, real)
        if case == "server speed binds":  # the pacing bound alone would be far off
            assert bound < 0.25 * real, (bound, real)


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
