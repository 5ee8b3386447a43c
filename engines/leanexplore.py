"""LeanExplore adapter, API v2: ``GET https://www.leanexplore.com/api/v2/search?q=&limit=`` (ENGINE-APIS.md §3).

Optional ``packages`` (a list, sent comma-separated as the official client does). The
answer is ``{"query", "results": [...], "count", "processing_time_ms"}``; each result
has a dotted ``name`` and a ``dependencies`` field that is a JSON array *encoded in a
string*: the raw item keeps the string and gains ``dependencies_list`` (decoded) when
it decodes. ``count`` is ignored; what came back is ``len(results)``. Receipts that
lack ``dependencies``, ``informalization`` or ``processing_time_ms`` parse.

As the official client reads them, ``{}`` and ``{"results": []}`` are an empty answer.
API v1's response shape (statement groups named by ``primary_declaration.lean_name``,
ENGINE-APIS.md §8.2) parses too, in case the service rolls back. A result that is null
or has no name is dropped (``HitList.drop``); the others keep their ranks.

The service has needed no key since v1.3.0 (2026-08-02). A key in
``ENGINES_LEANEXPLORE_API_KEY`` is still sent as ``Authorization: Bearer`` — but only to
the public LeanExplore host, never to a stand-in or mirror, and it is read when the
request is built, so it is never stored on the adapter, in its identity, or in logs.
Default courtesy rate 24 requests / 60 s (Legendre leaderboard, the most conservative
known public client; the reported server limit is 30 / min; ENGINE-APIS.md §3.6).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping
from urllib.parse import urlsplit

import httpx

from engines.protocol import AskedFor, EngineDefaults, EngineParseError
from engines.rates import Rate
from engines.remote import RemoteAdapter

API_KEY_ENV = "ENGINES_LEANEXPLORE_API_KEY"


class LeanExploreAdapter(RemoteAdapter):
    engine = "leanexplore"
    display_name = "LeanExplore"
    summary = "LeanExplore (leanexplore.com, API v2): hybrid search over Mathlib and other packages."
    stand_in = "engines.emulate.apis:LeanExploreAPI"
    # The demo's stand-in leans on names and modules.
    demo_port = 47812
    demo_weights = {"name": 3, "signature": 1, "docstring": 0, "module": 2}
    json_object = True
    endpoint_version = "api-v2-search"
    # 2: tolerant items; `{}` is an empty answer; v1 statement groups parse.
    # 3: NUL and lone surrogates decode to U+FFFD; JSON too deep to decode is a parse error (issue 21).
    parser_version = 3
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
        self.check_texts(texts)
        query: dict[str, Any] = {"q": texts[0], "limit": self.num_results}
        if self.params["packages"]:
            query["packages"] = ",".join(self.params["packages"])
        headers = self.request_headers()
        key = os.environ.get(API_KEY_ENV)
        if key and self.host == urlsplit(self.DEFAULT_URL).netloc:
            headers["Authorization"] = f"Bearer {key}"
        return self.new_request("GET", f"{self.base_url}/search", params=query, headers=headers)

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``GET <base>/search?q=&limit=&packages=`` → the text, ``num_results`` and ``packages``."""
        q = self.sent_to(method, url, "GET", "/search")
        if not q or not q.get("q"):
            return None
        params: dict[str, Any] = {}
        if q.get("limit"):
            params["num_results"] = int(q["limit"][0])
        if q.get("packages"):
            params["packages"] = q["packages"][0]
        return AskedFor(q["q"][:1], params)

    def body_error(self, data: dict[str, Any]) -> str | None:
        if "msg" in data and "results" not in data:
            return f"error in body: {data['msg']!r:.200}"
        return None

    def items(self, data: dict[str, Any]) -> list[Any]:
        if "results" not in data and set(data) <= ENVELOPE_KEYS and not data.get("count"):
            # The official client reads a missing `results` as no results: `{}` is an empty answer.
            return []
        results = data.get("results")
        if not isinstance(results, list):
            raise EngineParseError(
                f"leanexplore: `results` is {type(results).__name__}, expected a list (keys {sorted(data)[:8]})"
            )
        return results

    def item_name(self, item: Any) -> str:
        return result_name(item)

    def item_raw(self, item: dict[str, Any]) -> dict[str, Any]:
        """The item, plus ``dependencies_list`` when its ``dependencies`` string decodes to a list."""
        raw = dict(item)
        deps = item.get("dependencies")
        if isinstance(deps, str):
            try:
                decoded = json.loads(deps)
            except json.JSONDecodeError:
                decoded = None  # kept as the string; dependencies are informative only
            if isinstance(decoded, list):
                raw["dependencies_list"] = decoded
        return raw


# Keys of the v2 (and v1) search envelope: an object with only these and no `results`
# is an empty answer; anything else without `results` is a changed schema.
ENVELOPE_KEYS = {"query", "count", "processing_time_ms", "packages_applied", "total_candidates_considered"}


def result_name(item: Any) -> str:
    """The dotted name of one result: v2 ``name``, or v1's ``primary_declaration.lean_name``."""
    if not isinstance(item, dict):
        raise EngineParseError(f"item is {type(item).__name__}, expected an object")
    name = item.get("name")
    if name is None and isinstance(item.get("primary_declaration"), dict):
        name = item["primary_declaration"].get("lean_name")  # API v1 statement group (§8.2)
    if not isinstance(name, str) or not name:
        raise EngineParseError(f"no string `name` (keys {sorted(item)[:10]})")
    return name
