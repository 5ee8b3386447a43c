"""Stand-ins of the MCP engines (ENGINE-APIS.md §10): synthetic, built from the servers' code.

No raw body of these services is public: what they answer is synthesised from the server
code the document cites. TheoremSearch is a hand-rolled JSON-RPC server
(:class:`TheoremSearchAPI`); LeanExplore's and Octo's stand-ins run the official ``mcp``
SDK server (an emulate/test dependency, never a crawl one) in one of three wire variants:

- ``stateful-sse``: SDK defaults in the handshake era, SSE answers and a session id, and
  ``server/discover`` refused with 400 "Missing session ID" as an SDK 1.x server does;
- ``stateless-json``: ``stateless_http=True, json_response=True``, discover refused with
  400 "Unsupported protocol version" (SDK 1.x);
- ``2026-07-28``: SDK 2.3.0 defaults, the stateless era (and the handshake for old clients).

The variant is the constructor's ``variant`` or ``ENGINES_EMULATE_MCP_VARIANT``. Faults of
the wrapper: ``expire_sessions()`` (the next request carrying an old session id gets 404),
``split_sse`` (the server writes an SSE body in pieces), ``limit_after`` (Octo: tool calls
past that many answer the tool error "limit reached").
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from engines.emulate.apis import EngineAPI, Mods, Reply, Request, finish_items, jreply

VARIANTS = ("stateful-sse", "stateless-json", "2026-07-28")
_HANDSHAKE_VERSIONS = "2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25"


def _rpc(id_: Any, result: Any = None, error: tuple[int, str] | None = None) -> Reply:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id_}
    if error is not None:
        msg["error"] = {"code": error[0], "message": error[1]}
    else:
        msg["result"] = result
    return Reply(200, json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
                 served=error is None and isinstance(result, dict) and "structuredContent" in result)


class TheoremSearchAPI(EngineAPI):
    """``POST /mcp``, hand-rolled JSON-RPC (``api/routes/mcp.py @ 324fac51``): always 200 JSON."""

    base_path = "/mcp"
    name_key = "name"
    drift_key = "title"
    TOOL = {"name": "theorem_search", "description": "Search theorems (synthetic stand-in).",
            "inputSchema": {"type": "object", "required": ["query"], "properties": {
                "query": {"type": "string"}, "n_results": {"type": "integer", "default": 10},
                "formality": {"type": "string", "enum": ["informal", "formal", "both"], "default": "informal"}}}}

    def texts(self, req: Request) -> list[str]:
        try:
            q = json.loads(req.body)["params"]["arguments"]["query"]
        except (ValueError, KeyError, TypeError):
            return []
        return [q] if isinstance(q, str) else []

    def rate_limited(self, retry_after: float) -> Reply:
        return _rpc(None, error=(-32603, "RateLimitError: Error code: 429 - rate limit exceeded (synthetic)"))

    def handle(self, req: Request, mods: Mods) -> Reply:
        if req.path.rstrip("/") != "/mcp":
            return jreply(404, {"detail": "Not Found"})
        if req.method == "GET":
            return jreply(200, {"name": "TheoremSearch MCP", "version": "2.0.0", "endpoint": "/mcp",
                                "methods": ["initialize", "ping", "tools/list", "tools/call"]})
        try:
            msg = json.loads(req.body)
        except ValueError:
            return _rpc(None, error=(-32700, "Parse error"))
        if not isinstance(msg, dict):
            return _rpc(None, error=(-32600, "Invalid Request"))
        method, id_, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method == "initialize":
            return _rpc(id_, {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                              "serverInfo": {"name": "TheoremSearch", "version": "2.0.0"}})
        if method == "ping":
            return _rpc(id_, {})
        if method == "tools/list":
            return _rpc(id_, {"tools": [self.TOOL]})
        if method != "tools/call":
            return _rpc(id_, error=(-32601, f"Method not found: {method}"))
        if params.get("name") != "theorem_search":
            return _rpc(id_, error=(-32601, "Unknown tool"))
        return self._search(id_, params.get("arguments") or {}, mods)

    def _search(self, id_: Any, args: dict[str, Any], mods: Mods) -> Reply:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return _rpc(id_, error=(-32602, "query must be a non-empty string"))
        if args.get("formality", "informal") not in ("informal", "formal", "both"):
            return _rpc(id_, error=(-32602, f"invalid formality: {args.get('formality')!r}"))
        n = max(1, min(100, int(args.get("n_results") or 10)))
        items = [{"statement_id": f"00000000-0000-0000-0000-{row.index:012d}", "name": row.name,
                  "theorem_type": "theorem", "formality": "formal", "body": row.get("docstring") or "",
                  "source": "Lean Repo", "similarity": round(score, 6), "score": round(score, 6)}
                 for row, score in self.index.search(query, n)]
        payload = {"theorems": finish_items(items, mods, self.name_key, self.drift_key)}
        return _rpc(id_, {"content": [{"type": "text", "text": json.dumps(payload, separators=(",", ":"))}],
                          "structuredContent": payload})


class SdkMcpAPI(EngineAPI):
    """An MCP stand-in served by the official SDK's ASGI app (see the module docstring)."""

    base_path = "/mcp"
    default_variant = "stateful-sse"
    server_name = "stand-in"

    def __init__(self, index, variant: str | None = None) -> None:
        super().__init__(index)
        self.variant = variant or os.environ.get("ENGINES_EMULATE_MCP_VARIANT") or self.default_variant
        if self.variant not in VARIANTS:
            from store.errors import InputError

            raise InputError(f"MCP stand-in variant {self.variant!r} is not one of {', '.join(VARIANTS)}")
        self.mods = Mods()
        self.sessions: set[str] = set()
        self.expired: set[str] = set()
        self.split_sse = False
        self.calls = 0
        self._life = None
        self._client = None

    def build(self, server: Any) -> None:  # pragma: no cover - subclasses register their tool
        raise NotImplementedError

    async def astart(self) -> None:
        """Start the SDK app's lifespan (its session manager) in a task of its own."""
        import asyncio

        self._ready, self._done = asyncio.Event(), asyncio.Event()
        self._life = asyncio.create_task(self._lifespan())
        await self._ready.wait()
        if self._life.done():
            self._life.result()  # raises what went wrong

    async def _lifespan(self) -> None:
        import logging

        import httpx
        from mcp.server.mcpserver import MCPServer
        from mcp.server.transport_security import TransportSecuritySettings

        logging.getLogger("mcp").setLevel(logging.WARNING)
        server = MCPServer(self.server_name, log_level="ERROR")
        self.build(server)
        kw: dict[str, Any] = {"stateless_http": True, "json_response": True} if self.variant == "stateless-json" else {}
        app = server.streamable_http_app(
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False), **kw)
        try:
            async with app.router.lifespan_context(app), httpx.AsyncClient(
                    transport=httpx.ASGITransport(app), base_url="http://127.0.0.1", timeout=30) as client:
                self._client = client
                self._ready.set()
                await self._done.wait()
        finally:
            self._ready.set()

    async def astop(self) -> None:
        if self._life is not None:
            self._done.set()
            await self._life
            self._life = None

    def expire_sessions(self) -> None:
        """End every session issued so far: requests carrying one get 404 (the spec's expiry)."""
        self.expired |= self.sessions

    def rate_limited(self, retry_after: float) -> Reply:
        return jreply(429, {"error": "Rate limit exceeded"}, headers={"Retry-After": str(max(1, math.ceil(retry_after)))})

    def handle(self, req: Request, mods: Mods):
        """An awaitable :class:`Reply` (the stand-in awaits it): the SDK app answers."""
        return self.ahandle(req, mods)

    def texts(self, req: Request) -> list[str]:
        return TheoremSearchAPI.texts(self, req)

    async def ahandle(self, req: Request, mods: Mods) -> Reply:
        if req.path.rstrip("/") != "/mcp":
            return jreply(404, {"detail": "Not Found"})
        sid = req.headers.get("mcp-session-id")
        if sid and sid in self.expired:
            return jreply(404, {"jsonrpc": "2.0", "id": "server-error",
                                "error": {"code": -32600, "message": "Session not found"}})
        old = self._as_sdk1(req)
        if old is not None:
            return old
        self.mods = mods
        headers = {k: v for k, v in req.headers.items() if k not in ("host", "content-length", "connection")}
        r = await self._client.request(req.method, "/mcp", headers=headers, content=req.body)
        out = {k: v for k, v in r.headers.items() if k.lower() in ("mcp-session-id", "retry-after")}
        if "mcp-session-id" in out:
            self.sessions.add(out["mcp-session-id"])
        ctype = r.headers.get("content-type", "application/json")
        body = r.content
        # SSE framing split across reads: the event's lines arrive in three writes.
        chunks = [body[:5], body[5:len(body) // 2], body[len(body) // 2:]] if (
            self.split_sse and "event-stream" in ctype and len(body) > 8) else None
        return Reply(r.status_code, body, content_type=ctype, headers=out, chunks=chunks,
                     served=r.status_code == 200 and b'"structuredContent"' in body)

    def _as_sdk1(self, req: Request) -> Reply | None:
        """The handshake-only variants refuse the 2026-07-28 era as an SDK 1.x server does."""
        if self.variant == "2026-07-28" or req.method != "POST":
            return None
        if req.headers.get("mcp-protocol-version") != "2026-07-28":
            return None
        if self.variant == "stateless-json":
            message = f"Bad Request: Unsupported protocol version: 2026-07-28. Supported versions: {_HANDSHAKE_VERSIONS}"
            return jreply(400, {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": message}})
        return jreply(400, {"jsonrpc": "2.0", "id": "server-error",
                            "error": {"code": -32600, "message": "Bad Request: Missing session ID"}})

    def ranked(self, query: str, k: int, item) -> list[dict[str, Any]]:
        items = [item(row) for row, _ in self.index.search(query, max(1, k))]
        return finish_items(items, self.mods, self.name_key, self.drift_key)


class LeanExploreMcpAPI(SdkMcpAPI):
    """LeanExplore's FastMCP app (``lean_explore/mcp/tools.py``): ``search_summary``."""

    default_variant = "stateful-sse"
    server_name = "LeanExploreMCPServer"
    drift_key = "lean_name"

    def build(self, server: Any) -> None:
        from engines.emulate.mcp_models import summary_tool

        summary_tool(server, self)


class OctoAPI(SdkMcpAPI):
    """Octo's local server shape (``axiomatic_octo/protocol.py``): ``search_lean`` → ``hits``."""

    default_variant = "2026-07-28"
    server_name = "octo"
    drift_key = "declaration"
    limit_after: int | None = None

    def build(self, server: Any) -> None:
        from engines.emulate.mcp_models import octo_tool

        octo_tool(server, self)
