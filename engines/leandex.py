"""LeanDex (Project Numina): ``GET https://leandex.projectnumina.ai/api/v1/search`` as an SSE stream (ENGINE-APIS.md §8.4).

Query ``q``, ``limit``, ``generate_query=False`` and ``analyze_result=False`` (capital F,
as the Numina fork of lean-lsp-mcp and the clients built on it send: with both LLM stages
off LeanDex is a plain, deterministic retriever), ``Accept: text/event-stream``. The
answer is a Server-Sent-Events stream (:mod:`engines.sse`) of pipeline stages; the
**last** ``data:`` event's ``data.search_results`` is the answer, in rank order, no
score. An event carrying ``error`` is a failure; a stream that ends without a
``data.search_results`` event is a malformed answer (a parse error, retried). Both item
shapes in the wild are read: the statement group's ``primary_declaration.lean_name``
and LeanExplore v2's ``name`` (:func:`engines.leanexplore.result_name`).

Errors: nothing is documented; 5xx (Cloudflare's 522 included) is an outage.

``ENGINES_LEANDEX_API_KEY``, when set, is sent as ``Authorization: Bearer`` under
LeanExplore's rules: only over https, only to the public LeanDex host, read when the
request is built and never stored. Courtesy rate 3 requests / 30 s (the fork's
commented-out limiter; the WikiLean client throttles to about that, §8.4).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping
from urllib.parse import urlsplit

import httpx

from engines.jsonbody import snippet
from engines.leanexplore import result_name
from engines.protocol import AskedFor, EngineDefaults, EngineHTTPError, EngineParseError, HitList
from engines.rates import Rate
from engines.remote import RemoteAdapter
from engines.sse import EVENT_STREAM, parse_sse

API_KEY_ENV = "ENGINES_LEANDEX_API_KEY"


class LeanDexAdapter(RemoteAdapter):
    engine = "leandex"
    display_name = "LeanDex"
    summary = "LeanDex (Project Numina): hybrid retrieval over Mathlib, LLM stages off, answered as an SSE stream."
    stand_in = "engines.emulate.leandex:LeanDexAPI"
    transport = "sse"
    accepts = (EVENT_STREAM,)
    endpoint_version = "get-api-v1-search-sse-nollm"
    parser_version = 1
    DEFAULT_URL = "https://leandex.projectnumina.ai"
    SECRET_ENVS = (API_KEY_ENV,)
    defaults = EngineDefaults(rate=Rate(3, 30.0), timeout=60.0, result_cap=None, batch_size=1, num_results=50)

    def build_request(self, texts: list[str]) -> httpx.Request:
        self.check_texts(texts)
        query = {"q": texts[0], "limit": self.num_results, "generate_query": "False", "analyze_result": "False"}
        headers = self.request_headers()
        key = os.environ.get(API_KEY_ENV)
        default = urlsplit(self.DEFAULT_URL)
        if key and self.base_url.startswith("https://") and self.host == default.netloc:
            headers["Authorization"] = f"Bearer {key}"
        return self.new_request("GET", f"{self.base_url}/api/v1/search", params=query, headers=headers)

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``GET /api/v1/search?q=&limit=`` (LLM stages off) → the text and ``num_results``."""
        q = self.sent_to(method, url, "GET", "/api/v1/search")
        if not q or not q.get("q"):
            return None
        if any((q.get(flag) or ["False"])[0].lower() != "false" for flag in ("generate_query", "analyze_result")):
            return None  # an LLM stage on: another system, not this configuration
        return AskedFor(q["q"][:1], {"num_results": int(q["limit"][0])} if q.get("limit") else {})

    def outage_reason(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        if 500 <= status_code < 600:
            return f"HTTP {status_code}: {snippet(body, 100)}"
        return super().outage_reason(status_code, headers, body)

    def refusal(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        if status_code == 406:
            return f"leandex: HTTP 406: the server wants Accept: {EVENT_STREAM}: {snippet(body, 100)}"
        return None

    def parse(self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes) -> list[HitList]:
        """The last ``data:`` event's ``data.search_results``; an ``error`` event fails the answer."""
        if not 200 <= status_code < 300:
            raise EngineHTTPError(f"leandex: HTTP {status_code}: {snippet(body)}")
        head = body.lstrip()[:15].lower()
        if head.startswith((b"<!doctype", b"<html")):
            raise EngineParseError(f"leandex: HTML page instead of an event stream: {snippet(body)}")
        last: Any = None
        for i, event in enumerate(parse_sse(body, flush_partial=True)):
            try:
                data = json.loads(event.data)
            except (ValueError, RecursionError):
                raise EngineParseError(f"leandex: event {i + 1} is not JSON: {event.data[:100]!r}") from None
            if isinstance(data, dict) and "error" in data:
                raise EngineHTTPError(f"leandex: error event: {data['error']!r:.200}")
            last = data
        if last is None:
            raise EngineParseError(f"leandex: no data: event in the stream ({len(body)} bytes): {snippet(body, 80)}")
        inner = last.get("data") if isinstance(last, dict) else None
        results = inner.get("search_results") if isinstance(inner, dict) else None
        if not isinstance(results, list):
            keys = sorted(last)[:8] if isinstance(last, dict) else type(last).__name__
            raise EngineParseError(f"leandex: the last event has no data.search_results list ({keys}); "
                                   "the stream ended early?")
        return [self.hit_list(results)]

    def item_name(self, item: Any) -> str:
        return result_name(item)
