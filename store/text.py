"""Remote text made safe: to store (:func:`clean_text`, :func:`clean_json`) and to print
(:func:`escaped`).

Storing. A decoded JSON body may hold strings no database column can take: a lone UTF-16
surrogate (``"\\ud800"``: not encodable as UTF-8, so SQLite's driver raises) and NUL
(``"\\u0000"``: PostgreSQL text and jsonb refuse it). Both are replaced by U+FFFD
(REPLACEMENT CHARACTER) once, in the parse path, so a body stores and scores the same
on SQLite and PostgreSQL. The raw bytes stay archived unchanged.

Printing. Control characters from remote content (a terminal escape ``ESC]0;...``, a
carriage return that overwrites a progress line) are shown escaped (``\\x1b``, ``\\r``)
in every table and log line, whether or not the output is a terminal: :func:`escaped` is
the one function that renders a name (a run, a benchmark style, a system id, a record
URI) or any other remote text for a terminal. TSV fields use :func:`tsv_field` (the same
escapes, and a backslash doubled); JSON output keeps JSON's escaping.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"

# NUL and lone surrogates (a valid pair never appears in a Python str decoded from UTF-8
# or from JSON: json joins escaped pairs into one code point).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# C0 controls, DEL, C1 controls, and the bidirectional overrides/isolates that reorder
# what a terminal shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def clean_text(s: str) -> str:
    """``s`` with NUL and lone surrogates replaced by U+FFFD (what a text column can store)."""
    return _UNSTORABLE.sub(REPLACEMENT, s) if _UNSTORABLE.search(s) else s


def clean_json(value: Any) -> Any:
    """A decoded JSON value with :func:`clean_text` applied to every string and key.

    Iterative (a deep value must not recurse); returns ``value`` itself when nothing
    needed cleaning."""
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (list, dict)):
        return value
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        v = parent[key]
        if isinstance(v, str):
            if _UNSTORABLE.search(v):
                parent[key] = clean_text(v)
        elif isinstance(v, list):
            stack.extend((v, i) for i in range(len(v)))
        elif isinstance(v, dict):
            if any(_UNSTORABLE.search(k) for k in v):
                fixed = {clean_text(k): x for k, x in v.items()}
                v.clear()
                v.update(fixed)
            stack.extend((v, k) for k in v)
    return root[0]


def _escape(m: re.Match) -> str:
    c = m.group(0)
    named = _NAMED.get(c)
    if named is not None:
        return named
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escaped(s: Any) -> str:
    """``str(s)`` with control characters shown as escapes (``\\x1b``, ``\\n``), for a
    table cell or a log line. Printable text, including non-ASCII, is unchanged."""
    s = s if isinstance(s, str) else str(s)
    if not _CONTROL.search(s):
        return s
    return _CONTROL.sub(_escape, s)


def tsv_field(s: Any) -> str:
    """``str(s)`` as one TSV field: a backslash doubled, then tab, newline, carriage return and
    every other control character escaped as :func:`escaped` shows them (``\\t``, ``\\n``,
    ``\\x1b``), so a field never splits a line or a row and the text is recoverable."""
    s = s if isinstance(s, str) else str(s)
    return escaped(s.replace("\\", "\\\\")) if ("\\" in s or _CONTROL.search(s)) else s


def utc_clock(t: float, now: float, *, seconds: bool = False) -> str:
    """A unix time as ``HH:MM`` (UTC) when it falls on ``now``'s UTC day, else with its
    date (``2026-12-03 07:16``); a time no calendar can show (Inf, NaN, year > 9999)
    says so instead of raising."""
    import datetime as dt
    import math

    fmt = "%H:%M:%S" if seconds else "%H:%M"
    try:
        when = dt.datetime.fromtimestamp(t, dt.timezone.utc)
        today = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    except (OverflowError, ValueError, OSError):
        return "(a time beyond the calendar)" if not math.isnan(t) else "(not a time)"
    return when.strftime(fmt) if when.date() == today else when.strftime(f"%Y-%m-%d {fmt}")
