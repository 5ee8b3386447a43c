"""LeanSearch-PS's stand-in: ``POST /retrieve_premises`` as REAL-Prover's Flask server answers it (ENGINE-APIS.md §8.5).

``{"query": goal | [goals], "num": n}`` → ``{"error": false, "msg": "", "data": [[record,
...], ...]}``, one list per goal, nearest first, no score; a record carries ``"Formal
name"``, ``"Formal statement"``, ``"Informal name"``, ``"Informal statement"``. A missing
``query`` is HTTP 400 ``{"error": true, "msg": "Missing param 'query'", "data": {}}``; a
body that is not JSON, or any other exception, is Flask's HTML 500 page. Other paths are
Flask's HTML 404. Records are synthetic (from the corpus).
"""

from __future__ import annotations

import json
from typing import Any

from engines.emulate.apis import EngineAPI, Mods, Reply, Request, finish_items, jreply
from engines.emulate.scorer import Row

FLASK_500 = (b'<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n'
             b'<h1>Internal Server Error</h1>\n<p>The server encountered an internal error and was unable to '
             b'complete your request. Either the server is overloaded or there is an error in the application.</p>\n')
FLASK_404 = (b'<!doctype html>\n<html lang=en>\n<title>404 Not Found</title>\n<h1>Not Found</h1>\n'
             b'<p>The requested URL was not found on the server.</p>\n')


class LeanSearchPSAPI(EngineAPI):
    name_key = "Formal name"
    drift_key = "formal_name"
    error_key = "msg"

    def error(self, status: int, message: str, **kw: Any) -> Reply:
        return jreply(status, {"error": True, "msg": message, "data": {}}, **kw)

    def server_error(self, status: int) -> Reply:
        return Reply(500, FLASK_500, content_type="text/html; charset=utf-8")

    def record(self, row: Row) -> dict[str, Any]:
        sig = (row.get("signature") or "").strip()
        return {"Formal name": row.name, "Formal statement": f"theorem {row.name} {sig}".strip(),
                "Informal name": row.get("informal_name") or "",
                "Informal statement": row.get("informal_description") or row.get("docstring") or ""}

    def texts(self, req: Request) -> list[str]:
        try:
            query = json.loads(req.body).get("query")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return []
        return [query] if isinstance(query, str) else [q for q in query or [] if isinstance(q, str)]

    def handle(self, req: Request, mods: Mods) -> Reply:
        if req.path != "/retrieve_premises":
            return Reply(404, FLASK_404, content_type="text/html; charset=utf-8")
        if req.method != "POST":
            return Reply(405, b"<!doctype html>\n<title>405 Method Not Allowed</title>", content_type="text/html")
        try:
            payload = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            return self.server_error(500)
        if not isinstance(payload, dict) or "query" not in payload:
            return self.error(400, "Missing param 'query'")
        query, num = payload["query"], payload.get("num", 5)
        queries = [query] if isinstance(query, str) else query
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries) or not isinstance(num, int):
            return self.server_error(500)
        data = []
        for q in queries:
            items = [self.record(row) for row, _ in self.index.search(q.replace("⊢", " "), max(num, 0))]
            data.append(finish_items(items, mods, self.name_key, self.drift_key))
        return jreply(200, {"error": False, "msg": "", "data": data}, served=True)
