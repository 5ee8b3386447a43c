"""Lean Finder adapter: ``POST`` to the Cloudflare proxy or the Hugging Face endpoint (ENGINE-APIS.md §4).

``POST <endpoint>`` (no path) with ``{"inputs": text, "top_k": n, "version": v}``. The
default base URL follows the most-used client, lean-lsp-mcp 0.32.0:
``https://lean-lsp-proxy.leanfinder.workers.dev`` (its configurations record that
``base_url``); the Hugging Face Inference Endpoint stays a known URL (``--url
leanfinder=`` it) and is what a configuration archived without ``base_url`` means. A
hit's ``score`` (stated to exist, scale unknown) is kept in its raw item, never used.

Why ``version`` defaults to ``v4.19.0``: the Legendre leaderboard reports that the
v4.24.0 and v4.28.0 indexes contain only definitions, theorems and inductives — no
structures or classes — which would zero 317 of the 894 scored MathlibQR queries (178
target a ``structure``, 139 a ``class``); v4.19.0 still has them (§4.6). lean-lsp-mcp
defaults to v4.28.0; pass ``version="v4.28.0"`` for that. ``version=None`` omits the
field, as requests did before 2026-05-20.

Two response generations parse:

- current (since 2026-05-20): ``{"results": [{"formal_name", "informal_name", "kind",
  "type", "informal_description", "path"}, ...]}``; the name is ``formal_name``;
- older (2025-11-03 to 2026-05-20): ``{"results": [{"url", "formal_statement",
  "informal_statement"}, ...]}``; the name is the ``pattern=`` of a mathlib4_docs
  ``.../find/?pattern=<name>#doc`` URL. Hits whose URL is not such a link (other
  libraries) carry no name and are dropped (counted, not an error); the remaining hits
  keep their returned rank.

A result with no Lean name (missing or empty ``formal_name``), a null result, or one that
matches neither schema is dropped (``HitList.drop``); if *every* result fails that way
the schema changed and the answer is a parse error.

Which generation parsed is visible from the raw items (``formal_name`` vs ``url``) and
from :func:`detect_schema`. Errors arrive as ``{"error": ...}`` (status undocumented).
Courtesy rate 10 requests / 30 s (lean-lsp-mcp, the most conservative known public client;
Legendre used 1 / s; ENGINE-APIS.md §4.7); one query per request (``inputs`` is a string).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping
from urllib.parse import unquote

import httpx

from engines.jsonbody import request_json
from engines.protocol import AskedFor, EngineDefaults, EngineParseError, ForeignItem
from engines.rates import Rate
from engines.remote import RemoteAdapter
from store.errors import InputError

PROXY_URL = "https://lean-lsp-proxy.leanfinder.workers.dev"
HF_URL = "https://bxrituxuhpc70w8w.us-east-1.aws.endpoints.huggingface.cloud"
DEFAULT_VERSION = "v4.19.0"
KNOWN_VERSIONS = ("v4.19.0", "v4.24.0", "v4.28.0")
DOCS_PATTERN = re.compile(r"pattern=(.*?)#doc")


def detect_schema(item: Any) -> str | None:
    """``"current"`` (``formal_name``), ``"url"`` (the older schema) or None."""
    if isinstance(item, dict):
        if "formal_name" in item:
            return "current"
        if "url" in item and "formal_statement" in item:
            return "url"
    return None


class LeanFinderAdapter(RemoteAdapter):
    engine = "leanfinder"
    display_name = "Lean Finder"
    summary = "Lean Finder (Hugging Face endpoint): semantic search over Mathlib from informal statements."
    stand_in = "engines.emulate.apis:LeanFinderAPI"
    # The demo's stand-in leans on statements.
    demo_port = 47813
    demo_weights = {"name": 1, "signature": 3, "docstring": 1, "module": 0}
    json_object = True
    endpoint_version = "hf-endpoint-inputs-v1"
    # 2: tolerant items (no Lean name, null item: dropped, ranks kept).
    # 3: NUL and lone surrogates decode to U+FFFD; JSON too deep to decode is a parse error (issue 21).
    parser_version = 3
    # lean-lsp-mcp 0.32.0's default (config.py), the most-used client (ENGINE-APIS.md §4.1).
    DEFAULT_URL = PROXY_URL
    # The Hugging Face endpoint, the default before: configurations archived without a
    # base_url meant it and keep meaning it; crawls of the proxy record their base_url.
    IDENTITY_URL = HF_URL
    KNOWN_URLS = (HF_URL,)
    PARAMS = {"version": DEFAULT_VERSION}
    defaults = EngineDefaults(rate=Rate(10, 30.0), timeout=30.0, result_cap=None, batch_size=1, num_results=50)

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        super().__init__(base_url, **params)
        v = self.params["version"]
        if v is not None and not re.fullmatch(r"v\d+\.\d+\.\d+(-rc\d+)?", str(v)):
            raise InputError(f"leanfinder: version {v!r} is not like v4.19.0 (known: {', '.join(KNOWN_VERSIONS)})")

    def build_request(self, texts: list[str]) -> httpx.Request:
        self.check_texts(texts)
        payload: dict[str, Any] = {"inputs": texts[0], "top_k": self.num_results}
        if self.params["version"] is not None:
            payload["version"] = self.params["version"]
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        return self.new_request("POST", self.base_url, headers=self.request_headers(json_body=True), content=body)

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``POST <endpoint>`` with ``{"inputs", "top_k", "version"}`` → the text, ``num_results``, ``version``.

        A request without ``version`` (as sent before 2026-05-20, or by ``version=None``)
        leaves ``version`` to the default, as imports always read it: the one place the
        round trip of the identity does not hold (the texts' does).
        """
        data = request_json(body) if self.sent_to(method, url, "POST", "") is not None else None
        if data is None or not isinstance(data.get("inputs"), str):
            return None
        params: dict[str, Any] = {}
        if data.get("top_k"):
            params["num_results"] = int(data["top_k"])
        if data.get("version") is not None:
            params["version"] = data["version"]
        return AskedFor([data["inputs"]], params)

    def body_error(self, data: dict[str, Any]) -> str | None:
        return f"error in body: {data['error']!r:.200}" if "error" in data else None

    def items(self, data: dict[str, Any]) -> list[Any]:
        results = data.get("results")
        if not isinstance(results, list):
            raise EngineParseError(
                f"leanfinder: `results` is {type(results).__name__}, expected a list (keys {sorted(data)[:8]})"
            )
        return results

    def item_name(self, item: Any) -> str:
        """``formal_name`` (current schema) or the ``pattern=`` of a mathlib4_docs URL (older)."""
        schema = detect_schema(item)
        if schema == "current":
            name = item["formal_name"]
            if not isinstance(name, str) or not name:
                raise EngineParseError(f"no Lean name (`formal_name` is {name!r:.60})")
            return name
        if schema == "url":
            url = item["url"]
            m = DOCS_PATTERN.search(url) if isinstance(url, str) else None
            if not m or not m.group(1):
                # Not a mathlib4_docs link (another library): a normal answer with no
                # declaration name to score, so it does not count towards "all unusable".
                drop = ForeignItem if isinstance(url, str) else EngineParseError
                raise drop(f"no Lean name in `url` {url!r:.80}")
            return unquote(m.group(1))
        keys = sorted(item)[:10] if isinstance(item, dict) else type(item).__name__
        raise EngineParseError(f"matches neither known schema ({keys})")
