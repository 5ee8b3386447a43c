"""Axiomatic Octo: the MCP tool ``search_lean`` at ``https://search.octo.axiomatic-ai.com/mcp/`` (ENGINE-APIS.md §10.11).

The trailing slash is kept. The hosted server's code and input schema are not public: the
crawler reads ``tools/list`` once per crawl (archived), takes the query argument from the
schema (a required string property; one line if there is none) and checks the schema's
sha256 against the one in the identity (``schema_sha256``; with ``scope``, default
``mathlib``, and ``rerank``, default true): a changed schema is a new configuration,
never mixed into an old one. The default hash is that of the schema the vendor's local
server (``axiomatic-octo==0.3.3``, ``protocol.py``) gives, which the stand-in serves.
Hits come from ``structuredContent``'s list of hit objects carrying ``name`` (``hits``
in the local server), never from the markdown text block. A tool error saying "limit
reached" is a pause, not an answer: until 00:00 UTC for the daily ceiling, one hour for
the hourly allowance. No rate is published: 1 request / 3 s (reranking "adds a few seconds").
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Mapping

from engines.base import EngineDefaults, EngineOutage, EngineParseError, Rate
from engines.mcpwire import McpAdapter, canonical, rpc_message

# sha256 of the canonical JSON of search_lean's inputSchema as the stand-in serves it.
KNOWN_SCHEMA_SHA256 = "ddc26f2a51e270ad61e8c7e171b272e7aa86d5b4155c0215570dac85dc0f9f28"


def schema_sha256(schema: Any) -> str:
    return hashlib.sha256(canonical(schema).encode("utf-8")).hexdigest()


def limit_pause(text: str, now: float) -> float | None:
    """Seconds to pause for a "limit reached" tool error: to 00:00 UTC (daily), else one hour."""
    low = text.lower()
    if "limit reached" not in low:
        return None
    if "00:00" in low or "daily" in low:
        t = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        midnight = (t + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        return max(1.0, (midnight - t).total_seconds())
    return 3600.0


class OctoAdapter(McpAdapter):
    engine = "octo"
    display_name = "Octo"
    summary = "Axiomatic Octo, MCP tool search_lean (schema read from tools/list, its sha256 in the identity)."
    DEFAULT_URL = "https://search.octo.axiomatic-ai.com/mcp/"
    defaults = EngineDefaults(rate=Rate(1, 3.0), timeout=90.0, result_cap=None, batch_size=1, num_results=20)
    stand_in = "engines.emulate.mcp_apis:OctoAPI"
    endpoint_version = "mcp-tools-call-search_lean-v1"
    parser_version = 1
    tool = "search_lean"
    PARAMS = {"era": "auto", "scope": "mathlib", "rerank": True, "schema_sha256": KNOWN_SCHEMA_SHA256}
    LIMIT_KEYS = ("limit", "k", "n", "num_results", "top_k")

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        super().__init__(base_url, **params)
        if self.base_url != self.DEFAULT_URL and self.DEFAULT_URL.startswith(self.base_url):
            self.base_url = self.DEFAULT_URL  # check_base_url dropped the trailing slash: keep it
        self.params["rerank"] = str(self.params["rerank"]).lower() not in ("false", "0", "no")
        self.schema: dict[str, Any] | None = None

    def arguments(self, text: str) -> dict[str, Any]:
        args: dict[str, Any] = {self.query_key: text, "scope": self.params["scope"], "rerank": self.params["rerank"]}
        props = (self.schema or {}).get("properties") or {"limit": {}}
        limit = next((k for k in self.LIMIT_KEYS if k in props), None)
        if limit is not None:
            args[limit] = self.num_results
        return args

    def use_tools(self, tools: dict[str, Any]) -> str | None:
        tool = next((t for t in tools.get("tools") or [] if isinstance(t, dict) and t.get("name") == self.tool), None)
        if tool is None:
            return f"octo: the server lists no tool {self.tool!r} (tools/list archived)"
        schema = tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict) else {}
        digest = schema_sha256(schema)
        if digest != self.params["schema_sha256"]:
            return (f"octo: search_lean's input schema changed (sha256 {digest}, the configuration says "
                    f"{self.params['schema_sha256']}); crawl with --param octo.schema_sha256={digest} (a new configuration)")
        props = schema.get("properties") or {}
        strings = [k for k in schema.get("required") or [] if (props.get(k) or {}).get("type") == "string"]
        if not strings:
            return "octo: search_lean's schema has no required string property to carry the query (tools/list archived)"
        self.query_key = "query" if "query" in strings else strings[0]
        self.schema = schema
        return None

    def params_shown(self, arguments: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: arguments[k] for k in ("scope", "rerank") if k in arguments}
        limit = next((k for k in self.LIMIT_KEYS if k in arguments), None)
        if limit is not None:
            out["num_results"] = int(arguments[limit])
        return out

    def read_request(self, method: str, url: str, body: bytes | None):
        if self.query_key not in json.loads(body or b"{}").get("params", {}).get("arguments", {}):
            try:
                args = json.loads(body or b"{}")["params"]["arguments"]
                self.query_key = next(k for k, v in args.items() if isinstance(v, str) and k not in ("scope", "version"))
            except (ValueError, KeyError, TypeError, StopIteration, AttributeError):
                return None
        return super().read_request(method, url, body)

    def tool_error(self, text: str) -> None:
        if "limit reached" in text.lower():
            raise EngineOutage(f"octo: {text[:200]}")

    def pause_seconds(self, status_code: int, headers: Mapping[str, str], body: bytes, now: float) -> float | None:
        if status_code != 200 or b"limit reached" not in body.lower():
            return None
        try:
            result = rpc_message(self.engine, headers, body).get("result") or {}
        except EngineParseError:
            return None
        if not result.get("isError"):
            return None
        text = " ".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))
        return limit_pause(text, now)

    def items(self, sc: dict[str, Any]) -> list[Any]:
        hits = sc.get("hits")
        if isinstance(hits, list):
            return hits
        for value in sc.values():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value) \
                    and any("name" in v for v in value):
                return value
        if isinstance(hits, list) or any(isinstance(v, list) and not v for v in sc.values()):
            return []
        raise EngineParseError(f"octo: no list of hit objects in structuredContent (keys {sorted(sc)[:10]})")
