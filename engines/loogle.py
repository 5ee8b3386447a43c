"""Loogle adapter: ``GET https://loogle.lean-lang.org/json?q=`` (ENGINE-APIS.md §5).

Success is ``{"header", "heartbeats", "count", "hits": [{"name", "type", "module",
"doc"}], "suggestions"?}`` with at most 200 hits; ``count`` is the total number of
matches, so what came back is ``len(hits)`` (``count`` larger than the hits is normal).
Query errors arrive as **HTTP 200 with an ``error`` key** and are failures
(:class:`EngineHTTPError`), never empty results; ``suggestions`` are queries to try, never
hits. A backend crash (``"... Restarting ..."``, ``"... died with code N ..."``, also 200)
is an outage (:class:`EngineOutage`, and :meth:`LoogleAdapter.outage_reason`). A body of
``{}`` means no search ran (empty or repeated ``q``) and is a parse error. A hit with no
name, or a null hit, is dropped (``HitList.drop``); the others keep their ranks.

Loogle takes no result count, so ``num_results`` is not part of the identity. Courtesy
rate 3 requests / 30 s (lean-lsp-mcp, ENGINE-APIS.md §5.5); overload is answered with 503 + ``Retry-After: 5``.
The descriptive User-Agent matters: Loogle refuses ``Python-urllib/3.12`` with 403.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

import httpx

from engines.protocol import AskedFor, EngineDefaults, EngineOutage, EngineParseError
from engines.rates import Rate
from engines.remote import RemoteAdapter

MAX_HITS = 200  # server default --max-results


class LoogleAdapter(RemoteAdapter):
    engine = "loogle"
    display_name = "Loogle"
    summary = "Loogle (loogle.lean-lang.org): search Mathlib by constants, names and type patterns."
    stand_in = "engines.emulate.apis:LoogleAPI"
    json_object = True
    item_label = "hit"
    endpoint_version = "get-json-q"
    # 2: tolerant items; a restarting backend is an outage, not a failed query.
    # 3: NUL and lone surrogates decode to U+FFFD; JSON too deep to decode is a parse error (issue 21).
    # 4: a query error is Loogle's text on one line, verbatim (no repr quotes or backslashes; issue 34).
    parser_version = 4
    DEFAULT_URL = "https://loogle.lean-lang.org"
    defaults = EngineDefaults(rate=Rate(3, 30.0), timeout=20.0, result_cap=MAX_HITS, batch_size=1, num_results=MAX_HITS)

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        ident.pop("num_results")  # not sent: Loogle always answers up to 200 hits
        return ident

    def build_request(self, texts: list[str]) -> httpx.Request:
        self.check_texts(texts)
        return self.new_request("GET", f"{self.base_url}/json", params={"q": texts[0]}, headers=self.request_headers())

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``GET /json?q=`` → the text (Loogle takes no other parameter)."""
        q = self.sent_to(method, url, "GET", "/json")
        return AskedFor(q["q"][:1]) if q and q.get("q") else None

    def outage_reason(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        reason = super().outage_reason(status_code, headers, body)
        if reason is None and 200 <= status_code < 300:
            message = _error_message(body)
            if message is not None and is_backend_crash(message):
                reason = f"backend restarting (HTTP {status_code}): {message:.100}"
        return reason

    def body_error(self, data: dict[str, Any]) -> str | None:
        if "error" not in data:
            return None
        # Loogle's own words on one line, as it wrote them: no quotes or backslashes added.
        message = _shown(data["error"])
        if is_backend_crash(message):
            raise EngineOutage(f"loogle: backend restarting: {message}")
        # `suggestions` are queries to try instead, never hits.
        return f"query error: {message}"

    def items(self, data: dict[str, Any]) -> list[Any]:
        hits_in = data.get("hits")
        if not isinstance(hits_in, list):
            what = "empty object (no search ran: empty or repeated q)" if not data else f"keys {sorted(data)[:8]}"
            raise EngineParseError(f"loogle: `hits` is {type(hits_in).__name__}, expected a list ({what})")
        return hits_in


# A crashed backend answers 200 + `{"error": "... Restarting..."}` (server.py) or
# "...died with code N..." (frontend-tests/test_server.py): the service is down, the
# query is not at fault.
_CRASH = re.compile(r"restarting|died with code", re.I)


def _shown(value: Any, limit: int = 300) -> str:
    """An error value as one line of at most ``limit`` characters (``…`` marks a cut)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_backend_crash(message: str) -> bool:
    """A backend crash (``Restarting``, ``died with code N``), not a query error."""
    return bool(_CRASH.search(message))


def _error_message(body: bytes) -> str | None:
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(data, dict) and "error" in data:
        return str(data["error"])
    return None
