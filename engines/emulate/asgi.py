"""Serving an ASGI application (a FastAPI app) inside a stand-in: one :class:`Request` in,
one :class:`Reply` out, in process, on the stand-in's own event loop.

A stand-in whose real server is built with FastAPI (the Lean Hammer premise server) is
built with FastAPI too, so validation errors (422 with pydantic's ``detail`` list), the
404 of an unknown path and the framework's headers are the framework's, not imitations.
"""

from __future__ import annotations

from typing import Any

from engines.emulate.apis import Reply, Request


async def call_asgi(app: Any, req: Request, *, raw_query: str = "") -> Reply:
    """Run ``app`` on ``req`` and collect its response (status, content type, headers, body)."""
    from urllib.parse import urlencode

    query = raw_query or urlencode([(k, v) for k, vs in req.query.items() for v in vs])
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": req.method, "scheme": "http", "path": req.path, "raw_path": req.path.encode("utf-8"),
        "query_string": query.encode("latin-1", "replace"), "root_path": "",
        "headers": [(k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in req.headers.items()],
        "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0),
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": req.body, "more_body": False}

    status, headers, parts = 500, {}, []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            for k, v in message.get("headers", []):
                headers[k.decode("latin-1").lower()] = v.decode("latin-1")
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    ctype = headers.pop("content-type", "application/json")
    for hop in ("content-length", "transfer-encoding", "connection", "server", "date"):
        headers.pop(hop, None)
    return Reply(status, b"".join(parts), content_type=ctype, headers=headers)
