"""Loogle adapter: ``GET https://loogle.lean-lang.org/json?q=`` (ENGINE-APIS.md §5).

Success is ``{"header", "heartbeats", "count", "hits": [{"name", "type", "module",
"doc"}], "suggestions"?}`` with at most 200 hits; ``count`` is the total number of
matches, so what came back is ``len(hits)``. Query errors arrive as **HTTP 200 with an
``error`` key** and are failures (:class:`EngineHTTPError`), never empty results; a body
of ``{}`` means no search ran (empty or repeated ``q``) and is a parse error.

Loogle takes no result count, so ``num_results`` is not part of the identity. Courtesy
rate 3 requests / 30 s (lean-lsp-mcp); overload is answered with 503 + ``Retry-After: 5``.
The descriptive User-Agent matters: Loogle refuses ``Python-urllib/3.12`` with 403.
"""

from __future__ import annotations

from typing import Any, Mapping

import httpx

from engines.base import (
    EngineDefaults,
    EngineHTTPError,
    EngineParseError,
    ParsedHit,
    Rate,
    RemoteAdapter,
    decode_json_object,
)

MAX_HITS = 200  # server default --max-results


class LoogleAdapter(RemoteAdapter):
    engine = "loogle"
    endpoint_version = "get-json-q"
    parser_version = 1
    DEFAULT_URL = "https://loogle.lean-lang.org"
    defaults = EngineDefaults(rate=Rate(3, 30.0), timeout=20.0, result_cap=MAX_HITS, batch_size=1, num_results=MAX_HITS)

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        ident.pop("num_results")  # not sent: Loogle always answers up to 200 hits
        return ident

    def build_request(self, texts: list[str]) -> httpx.Request:
        self._check_texts(texts)
        return self._request("GET", f"{self.base_url}/json", params={"q": texts[0]}, headers=self._headers())

    def parse(
        self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes
    ) -> list[list[ParsedHit]]:
        data = decode_json_object(self.engine, status_code, headers, body)
        if "error" in data:
            raise EngineHTTPError(f"loogle: query error: {data['error']!r:.300}")
        hits_in = data.get("hits")
        if not isinstance(hits_in, list):
            what = "empty object (no search ran: empty or repeated q)" if not data else f"keys {sorted(data)[:8]}"
            raise EngineParseError(f"loogle: `hits` is {type(hits_in).__name__}, expected a list ({what})")
        hits = []
        for i, item in enumerate(hits_in):
            if not isinstance(item, dict):
                raise EngineParseError(f"loogle: hit {i + 1} is {type(item).__name__}, expected an object")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise EngineParseError(f"loogle: hit {i + 1} has no string `name` (keys {sorted(item)[:10]})")
            hits.append(ParsedHit(rank=i + 1, name=name, raw=item))
        return [hits]
