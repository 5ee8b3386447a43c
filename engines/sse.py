"""Server-Sent Events: reading a ``text/event-stream`` body, whole or as it arrives.

One reader for every engine that answers with an event stream (LeanDex; MCP servers in
SSE mode). It follows the WHATWG "event stream interpretation" rules:

- lines end with CRLF, LF or a lone CR — a CR that ends one read and the LF that starts
  the next are one line end (:class:`SSEParser` keeps the pending CR);
- a line starting with ``:`` is a comment; ``field: value`` loses one leading space of
  the value; a line without ``:`` is a field with an empty value;
- ``data`` lines of one event are joined with ``\\n``; a blank line dispatches the event
  (an event with no ``data`` line is not dispatched); ``event`` defaults to ``message``;
  ``id`` holding NUL is ignored; ``retry`` only when all digits;
- a UTF-8 BOM at the very start is skipped; bytes are decoded per line, so a multi-byte
  character split across reads is whole again; invalid UTF-8 becomes U+FFFD;
- an event still open when the stream ends (no blank line after it) is not dispatched —
  unless ``flush_partial=True`` (:func:`parse_sse`), for servers that end a stream
  without the final blank line.

:func:`parse_sse` reads an archived body; :class:`SSEParser` is fed reads as they come
(``feed`` returns the events completed so far); :func:`aiter_sse` wraps an async byte
iterator (``httpx.Response.aiter_bytes()``). :func:`is_event_stream` tells an SSE
response from its ``Content-Type``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Iterable, Mapping

EVENT_STREAM = "text/event-stream"
_BOM = "\ufeff"


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its type (``message`` by default), data, last event id, retry (ms)."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEParser:
    """An incremental event-stream parser: ``feed(bytes)`` → the events completed by that read."""

    def __init__(self) -> None:
        self._buf = b""
        self._pending_cr = False  # the last read ended with CR: a leading LF next belongs to it
        self._started = False  # the BOM check is done
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse one read; the events whose blank line it completed, in order."""
        if not chunk:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk
        out: list[SSEEvent] = []
        start = 0
        n = len(buf)
        while True:
            cr, lf = buf.find(b"\r", start), buf.find(b"\n", start)
            if cr < 0 and lf < 0:
                break
            if lf < 0 or 0 <= cr < lf:
                end, nxt = cr, cr + 1
                if nxt == n:  # CR at the end of this read: its LF may start the next one
                    self._pending_cr = True
                elif buf[nxt:nxt + 1] == b"\n":
                    nxt += 1
            else:
                end, nxt = lf, lf + 1
            event = self._line(buf[start:end])
            if event is not None:
                out.append(event)
            start = nxt
        self._buf = buf[start:]
        return out

    def close(self, *, flush_partial: bool = False) -> list[SSEEvent]:
        """The end of the stream: an unterminated last line is processed; the open event is
        dispatched only with ``flush_partial`` (the standard discards it)."""
        out: list[SSEEvent] = []
        if self._buf:
            rest, self._buf = self._buf, b""
            event = self._line(rest)
            if event is not None:
                out.append(event)
        if flush_partial:
            event = self._dispatch()
            if event is not None:
                out.append(event)
        return out

    def _line(self, raw: bytes) -> SSEEvent | None:
        line = raw.decode("utf-8", "replace")
        if not self._started:
            self._started = True
            line = line.removeprefix(_BOM)
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SSEEvent("\n".join(data), event or "message", self._last_id, self._retry)


def parse_sse(body: bytes | Iterable[bytes], *, flush_partial: bool = False) -> list[SSEEvent]:
    """The events of a whole stream (bytes, or the reads that made it up, in order)."""
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in [body] if isinstance(body, (bytes, bytearray, memoryview)) else body:
        events += parser.feed(bytes(chunk))
    return events + parser.close(flush_partial=flush_partial)


async def aiter_sse(chunks: AsyncIterator[bytes], *, flush_partial: bool = False) -> AsyncIterator[SSEEvent]:
    """The events of a stream read as it arrives (``response.aiter_bytes()``)."""
    parser = SSEParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.close(flush_partial=flush_partial):
        yield event


def is_event_stream(headers: Mapping[str, str]) -> bool:
    """Whether a response's ``Content-Type`` is ``text/event-stream`` (parameters ignored)."""
    for key, value in dict(headers).items():
        if key.lower() == "content-type":
            return value.split(";", 1)[0].strip().lower() == EVENT_STREAM
    return False
