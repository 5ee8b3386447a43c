"""LeanSearch adapter: ``POST https://leansearch.net/search`` (ENGINE-APIS.md §2).

Request ``{"query": [text, ...], "num_results": n}``; the answer is a list with one
inner list per query, in request order, of ``{"result": Record, "distance": float}``.
``Record.name`` and ``module_name`` are lists of components and are joined with ``.``.
``distance`` is kept in the raw item but never used to re-sort: since the v2 backend
(about March 2026) it comes from the first-stage retriever and is not monotone in rank;
it may be absent (lean-lsp-mcp's recorded result has none).

Tolerant items: a hit whose ``name`` is missing, an empty list or holds a non-string, a
null hit, or one without a ``result`` object is dropped (``HitList.drop``); the others
keep their as-returned ranks. The legacy ``GET /api/search`` answer (a flat list of
``{id, formal_name, ...}``, ENGINE-APIS.md §8.1) parses too for a one-query request,
because a service can roll back.

Defaults: courtesy rate 3 requests / 30 s (Legendre leaderboard, the most conservative
known public client; ENGINE-APIS.md §2.7), one query per request
(batching several is the ``batch_size`` option; whether a batch counts as one request
against the per-IP limit is unknown), ``num_results`` 50. The server accepts up to 150
but the hosted v2 service reportedly returns at most 50 (``result_cap``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import httpx

from engines.jsonbody import request_json
from engines.protocol import AskedFor, EngineDefaults, EngineHTTPError, EngineParseError, HitList, ParsedHit, finish_hits
from engines.rates import Rate
from engines.remote import RemoteAdapter

MAX_NUM_RESULTS = 150  # server-side validation since 2025-09-12 (frenzymath/LeanSearch f264465)


def join_name(value: Any, *, field: str, where: str) -> str:
    """``["Fin2", "IsLT", "succ"]`` → ``"Fin2.IsLT.succ"``; a dotted string passes through."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(isinstance(p, str) and p for p in value):
        return ".".join(value)
    raise EngineParseError(f"leansearch: {where}: `{field}` is {type(value).__name__} {value!r:.80}, expected a list of strings")


def is_legacy(data: list) -> bool:
    """The legacy GET API's flat list of ``{id, formal_name, ...}`` (ENGINE-APIS.md §8.1)."""
    return (
        bool(data)
        and not any(isinstance(x, list) for x in data)
        and any(isinstance(x, dict) and "formal_name" in x for x in data)
        and not any(isinstance(x, dict) and "result" in x for x in data)
    )


def legacy_item_name(item: Any) -> str:
    """The name of one item of the legacy flat list (``formal_name``)."""
    if not isinstance(item, dict):
        raise EngineParseError(f"item is {type(item).__name__}, expected an object")
    name = item.get("formal_name")
    if not isinstance(name, str) or not name:
        raise EngineParseError(f"`formal_name` is {type(name).__name__} {name!r:.60}")
    return name


def _item_name(item: Any, where: str) -> str:
    if not isinstance(item, dict):
        raise EngineParseError(f"{where} is {type(item).__name__}, expected an object")
    record = item.get("result")
    if not isinstance(record, dict):
        raise EngineParseError(f"{where} has no `result` object (keys {sorted(item)[:8]})")
    if "name" not in record:
        raise EngineParseError(f"{where} record has no `name` (keys {sorted(record)[:10]})")
    return join_name(record["name"], field="name", where=where)


def _usual_name(item: Any) -> str | None:
    """:func:`_item_name` of a well-formed item (a ``result`` object whose ``name`` is a list of
    non-empty strings, or a non-empty string), checked without building its error context;
    None for anything else (:func:`_item_name` then says what is wrong)."""
    record = item.get("result") if type(item) is dict else None
    value = record.get("name") if type(record) is dict else None
    if type(value) is list and value and "" not in value:
        try:
            return ".".join(value)  # TypeError: a part is not a string
        except TypeError:
            return None
    return value if type(value) is str and value else None


class LeanSearchAdapter(RemoteAdapter):
    engine = "leansearch"
    display_name = "LeanSearch"
    summary = "LeanSearch (leansearch.net): natural-language search over Mathlib, informal descriptions."
    stand_in = "engines.emulate.apis:LeanSearchAPI"
    # The demo's stand-in leans on docstrings (the real index is built from informal descriptions).
    demo_port = 47811
    demo_weights = {"name": 1, "signature": 1, "docstring": 3, "module": 0}
    endpoint_version = "post-search-v1"
    # 2: tolerant items (a bad item is dropped, ranks kept); the legacy flat list parses.
    # 3: NUL and lone surrogates decode to U+FFFD; JSON too deep to decode is a parse error (issue 21).
    parser_version = 3
    DEFAULT_URL = "https://leansearch.net"
    MAX_BATCH = None
    MAX_NUM_RESULTS = MAX_NUM_RESULTS
    defaults = EngineDefaults(rate=Rate(3, 30.0), timeout=30.0, result_cap=50, batch_size=1, num_results=50)

    def build_request(self, texts: list[str]) -> httpx.Request:
        self.check_texts(texts)
        body = json.dumps({"query": list(texts), "num_results": self.num_results}, ensure_ascii=False)
        return self.new_request("POST", f"{self.base_url}/search", headers=self.request_headers(json_body=True),
                             content=body.encode("utf-8"))

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``POST /search`` with ``{"query": [texts], "num_results": n}`` → texts and ``num_results``."""
        data = request_json(body) if self.sent_to(method, url, "POST", "/search") is not None else None
        texts = data.get("query") if data is not None else None
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return None
        params = {"num_results": int(data["num_results"])} if data.get("num_results") else {}
        return AskedFor(list(texts), params)

    def body_error(self, data: Any) -> str | None:
        if isinstance(data, dict) and ("error" in data or "detail" in data):
            return f"error in body: {data.get('error', data.get('detail'))!r:.200}"
        return None

    def parse(
        self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes
    ) -> list[HitList]:
        """One answer list per text (a batch), or the legacy flat list for one text."""
        data = self.decode(status_code, headers, body)
        message = self.body_error(data)
        if message is not None:
            raise EngineHTTPError(f"leansearch: {message}")
        if isinstance(data, dict):
            raise EngineParseError(f"leansearch: top level is an object with keys {sorted(data)[:8]}, expected a list")
        if not isinstance(data, list):
            raise EngineParseError(f"leansearch: top level is {type(data).__name__}, expected a list of lists")
        if is_legacy(data):
            # A service can roll back: the legacy answer has no per-query framing, so it
            # can only be attributed to a one-query request.
            if len(texts) != 1:
                raise EngineParseError(
                    f"leansearch: legacy flat list (GET /api/search schema) for {len(texts)} queries; it carries one answer"
                )
            return [self.hit_list(data, where="legacy answer", label="legacy hit", name=legacy_item_name)]
        if len(data) != len(texts):
            raise EngineParseError(f"leansearch: {len(data)} answer lists for {len(texts)} queries")
        out: list[HitList] = []
        for qi, entry in enumerate(data):
            if not isinstance(entry, list):
                raise EngineParseError(f"leansearch: answer {qi} is {type(entry).__name__}, expected a list of hits")
            hits = HitList()
            for i, item in enumerate(entry):
                try:
                    name = _usual_name(item) or _item_name(item, f"query {qi} hit {i + 1}")
                    hits.append(ParsedHit(rank=i + 1, name=name, raw=item))
                except EngineParseError as exc:
                    hits.drop(str(exc).removeprefix("leansearch: "))
            out.append(finish_hits(self.engine, hits, len(entry), where=f"answer {qi}"))
        return out
