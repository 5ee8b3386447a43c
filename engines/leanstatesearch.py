"""LeanStateSearch adapter: ``GET https://premise-search.com/api/search?query=&results=&rev=`` (ENGINE-APIS.md §6).

All three parameters are required. ``query`` must be a pretty-printed proof state
containing ``⊢``: the server answers any other query with 400 "The 'query' parameter
must be a valid Lean proof state" (§6.3). The benchmark texts are statements, not
goals, so a text without ``⊢`` is sent as the goal ``⊢ <text>`` (a goal with no
hypotheses: the closest proof state to a bare statement; how well the engine ranks
such goals is untested, §6.1). A text that already holds ``⊢`` is sent unchanged.
Read back (``read_request``, :func:`engines.queries.goal_text`), ``⊢ <statement>`` gives the statement.

``rev`` is the Lean/Mathlib revision searched, a result-changing parameter (part of the
identity); the default ``v4.22.0`` is lean-lsp-mcp's. ``results`` is ``num_results``.

Success is a bare JSON list of ``{"name", "formal_type", "module", "rev"}`` (no score);
an item that is null or has no name is dropped (``HitList.drop``), the others keep
their ranks. Errors are HTTP 400 with ``{"error", "schema": {"description", ...}}``:
a permanent failure for that text (:class:`EngineHTTPError`) whose message carries
both ``error`` and ``schema.description`` (the reason is split between them; a client
that expects a list fails on it, as LeanSearchClient did).

Courtesy rate 6 requests / 30 s (lean-lsp-mcp, §6.4). The public instance is being
retired (lean-lsp-mcp issue #225, 2026-09-02) and did not answer on 2026-09-28:
best-effort only.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import httpx

from engines.protocol import AskedFor, EngineDefaults, EngineHTTPError, EngineParseError
from engines.queries import goal_query, goal_text
from engines.rates import Rate
from engines.remote import RemoteAdapter
from store.errors import InputError

DEFAULT_REV = "v4.22.0"  # lean-lsp-mcp's default


def error_message(data: Any) -> str | None:
    """``"<error>: <schema.description>"`` of an error object, or None when ``data`` is none."""
    if not isinstance(data, dict) or "error" not in data:
        return None
    message = str(data["error"])
    schema = data.get("schema")
    if isinstance(schema, dict) and schema.get("description"):
        message += f": {schema['description']}"
    elif schema is not None:
        message += f": {json.dumps(schema, ensure_ascii=False)[:200]}"
    return message


class LeanStateSearchAdapter(RemoteAdapter):
    engine = "leanstatesearch"
    display_name = "LeanStateSearch"
    summary = "LeanStateSearch (premise-search.com): premise search from a proof state (best-effort: being retired)."
    stand_in = "engines.emulate.apis:LeanStateSearchAPI"
    endpoint_version = "get-api-search-v1"
    # 2: NUL and lone surrogates decode to U+FFFD; JSON too deep to decode is a parse error (issue 21).
    parser_version = 2
    DEFAULT_URL = "https://premise-search.com"
    PARAMS = {"rev": DEFAULT_REV}
    defaults = EngineDefaults(rate=Rate(6, 30.0), timeout=20.0, result_cap=None, batch_size=1, num_results=50)

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        super().__init__(base_url, **params)
        rev = self.params["rev"]
        if not isinstance(rev, str) or not rev.strip():
            raise InputError(f"leanstatesearch: rev {rev!r} must be a revision like {DEFAULT_REV}")

    def build_request(self, texts: list[str]) -> httpx.Request:
        self.check_texts(texts)
        query = {"query": goal_query(texts[0]), "results": self.num_results, "rev": self.params["rev"]}
        return self.new_request("GET", f"{self.base_url}/api/search", params=query, headers=self.request_headers())

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``GET /api/search?query=&results=&rev=`` → the text (:func:`goal_text`: a bare
        ``⊢ <statement>`` gives the statement), ``num_results`` and ``rev``."""
        q = self.sent_to(method, url, "GET", "/api/search")
        text = goal_text(q["query"][0]) if q and q.get("query") else None
        if text is None:
            return None
        params: dict[str, Any] = {}
        if q.get("results"):
            params["num_results"] = int(q["results"][0])
        if q.get("rev"):
            params["rev"] = q["rev"][0]
        return AskedFor([text], params)

    def decode(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Any:
        """Errors are HTTP 400 with ``{"error", "schema"}``: their message, not a status alone."""
        if not 200 <= status_code < 300:
            try:
                message = error_message(json.loads(body.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError):
                message = None
            if message is not None:
                raise EngineHTTPError(f"leanstatesearch: HTTP {status_code}: {message:.300}")
        return super().decode(status_code, headers, body)

    def body_error(self, data: Any) -> str | None:
        message = error_message(data)
        return None if message is None else f"error in body: {message:.300}"

    def items(self, data: Any) -> list[Any]:
        if isinstance(data, dict):
            raise EngineParseError(f"leanstatesearch: top level is an object with keys {sorted(data)[:8]}, expected a list")
        if not isinstance(data, list):
            raise EngineParseError(f"leanstatesearch: top level is {type(data).__name__}, expected a list")
        return data
