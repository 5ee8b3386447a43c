"""Server-sent events: split a ``text/event-stream`` body into events (no I/O).

Events end at a blank line (``\\r\\n\\r\\n``, ``\\n\\n`` or ``\\r\\r``); each ``data:`` line adds
one line to the event's data, ``event:`` names it (default ``message``), comments (``:``)
and other fields are skipped. A last event without its blank line is kept (a stream cut
short still shows what arrived); what an event means is the caller's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Event:
    event: str
    data: str
    id: str | None = None


def is_event_stream(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header value is ``text/event-stream``."""
    return (content_type or "").split(";")[0].strip().lower() == "text/event-stream"


def events(body: bytes | str) -> list[Event]:
    """The events of an SSE body, in order (``data`` lines joined with ``\\n``)."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    out: list[Event] = []
    name, data, ident = "", [], None
    for line in _LINE.split(text):
        if not line:
            if data or name:
                out.append(Event(name or "message", "\n".join(data), ident))
            name, data, ident = "", [], None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id":
            ident = value
    if data or name:
        out.append(Event(name or "message", "\n".join(data), ident))
    return out
