"""Courtesy pacing per engine host: a sliding-window log plus a minimum spacing.

A limit "n requests per T seconds" means that no window of length T holds more than n
sends to the host. A token bucket such as ``aiolimiter.AsyncLimiter(n, T)`` does not
keep that promise (after an idle period it lets up to 2n - 1 requests into one window)
and keeps no send log that several processes and a restart could share, so the crawler
paces with its own code, in four rooms:

- ``rule``: the rule itself, pure functions. A send at t is allowed only when
  t >= (n-th most recent send) + T + margin (the window, on actual send times),
  t >= (last send) + T/n (the spacing: no bursts, even after an idle period; counted
  from the slot the last send was planned for, so timer lateness does not pile up), and
  t >= the host's ``paused_until`` (a 429, a Retry-After or an outage pauses the whole
  host). The sustained rate is n per (T + margin).
- ``pacer``: :class:`Pacer`, one per host, taking the slot just before the HTTP call
  and then recording when the request actually left.
- ``ledger``: the :class:`Ledger` protocol and :func:`ledger_for`, which picks where the
  send times live. :class:`MemoryLedger` (``memory``) keeps them in memory;
  :class:`ExclusiveLedger` (``exclusive``), :class:`SharedSqlLedger` (``shared``) and
  :class:`PgLedger` (``postgres``) keep them in the ``send_log`` / ``host_state``
  tables (shared code in ``sql``), so a restart right after a burst reloads them, and
  processes sharing one database share one budget per host: a grant checks the window
  and inserts the send under a lock on the host's ``host_state`` row.
- A send is written *pending* at its grant and, for the window, counts as leaving "now"
  for every other reader until its sender records the departure, so a sender the
  machine holds up between grant and departure cannot make another worker's window
  start early (the spacing T/n counts from its grant: :func:`window_span`).

Everything the rest of the crawler uses is importable from here.
"""

from crawler.pacing.exclusive import ExclusiveLedger
from crawler.pacing.ledger import DbLedger, Ledger, ledger_for
from crawler.pacing.memory import MemoryLedger
from crawler.pacing.pacer import Clock, DeadlineReached, Pacer, PacerStats, SystemClock
from crawler.pacing.postgres import PgLedger
from crawler.pacing.rule import (
    PAUSE_MAX,
    PENDING_MAX,
    default_margin,
    earliest_send,
    earliest_send_span,
    max_in_window,
    outage_backoff,
    parse_rate,
    window_span,
)
from crawler.pacing.shared import SharedSqlLedger
from crawler.pacing.sql import SqlLedger

__all__ = [
    "PAUSE_MAX", "PENDING_MAX", "Clock", "DbLedger", "DeadlineReached", "ExclusiveLedger", "Ledger",
    "MemoryLedger", "Pacer", "PacerStats", "PgLedger", "SharedSqlLedger", "SqlLedger", "SystemClock",
    "default_margin", "earliest_send", "earliest_send_span", "ledger_for", "max_in_window",
    "outage_backoff", "parse_rate", "window_span",
]
