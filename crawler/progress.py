"""Progress on stderr while a crawl runs, and the summary after it: the ETA
(:class:`EtaEstimator`, :func:`eta`), the plain and the rich reporter, durations and
clock times as shown, and the summary lines ``engines crawl`` prints."""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any

from crawler.options import CrawlSummary
from crawler.plan import Counts
from store.text import escaped


# An ETA is shown once it rests on something: this many texts done in this run, and this
# many seconds since the run's first progress. Before that a line shows none (it used to
# say "ETA 10s" from the pacing bound alone, for a crawl that then took minutes).
ETA_MIN_DONE = 3
ETA_MIN_SECONDS = 5.0


class EtaEstimator:
    """Seconds left for one engine: the pacing bound or the observed pace, whichever is slower.

    The pacing bound (:func:`eta`) is right when the courtesy limit binds and far too
    short when the crawler's or the server's speed does (it said 0–3 s with 16–106 s
    left, issue 13). The observed pace is the completion rate over a sliding window of
    ``max(min_window, 30 × interval)`` seconds: 30 pacing intervals average out the
    bursts a sliding-window limit allows (n sends, then a wait of a period), so a
    courtesy-bound crawl's observed pace matches its pacing bound within a few percent,
    and the larger of the two is the honest one either way.
    """

    def __init__(self, *, min_window: float = 30.0, clock=time.monotonic) -> None:
        self.min_window = min_window
        self.clock = clock
        self._base: int | None = None  # texts completed when the run started
        self._started: float | None = None  # when the run's progress was first observed
        self._samples: deque[tuple[float, int]] = deque()  # (time, texts completed)
        # Seconds per request as the crawl measures it (a request loop's smoothed time per
        # exchange, pacing waits included, divided by the loops running); None: unknown.
        self.pace: float | None = None

    def observe(self, completed: int, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        if self._base is None:
            self._base, self._started = completed, now
            return
        if completed == (self._samples[-1][1] if self._samples else self._base):
            return  # no progress: keep the older sample, so the window spans the stall
        # The pace is timed from the first completion on: the run's start-up (seeding,
        # connecting, the first request's handshake) says nothing about the steady pace.
        self._samples.append((now, completed))

    def observed_rate(self, interval: float, now: float | None = None) -> float | None:
        """Texts completed per second over the window (None before anything completed)."""
        now = self.clock() if now is None else now
        window = max(self.min_window, 30.0 * interval)
        samples = self._samples
        # Keep one sample at or before the window's start, so the window is always full.
        while len(samples) > 2 and samples[1][0] <= now - window:
            samples.popleft()
        if len(samples) < 2:
            return None
        t0, c0 = samples[0]
        done = samples[-1][1] - c0
        span = now - t0
        if done <= 0 or span <= 0:
            return None
        return done / span

    def meaningful(self, now: float | None = None) -> bool:
        """Whether an ETA is worth showing: :data:`ETA_MIN_DONE` texts done in this run and
        :data:`ETA_MIN_SECONDS` since its first progress."""
        now = self.clock() if now is None else now
        if self._base is None or self._started is None or not self._samples:
            return False
        return self._samples[-1][1] - self._base >= ETA_MIN_DONE and now - self._started >= ETA_MIN_SECONDS

    def seconds(self, todo: int, interval: float, batch: int, now: float | None = None) -> float:
        bound = eta(todo, interval, batch)
        if todo <= 0:
            return 0.0
        if self.pace is not None:
            # The crawl's own measure of seconds per request at its current concurrency:
            # right from the first requests on, where the completion rate over a window
            # still averages in the slower start (a concurrency that grew from 1).
            return max(bound, -(-todo // max(1, batch)) * self.pace)
        rate = self.observed_rate(interval, now)
        return bound if rate is None else max(bound, todo / rate)


def fmt_clock(unix_seconds: float) -> str:
    """HH:MM:SS local time, with the date when it is not today; never raises (a stored
    pause from an untrusted Retry-After may be absurd)."""
    try:
        when = time.localtime(unix_seconds)
    except (OverflowError, ValueError, OSError):
        return "(a time beyond the calendar)"
    fmt = "%H:%M:%S" if when[:3] == time.localtime()[:3] else "%Y-%m-%d %H:%M:%S"
    return time.strftime(fmt, when)


class Reporter:
    """Plain log lines on stderr (not a TTY): one per event and a progress line now and then.

    The ETA is :class:`EtaEstimator`'s (pacing bound or observed pace, whichever is
    slower); while the engine's host is paused (429 / outage) the line says
    "paused until HH:MM:SS" instead, and a new pause is logged when it starts.
    ``todo`` is what this run will still send (``--limit`` caps it); by default the
    due count.
    """

    def __init__(self, stream=None, every: float = 30.0) -> None:
        self.stream = stream or sys.stderr
        self.every = every
        self._last: dict[str, float] = {}
        self._estimators: dict[str, EtaEstimator] = {}
        self._paused: dict[str, float | None] = {}
        self.last_eta: dict[str, float] = {}  # engine → the last ETA shown, in seconds

    def log(self, message: str) -> None:
        # Remote content (a body snippet, a hit name, an outage reason) reaches log lines:
        # control characters are shown escaped, terminal or not (store.text.escaped).
        print(escaped(message), file=self.stream, flush=True)

    def set_pace(self, engine: str, seconds_per_request: float | None) -> None:
        """The crawl's measured seconds per request at its current concurrency."""
        self._estimators.setdefault(engine, EtaEstimator()).pace = seconds_per_request

    def eta_text(self, engine: str, counts: Counts, interval: float, batch: int, *,
                 todo: int | None = None, paused_until: float | None = None) -> str:
        """"ETA 3m05s", "paused until 14:02:31", or "" while the ETA is not yet meaningful
        (:meth:`EtaEstimator.meaningful`); observes the progress in ``counts``."""
        est = self._estimators.setdefault(engine, EtaEstimator())
        est.observe(counts.answered + counts.failed)
        seconds = est.seconds(counts.pending if todo is None else todo, interval, batch)
        self.last_eta[engine] = seconds
        if paused_until is not None and paused_until > time.time():
            return f"paused until {fmt_clock(paused_until)}"
        if not est.meaningful() and counts.pending > 0:
            return ""
        return f"ETA {fmt_duration(seconds)}"

    def start(self, engine: str, counts: Counts, interval: float, batch: int, *,
              todo: int | None = None, paused_until: float | None = None) -> None:
        text = self.eta_text(engine, counts, interval, batch, todo=todo, paused_until=paused_until)
        self.log(f"{engine}: {counts.answered}/{counts.total} answered, {counts.pending} due, "
                 f"{counts.failed} failed" + (f"; {text}" if text else ""))
        self._last[engine] = time.monotonic()

    def update(self, engine: str, counts: Counts, interval: float, batch: int, *,
               todo: int | None = None, paused_until: float | None = None) -> None:
        now = time.monotonic()
        text = self.eta_text(engine, counts, interval, batch, todo=todo, paused_until=paused_until)
        paused = paused_until if paused_until is not None and paused_until > time.time() else None
        new_pause = paused is not None and paused != self._paused.get(engine)
        self._paused[engine] = paused
        if now - self._last.get(engine, 0.0) >= self.every or counts.pending == 0 or new_pause:
            self._last[engine] = now
            self.log(f"{engine}: {counts.answered}/{counts.total} answered, {counts.pending} due"
                     + (f"; {text}" if text else ""))

    def close(self) -> None:
        pass


class RichReporter(Reporter):
    """One rich progress bar per engine, with the ETA of :class:`EtaEstimator`."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True, highlight=False)
        self.progress = Progress(
            TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[eta]}"), TimeElapsedColumn(), console=self.console,
        )
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def log(self, message: str) -> None:
        self.console.print(escaped(message), markup=False, highlight=False, soft_wrap=True)

    def start(self, engine: str, counts: Counts, interval: float, batch: int, *,
              todo: int | None = None, paused_until: float | None = None) -> None:
        self.tasks[engine] = self.progress.add_task(
            engine, total=counts.total, completed=counts.answered + counts.failed,
            eta=self.eta_text(engine, counts, interval, batch, todo=todo, paused_until=paused_until),
        )

    def update(self, engine: str, counts: Counts, interval: float, batch: int, *,
               todo: int | None = None, paused_until: float | None = None) -> None:
        self.progress.update(self.tasks[engine], completed=counts.answered + counts.failed,
                             eta=self.eta_text(engine, counts, interval, batch, todo=todo,
                                               paused_until=paused_until))

    def close(self) -> None:
        self.progress.stop()


def eta(pending: int, interval: float, batch: int) -> float:
    """Seconds to send ``pending`` texts at the pacing interval (requests of ``batch`` texts):
    the pacing bound, a lower bound on the time left."""
    return -(-pending // max(1, batch)) * interval


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    m, s = divmod(seconds, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"



def summary_lines(summary: CrawlSummary) -> list[str]:
    lines = []
    for r in summary.results:
        state = r.stopped or ("done" if r.counts.pending == 0 else "incomplete")
        lines.append(
            f"{r.engine} [{r.label}, epoch {r.epoch}, {r.rate}]: {r.answered_now} answered now, "
            f"{r.counts.answered}/{r.counts.total} answered in all, {r.counts.failed} failed, "
            f"{r.counts.pending} due; {r.attempts} attempts; {state}"
            + (f"; {r.outages} outage answer(s)" if r.outages else "")
        )
        if r.stop_line:
            lines.append(r.stop_line)
    lines.append(f"crawl {summary.crawl_id} finished in {fmt_duration(summary.elapsed)}: exit {summary.exit_code}")
    return lines

