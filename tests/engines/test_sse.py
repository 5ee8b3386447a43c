"""engines/sse.py: the event-stream reader, whole and split across reads at every byte."""

from __future__ import annotations

import asyncio
import json

import pytest

from engines.sse import SSEEvent, SSEParser, aiter_sse, is_event_stream, parse_sse

STREAM = (
    "\ufeff: a comment, ignored\r\n"
    "event: stage\r\n"
    "data: {\"stage\": \"generate_query\"}\r\n"
    "\r\n"
    "id: 7\n"
    "data:{\"a\": 1,\n"
    "data:  \"b\": \"⊢ ∀ n, n + 0 = n\"}\n"
    "\n"
    "retry: 3000\r"
    "data\r"
    "\r"
    "event: only-an-event-field\n"
    "\n"
    "data: {\"data\": {\"search_results\": [{\"name\": \"Nat.add_zero\"}]}}\n"
    "\n"
).encode("utf-8")

EXPECTED = [
    SSEEvent('{"stage": "generate_query"}', "stage", None, None),
    SSEEvent('{"a": 1,\n "b": "⊢ ∀ n, n + 0 = n"}', "message", "7", None),
    SSEEvent("", "message", "7", 3000),
    SSEEvent('{"data": {"search_results": [{"name": "Nat.add_zero"}]}}', "message", "7", 3000),
]


def test_whole_stream():
    assert parse_sse(STREAM) == EXPECTED
    assert json.loads(parse_sse(STREAM)[-1].data)["data"]["search_results"][0]["name"] == "Nat.add_zero"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_split_across_reads_at_any_size(size):
    chunks = [STREAM[i:i + size] for i in range(0, len(STREAM), size)]
    assert parse_sse(chunks) == EXPECTED


def test_every_two_way_split():
    # CR at the end of one read + LF at the start of the next is one line end; a
    # multi-byte character (⊢, ∀, the BOM) cut in two is whole again.
    for cut in range(len(STREAM) + 1):
        assert parse_sse([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_feed_returns_events_as_their_blank_line_arrives():
    p = SSEParser()
    assert p.feed(b"data: one\n") == []
    assert p.feed(b"\n") == [SSEEvent("one")]
    assert p.feed(b"data: two\r") == []
    assert p.feed(b"\r") == [SSEEvent("two")]  # CR CR: a line end, then a blank line
    assert p.feed(b"\n") == []  # ... and this LF is a blank line with no open event
    assert p.close() == []


def test_unterminated_last_event_is_discarded_unless_flushed():
    body = b"data: first\n\ndata: cut"
    assert parse_sse(body) == [SSEEvent("first")]
    assert parse_sse(body, flush_partial=True) == [SSEEvent("first"), SSEEvent("cut")]


def test_invalid_utf8_and_bad_fields():
    body = b"data: caf\xc3\n\nid: a\x00b\nretry: 12x\ndata: x\n\n"
    assert parse_sse(body) == [SSEEvent("caf\ufffd"), SSEEvent("x")]


def test_aiter_sse():
    async def chunks():
        for i in range(0, len(STREAM), 4):
            yield STREAM[i:i + 4]

    async def collect():
        return [e async for e in aiter_sse(chunks())]

    assert asyncio.run(collect()) == EXPECTED


def test_is_event_stream():
    assert is_event_stream({"Content-Type": "text/event-stream; charset=utf-8"})
    assert is_event_stream({"content-type": "TEXT/EVENT-STREAM"})
    assert not is_event_stream({"content-type": "application/json"})
    assert not is_event_stream({})
