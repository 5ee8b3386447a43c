"""The SDK stand-ins' tools and typed results (synthetic; shapes from the servers' packages).

Imported only when an SDK stand-in starts: ``mcp`` and ``pydantic`` are emulate/test
dependencies, never crawl ones.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel


class SummaryHit(BaseModel):
    id: int
    name: str
    description: Optional[str] = None


class SummaryResult(BaseModel):
    """``lean_explore`` ``search_summary``'s result (10.10)."""

    query: str
    results: list[dict[str, Any]]
    count: int


class OctoHit(BaseModel):
    name: str
    kind: str
    moduleName: str
    signature: str
    distance: float


class SearchLeanQueryResult(BaseModel):
    """``axiomatic_octo/protocol.py``'s result: hits plus an optional notice (10.11)."""

    hits: list[dict[str, Any]]
    notice: Optional[dict[str, Any]] = None


def summary_tool(server: Any, api: Any) -> None:
    @server.tool()
    def search_summary(query: str, limit: int = 10, rerank_top: Optional[int] = 50,
                       packages: Optional[list[str]] = None) -> SummaryResult:
        """Search Lean declarations; a summary per hit (synthetic stand-in)."""
        items = api.ranked(query, limit, lambda row: {"id": row.index + 1, "name": row.name,
                                                      "description": row.get("docstring") or None})
        return SummaryResult(query=query, results=items, count=len(items))


def octo_tool(server: Any, api: Any) -> None:
    @server.tool()
    def search_lean(query: str, scope: Optional[str] = None, version: Optional[str] = None,
                    rerank: bool = True, limit: int = 10) -> SearchLeanQueryResult:
        """Ranked hits with each declaration's name, kind, signature (synthetic stand-in)."""
        from mcp.server.mcpserver.exceptions import ToolError  # its text reaches the client

        api.calls += 1
        if api.limit_after is not None and api.calls > api.limit_after:
            raise ToolError("Hourly limit reached for this caller; try again in an hour.")
        items = api.ranked(query, limit, lambda row: {
            "name": row.name, "kind": row.get("kind") or "theorem", "moduleName": row.module,
            "signature": row.get("signature") or "", "distance": 0.0, "source": "mathlib"})
        return SearchLeanQueryResult(hits=items)
