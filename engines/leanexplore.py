"""LeanExplore adapter, API v2: ``GET https://www.leanexplore.com/api/v2/search?q=&limit=`` (ENGINE-APIS.md §3).

Optional ``packages`` (a list, sent comma-separated as the official client does). The
answer is ``{"query", "results": [...], "count", "processing_time_ms"}``; each result
has a dotted ``name`` and a ``dependencies`` field that is a JSON array *encoded in a
string*: the raw item keeps the string and gains ``dependencies_list`` (decoded) when
it decodes. ``count`` is ignored; what came back is ``len(results)``.

The service has needed no key since v1.3.0 (2026-08-02). A key in
``ENGINES_LEANEXPLORE_API_KEY`` is still sent as ``Authorization: Bearer`` — but only to
the public LeanExplore host, never to a stand-in or mirror, and it is read when the
request is built, so it is never stored on the adapter, in its identity, or in logs.
Default courtesy rate 24 requests / 60 s (the reported server limit is 30 / min).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping
from urllib.parse import urlsplit

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

API_KEY_ENV = "ENGINES_LEANEXPLORE_API_KEY"


class LeanExploreAdapter(RemoteAdapter):
    engine = "leanexplore"
    endpoint_version = "api-v2-search"
    parser_version = 1
    DEFAULT_URL = "https://www.leanexplore.com/api/v2"
    PARAMS = {"packages": None}
    SECRET_ENVS = (API_KEY_ENV,)
    defaults = EngineDefaults(rate=Rate(24, 60.0), timeout=20.0, result_cap=None, batch_size=1, num_results=50)

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        super().__init__(base_url, **params)
        pk = self.params["packages"]
        if isinstance(pk, str):
            pk = [p.strip() for p in pk.split(",") if p.strip()]
        # Sorted so that the same set of packages is one configuration.
        self.params["packages"] = sorted(pk) if pk else None

    def build_request(self, texts: list[str]) -> httpx.Request:
        self._check_texts(texts)
        query: dict[str, Any] = {"q": texts[0], "limit": self.num_results}
        if self.params["packages"]:
            query["packages"] = ",".join(self.params["packages"])
        headers = self._headers()
        key = os.environ.get(API_KEY_ENV)
        if key and self.host == urlsplit(self.DEFAULT_URL).netloc:
            headers["Authorization"] = f"Bearer {key}"
        return self._request("GET", f"{self.base_url}/search", params=query, headers=headers)

    def parse(
        self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes
    ) -> list[list[ParsedHit]]:
        data = decode_json_object(self.engine, status_code, headers, body)
        if "msg" in data and "results" not in data:
            raise EngineHTTPError(f"leanexplore: error in body: {data['msg']!r:.200}")
        results = data.get("results")
        if not isinstance(results, list):
            raise EngineParseError(
                f"leanexplore: `results` is {type(results).__name__}, expected a list (keys {sorted(data)[:8]})"
            )
        hits = []
        for i, item in enumerate(results):
            if not isinstance(item, dict):
                raise EngineParseError(f"leanexplore: result {i + 1} is {type(item).__name__}, expected an object")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise EngineParseError(f"leanexplore: result {i + 1} has no string `name` (keys {sorted(item)[:10]})")
            raw = dict(item)
            deps = item.get("dependencies")
            if isinstance(deps, str):
                try:
                    decoded = json.loads(deps)
                except json.JSONDecodeError:
                    decoded = None  # kept as the string; dependencies are informative only
                if isinstance(decoded, list):
                    raw["dependencies_list"] = decoded
            hits.append(ParsedHit(rank=i + 1, name=name, raw=raw))
        return [hits]
