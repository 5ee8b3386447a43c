"""TheoremSearch (UW): the MCP tool ``theorem_search`` at ``https://api.theoremsearch.com/mcp`` (ENGINE-APIS.md §10.9).

A hand-rolled JSON-RPC server (``uw-math-ai/TheoremSearch:api/routes/mcp.py @ 324fac51``):
every answer is HTTP 200 ``application/json``; ``initialize`` answers ``2025-06-18``, no
session, no SSE; ``server/discover`` gets -32601 (so the client falls back to the
handshake). Arguments ``{"query", "n_results", "formality": "formal"}`` (a Lean row sends
``formal``; ``formality`` is in the identity); hits ``structuredContent.theorems[].name``
(formal hits carry the Lean declaration name), ranked by position; a name repeated (Mathlib
versions as separate "papers") counts at its first rank. A JSON-RPC error is a failure,
except -32603 naming a rate limit (the embedding provider's ``RateLimitError``): an outage,
pause. ``n_results`` is clamped to 1–100 by the server. No courtesy rate is published:
the crawler asks 1 request / 2 s, well under what the server's embedding cache takes.
"""

from __future__ import annotations

from typing import Any

from engines.base import EngineDefaults, EngineParseError, Rate
from engines.mcpwire import McpAdapter

FORMALITIES = ("formal", "informal", "both")


class TheoremSearchAdapter(McpAdapter):
    engine = "theoremsearch"
    display_name = "TheoremSearch"
    summary = "TheoremSearch (UW), MCP tool theorem_search, formal (Lean) hits."
    DEFAULT_URL = "https://api.theoremsearch.com/mcp"
    defaults = EngineDefaults(rate=Rate(1, 2.0), timeout=60.0, result_cap=100, batch_size=1, num_results=20)
    stand_in = "engines.emulate.mcp_apis:TheoremSearchAPI"
    demo_port = 47814  # in the demo: its formal row, ranked on names and docstrings
    demo_weights = {"name": 2, "signature": 0, "docstring": 2, "module": 1}
    endpoint_version = "mcp-tools-call-theorem_search-v1"
    parser_version = 1
    tool = "theorem_search"
    PARAMS = {"era": "auto", "formality": "formal"}
    MAX_NUM_RESULTS = 100

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        super().__init__(base_url, **params)
        if self.params["formality"] not in FORMALITIES:
            from store.errors import InputError

            raise InputError(f"theoremsearch: formality {self.params['formality']!r} is not one of "
                             f"{', '.join(FORMALITIES)}")

    def arguments(self, text: str) -> dict[str, Any]:
        return {"query": text, "n_results": self.num_results, "formality": self.params["formality"]}

    def params_shown(self, arguments: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "n_results" in arguments:
            out["num_results"] = int(arguments["n_results"])
        if "formality" in arguments:
            out["formality"] = arguments["formality"]
        return out

    def items(self, sc: dict[str, Any]) -> list[Any]:
        theorems = sc.get("theorems")
        if not isinstance(theorems, list):
            raise EngineParseError(f"theoremsearch: `theorems` is {type(theorems).__name__}, expected a list")
        return theorems

    def hit_list(self, items: list[Any], **kw: Any):
        hits = super().hit_list(items, **kw)
        seen: set[str] = set()
        keep = [h for h in hits if not (h.name in seen or seen.add(h.name))]  # first rank counts
        if len(keep) < len(hits):
            hits[:] = keep
        return hits
