"""Lean Hammer premise server: ``POST http://leanpremise.net/retrieve`` (ENGINE-APIS.md §7).

Body ``{"state": goal, "k": n, "new_premises": []}`` — the minimal body lean-lsp-mcp
0.32.0 sends, which searches the whole index (§7.2, §7.3). One goal per request (``state``
is a string: a list is a 422). The answer is a flat list ``[{"score", "name"}]``, highest
inner product first, at most ``k`` items; ``score`` stays in the raw item.

``k`` is ``num_results``; the server clamps it to 1024, so a larger ``num_results`` is sent
as 1024 with a note (``notes``) and 1024 is what the identity records.

The **goal format** is part of the identity (``goal_format``, §7.4): ``notation`` (the
default: the Lean LSP plain goal ``⊢ a + b = b + a``, what lean-lsp-mcp sends) or any
other label for a form the user supplies verbatim in the texts (LeanHammer's
``pp.notation false`` goals). A text without ``⊢`` is a statement and is sent as
``⊢ <statement>`` (:func:`engines.queries.goal_query`, like LeanStateSearch).
``read_request`` cannot see the label: imports read it as the default.

Errors (§7.6): 422 (FastAPI's ``detail`` list) is permanent and names the field in
``loc``; 500 ``Internal Server Error: Embed service overloaded`` (or the embedding
service's own failure) is an outage: the host pauses and the text is retried later;
404 ``{"detail":"Not Found"}`` means a wrong base URL — a live server answers 404 at
``/`` — and says so. The liveness probe is ``GET /max-new-premises`` (a bare integer).

Plain http only: no key is ever sent (no ``SECRET_ENVS``). Courtesy rate 6 requests /
30 s (lean-lsp-mcp 0.32.0 ``RATE_LIMITS["hammer_premise"]``, §7.7); the operators ask heavy
users to self-host.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import httpx

from engines.jsonbody import request_json, snippet
from engines.protocol import AskedFor, EngineDefaults, EngineParseError
from engines.queries import goal_query, goal_text
from engines.rates import Rate
from engines.remote import RemoteAdapter
from store.errors import InputError

K_MAX = 1024  # the server's clamp (app/main.py)
DEFAULT_GOAL_FORMAT = "notation"


def fastapi_detail(body: bytes) -> Any:
    """The ``detail`` of a FastAPI error body, or None."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return data.get("detail") if isinstance(data, dict) else None


def validation_line(detail: Any) -> str | None:
    """``"`state`: Input should be a valid string"`` for each entry of a 422 ``detail`` list."""
    if not isinstance(detail, list) or not detail:
        return None
    parts = []
    for entry in detail[:3]:
        if isinstance(entry, dict):
            loc = [str(x) for x in entry.get("loc") or [] if x != "body"]
            parts.append(f"`{'.'.join(loc) or 'body'}`: {entry.get('msg', '')}")
    return "; ".join(parts) or None


class LeanPremiseAdapter(RemoteAdapter):
    engine = "leanpremise"
    display_name = "Lean Hammer premises"
    summary = "Lean Hammer premise server (leanpremise.net): premise selection from a goal (best-effort)."
    stand_in = "engines.emulate.leanpremise:LeanPremiseAPI"
    demo_port = 47815
    demo_weights = {"name": 2, "signature": 3, "docstring": 0, "module": 0}
    endpoint_version = "post-retrieve-v1"
    parser_version = 1
    DEFAULT_URL = "http://leanpremise.net"
    PARAMS = {"goal_format": DEFAULT_GOAL_FORMAT}
    liveness_path = "/max-new-premises"
    defaults = EngineDefaults(rate=Rate(6, 30.0), timeout=20.0, result_cap=K_MAX, batch_size=1, num_results=32)

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        n = params.get("num_results")
        clamped = n is not None and int(n) > K_MAX
        if clamped:
            params["num_results"] = K_MAX
        super().__init__(base_url, **params)
        if clamped:
            self.notes.append(f"leanpremise: num_results {n} is sent as {K_MAX} (the server clamps k to {K_MAX})")
        fmt = self.params["goal_format"]
        if not isinstance(fmt, str) or not fmt.strip() or any(c.isspace() for c in fmt):
            raise InputError(f"leanpremise: goal_format {fmt!r} must be one word: {DEFAULT_GOAL_FORMAT} "
                             "(⊢ a + b = b + a, the default) or a label for the form your texts hold")

    def build_request(self, texts: list[str]) -> httpx.Request:
        self.check_texts(texts)
        body = {"state": goal_query(texts[0]), "k": self.num_results, "new_premises": []}
        return self.new_request("POST", f"{self.base_url}/retrieve", headers=self.request_headers(json_body=True),
                                content=json.dumps(body, ensure_ascii=False).encode("utf-8"))

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``POST /retrieve`` with ``{"state", "k"}`` → the text (:func:`goal_text`) and ``num_results``."""
        data = request_json(body) if self.sent_to(method, url, "POST", "/retrieve") is not None else None
        state = data.get("state") if data is not None else None
        text = goal_text(state) if isinstance(state, str) else None
        if text is None:
            return None
        return AskedFor([text], {"num_results": int(data["k"])} if data.get("k") else {})

    def outage_reason(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        """500 from this server is the embedding service: overloaded, or failing (§7.6)."""
        if status_code == 500:
            detail = fastapi_detail(body)
            if isinstance(detail, str) and detail.startswith("Internal Server Error"):
                return f"HTTP 500: {detail[:120]}"
        return super().outage_reason(status_code, headers, body)

    def refusal(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        detail = fastapi_detail(body)
        if status_code == 422:
            line = validation_line(detail) or snippet(body, 120)
            return f"leanpremise: HTTP 422: the server refused the request body: {line} (a client bug; not retried)"
        if status_code == 404:
            return (f"leanpremise: HTTP 404 {snippet(body, 60)} at {self.base_url}/retrieve: a wrong base URL "
                    f"(the server answers 404 everywhere but its four routes; GET {self.base_url}"
                    f"{self.liveness_path} should answer an integer); check --url leanpremise=")
        return None

    def body_error(self, data: Any) -> str | None:
        if isinstance(data, dict) and "detail" in data:
            return f"error in body: {data['detail']!r:.200}"
        return None

    def items(self, data: Any) -> list[Any]:
        if not isinstance(data, list):
            raise EngineParseError(f"leanpremise: top level is {type(data).__name__}, expected a list")
        return data
