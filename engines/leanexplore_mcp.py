"""LeanExplore's MCP path: tool ``search_summary`` at ``https://www.leanexplore.com/mcp`` (ENGINE-APIS.md §10.10).

FastMCP 1.x (``lean-explore==1.3.0``): the handshake era only, stateful with SSE by the SDK
default (the hosted transport is unconfirmed: every variant is handled). Arguments
``{"query", "limit"}``; hits ``structuredContent.results[].name``, ranked by position, no
score. Budget: **30 POSTs per client IP in any 60 s**, and initialisation and tool
discovery count toward it, so the pacer counts every POST (preambles included) at that
rate; over it, 429 with ``Retry-After``.
"""

from __future__ import annotations

from typing import Any

from engines.base import EngineDefaults, EngineParseError, Rate
from engines.mcpwire import McpAdapter


class LeanExploreMcpAdapter(McpAdapter):
    engine = "leanexplore-mcp"
    display_name = "LeanExplore (MCP)"
    summary = "LeanExplore over MCP (tool search_summary); 30 POST / 60 s, every POST counted."
    DEFAULT_URL = "https://www.leanexplore.com/mcp"
    defaults = EngineDefaults(rate=Rate(30, 60.0), timeout=60.0, result_cap=None, batch_size=1, num_results=50)
    stand_in = "engines.emulate.mcp_apis:LeanExploreMcpAPI"
    endpoint_version = "mcp-tools-call-search_summary-v1"
    parser_version = 1
    tool = "search_summary"
    PARAMS = {"era": "auto"}

    def arguments(self, text: str) -> dict[str, Any]:
        return {"query": text, "limit": self.num_results}

    def params_shown(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"num_results": int(arguments["limit"])} if "limit" in arguments else {}

    def items(self, sc: dict[str, Any]) -> list[Any]:
        results = sc.get("results")
        if not isinstance(results, list):
            raise EngineParseError(f"leanexplore-mcp: `results` is {type(results).__name__}, expected a list")
        return results
