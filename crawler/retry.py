"""Retrying a fetch: the policy, the wait between attempts, a server's ``Retry-After``.

(:mod:`crawler.fetch` classifies each attempt; these are the pieces it retries with.)
"""

from __future__ import annotations

import email.utils
import math
import random
import re
from dataclasses import dataclass
from typing import Any, Callable

from crawler.pacing import PAUSE_MAX

# The longest pause a server's Retry-After can set: a server asking for more is asked
# again after this (the value is untrusted input: "1e400" or "99999999999" must not
# pause a host for ever, nor store Inf).
RETRY_AFTER_MAX = PAUSE_MAX
_DELTA_SECONDS = re.compile(r"\d{1,20}(?:\.\d{1,9})?")


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date,
    capped at :data:`RETRY_AFTER_MAX`; None for anything else (``1e400``, ``-5``, ``nan``)."""
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return min(RETRY_AFTER_MAX, float(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
        wait = when.timestamp() - now if when is not None else None
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if wait is None or not math.isfinite(wait):
        return None
    return min(RETRY_AFTER_MAX, max(0.0, wait))


@dataclass
class RetryPolicy:
    max_attempts: int = 5
    max_delay: float = 600.0  # seconds since the first attempt of a batch
    backoff_initial: float = 2.0
    backoff_max: float = 60.0
    # The longest pause (Retry-After or outage backoff) a run waits out without a
    # --deadline; a longer one stops that engine for this run (exit 3), the pause is kept.
    retry_after_cap: float = 1800.0
    breaker_threshold: int = 10  # consecutive failed attempts that stop an engine
    outage_initial: float = 30.0  # first pause of a host after an outage (doubles)
    outage_max: float = 1800.0  # the backoff cap: a host that is down is tried every 30 min


class Retryable(Exception):
    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EngineBroken(Exception):
    """The circuit breaker opened (K consecutive failed attempts; outages and pauses do not count)."""


class Wait:
    """Retry-After when the server sent one, else jittered exponential backoff."""

    def __init__(self, policy: RetryPolicy, floor: float, rng: random.Random) -> None:
        self.policy = policy
        self.floor = floor
        self.rng = rng

    def __call__(self, retry_state: Any) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, Retryable) and exc.retry_after is not None:
            # The pause is in host_state: the pacer holds the next grant until it ends
            # (and stops the engine when it ends past the deadline), so no sleep here.
            return self.floor
        p = self.policy
        base = min(p.backoff_max, p.backoff_initial * 2 ** (retry_state.attempt_number - 1))
        return base + self.rng.uniform(0, min(base, p.backoff_initial))


def one_prefix(engine: str, say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` with the engine named once: an adapter's message that names its engine itself
    ("loogle: query error: …") is not shown as "loogle: loogle: query error: …"."""
    again = re.compile(rf"(?<=: ){re.escape(engine)}: ")

    def said(message: str) -> None:
        head = f"{engine}: "
        if message.startswith(head):
            message = head + again.sub("", message[len(head):].removeprefix(head))
        say(message)

    return said
