"""The pacing rule itself: pure functions of a host's send history, no I/O, no clock.

A courtesy limit "n requests per T seconds" means that no window of length T ever holds
more than n sends to the host. A new send at time t is allowed when all three hold:

- the window: t >= (the n-th most recent send) + T + margin, counted on the times the
  requests actually left, so the bound holds by construction;
- the spacing: t >= (the most recent send) + T/n, so there are no bursts, not even after
  an idle period (the spacing only smooths; the window is the bound);
- the pause: t >= the host's ``paused_until`` (a 429, a Retry-After, an outage).

The sustained rate is therefore n per (T + margin). A granted send that has not left
yet counts, for the window, as leaving *now* (:func:`window_span`), for at most
:data:`PENDING_MAX` seconds. Every ledger (``crawler.pacing.ledger``) decides with these
functions, and the PostgreSQL server function ``engines_reserve`` (migrations 0005,
0006) repeats them line for line; the tests compare the two.
"""

from __future__ import annotations

from engines.base import Rate
from engines.base import parse_rate as _parse_rate

# The longest pause stored for a host (seconds from now): a Retry-After is untrusted input.
PAUSE_MAX = 86400.0

# How long a granted send counts as "may leave any moment" when its sender never
# corrects it (killed between grant and departure): then its recorded time counts.
PENDING_MAX = 10.0

parse_rate = _parse_rate  # "3/30s" -> Rate(3, 30.0); one parser for adapters and CLI


def default_margin(rate: Rate) -> float:
    """Safety margin added to the window: 1 % of T + 5 ms, at least 100 ms, at most 1 s.

    Send times are recorded when the request starts to leave (see ``Pacer.correct``),
    and a granted send that has not left yet counts as leaving *now* for every other
    worker (``send_log.pending``), so the time between a grant and the departure no
    longer eats into the window. What the margin still has to absorb is the jitter
    between the departure and the moment the server counts the request: measured with
    ``perf/pacing_load.py`` (3 workers on PostgreSQL, one CPU burner per core on a
    2-core machine already at load 6–9; 2026-12-01) as median 4–9 ms, p99 35–83 ms,
    max 44–116 ms. The grant-to-departure jitter on the same runs was median 12–22 ms,
    p99 165–343 ms, max 227–483 ms: what a margin alone would have had to cover before
    pending sends. The 100 ms floor covers the arrival jitter's observed tail;
    3/30s → 0.305 s, 24/60s → 0.605 s, 1/s and 20/2s → 0.1 s. The sustained rate is n
    per (T + margin). ``--margin`` sets it explicitly (e.g. 1 s for a jittery network).
    """
    return min(1.0, max(0.1, 0.005 + 0.01 * rate.period))


def earliest_send(
    history: list[float], paused_until: float | None, rate: Rate, margin: float,
    credit: tuple[float, float] | None = None,
) -> float:
    """The earliest time a new send is allowed, given the host's send history (any order).

    ``credit`` = (time of this pacer's last send, how late it left after its planned
    slot): when that send is still the newest, the spacing counts from its planned slot,
    so timer lateness does not accumulate send after send. The window bound always uses
    the actual send times.
    """
    t = paused_until or 0.0
    if history:
        recent = sorted(history)[-rate.n:]
        base = recent[-1]
        if credit is not None and credit[0] == base:
            base -= credit[1]
        t = max(t, base + rate.period / rate.n)
        if len(recent) >= rate.n:
            t = max(t, recent[0] + rate.period + margin)
    return t


def earliest_send_span(
    count: int, oldest: float | None, newest: float | None, paused_until: float | None, rate: Rate,
    margin: float, credit: tuple[float, float] | None = None,
) -> float:
    """:func:`earliest_send` from the last n sends reduced to (how many, oldest, newest):
    the window counts from ``oldest``, the spacing T/n from ``newest`` (see :func:`window_span`)."""
    t = paused_until or 0.0
    if count and newest is not None:
        base = newest
        if credit is not None and credit[0] == base:
            base -= credit[1]
        t = max(t, base + rate.period / rate.n)
        if count >= rate.n and oldest is not None:
            t = max(t, oldest + rate.period + margin)
    return t


def window_span(last: list, now: float) -> tuple[int, float | None, float | None]:
    """(how many, oldest, newest) of a host's last n sends ``[(sent_at, pending), ...]``
    for :func:`earliest_send_span`, as ``engines_reserve`` (migration 0006) computes them.

    The window (the hard bound: n per T + margin) counts a granted send that has not left
    yet as leaving *now*, so a sender held up between grant and departure cannot make the
    window start early. The spacing T/n (smoothing only) counts from the newest recorded
    time, a pending send's grant included: counting pending sends as "now" there too held
    every other request loop back while any grant was on its way out (a third of the
    grants of two workers were refused, each a round trip and a sleep), for no bound the
    window does not already give.
    """
    if not last:
        return 0, None, None
    lapsed = now - PENDING_MAX
    oldest = min(now if p and lapsed < t < now else t for t, p in last)
    return len(last), oldest, max(t for t, _ in last)


def outage_backoff(count: int, initial: float, cap: float, u: float) -> float:
    """Pause after the ``count``-th consecutive outage answer: ``initial`` doubling, capped.

    ``u`` in [0, 1) adds up to 25 % jitter (so workers that saw the same outage do not
    come back in lockstep); the cap holds after the jitter.
    """
    base = initial * 2.0 ** min(max(0, count - 1), 60)
    return min(cap, base * (1.0 + 0.25 * u))


def max_in_window(times: list[float], period: float) -> int:
    """The most sends inside any closed window [t, t + period] (stricter than half-open)."""
    ts = sorted(times)
    best = 0
    j = 0
    for i, t in enumerate(ts):
        while ts[j] < t - period:
            j += 1
        best = max(best, i - j + 1)
    return best
