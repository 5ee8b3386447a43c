"""LeanStateSearch adapter: ``GET https://premise-search.com/api/search?query=&results=&rev=`` (ENGINE-APIS.md §6).

All three parameters are required. ``query`` must be a pretty-printed proof state
containing ``⊢``: the server answers any other query with 400 "The 'query' parameter
must be a valid Lean proof state" (§6.3). The benchmark texts are statements, not
goals, so a text without ``⊢`` is sent as the goal ``⊢ <text>`` (a goal with no
hypotheses: the closest proof state to a bare statement; how well the engine ranks
such goals is untested, §6.1). A text that already holds ``⊢`` is sent unchanged.
Read back (``read_request``, :func:`goal_text`), ``⊢ <statement>`` gives the statement.

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

from engines.base import (
    AskedFor,
    EngineDefaults,
    EngineHTTPError,
    EngineParseError,
    HitList,
    ParsedHit,
    Rate,
    RemoteAdapter,
    decode_json_body,
    finish_hits,
)
from store.errors import InputError

DEFAULT_REV = "v4.22.0"  # lean-lsp-mcp's default
GOAL = "⊢"


def goal_query(text: str) -> str:
    """The proof state sent for ``text``: unchanged when it holds ``⊢``, else ``⊢ <text>``."""
    return text if GOAL in text else f"{GOAL} {text}"


def goal_text(query: str) -> str | None:
    """The text whose :func:`goal_query` is ``query``; None when no text gives it (no ``⊢``).

    Not unique: ``"⊢ a = b"`` is sent both for the statement ``a = b`` and for the text
    ``⊢ a = b``. The statement wins: ``"⊢ "`` followed by a rest without ``⊢`` gives the
    rest (benchmark texts are statements, and the crawler sends its ``⊢`` prefix only to
    them, so this is the text its answers are filed under); any other query holding ``⊢``
    (a proof state with hypotheses, ``"⊢a"``) is its own text. Always
    ``goal_query(goal_text(q)) == q``; ``goal_text(goal_query(t)) == t`` for every ``t``
    except a text that is itself ``"⊢ "`` + a statement.
    """
    if GOAL not in query:
        return None
    rest = query.removeprefix(f"{GOAL} ")
    return rest if rest != query and GOAL not in rest else query


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
        self._check_texts(texts)
        query = {"query": goal_query(texts[0]), "results": self.num_results, "rev": self.params["rev"]}
        return self._request("GET", f"{self.base_url}/api/search", params=query, headers=self._headers())

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``GET /api/search?query=&results=&rev=`` → the text (:func:`goal_text`: a bare
        ``⊢ <statement>`` gives the statement), ``num_results`` and ``rev``."""
        q = self._sent_to(method, url, "GET", "/api/search")
        text = goal_text(q["query"][0]) if q and q.get("query") else None
        if text is None:
            return None
        params: dict[str, Any] = {}
        if q.get("results"):
            params["num_results"] = int(q["results"][0])
        if q.get("rev"):
            params["rev"] = q["rev"][0]
        return AskedFor([text], params)

    def parse(
        self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes
    ) -> list[HitList]:
        if not 200 <= status_code < 300:
            try:
                message = error_message(json.loads(body.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError):
                message = None
            if message is not None:
                raise EngineHTTPError(f"leanstatesearch: HTTP {status_code}: {message:.300}")
        data = decode_json_body(self.engine, status_code, headers, body)
        if isinstance(data, dict):
            message = error_message(data)
            if message is not None:
                raise EngineHTTPError(f"leanstatesearch: error in body: {message:.300}")
            raise EngineParseError(f"leanstatesearch: top level is an object with keys {sorted(data)[:8]}, expected a list")
        if not isinstance(data, list):
            raise EngineParseError(f"leanstatesearch: top level is {type(data).__name__}, expected a list")
        hits = HitList()
        for i, item in enumerate(data):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name:
                what = f"keys {sorted(item)[:10]}" if isinstance(item, dict) else type(item).__name__
                hits.drop(f"result {i + 1}: no string `name` ({what})")
                continue
            hits.append(ParsedHit(rank=i + 1, name=name, raw=item))
        return [finish_hits(self.engine, hits, len(data))]
