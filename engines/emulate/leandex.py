"""LeanDex's stand-in: ``GET /api/v1/search`` answered as a Server-Sent-Events stream (ENGINE-APIS.md §8.4).

Query ``q``, ``limit``, ``generate_query``, ``analyze_result`` (``False``/``false``: the
stand-in runs no LLM stage, so ``True`` is a 400 here). ``Accept`` must allow
``text/event-stream``, else **406** (what a streaming server built on an SSE framework
answers; the real one's is undocumented). The stream has a ``generate_query`` stage
event, a ``search`` stage event and the final event ``{"data": {"search_results": [...]}}``,
sent in pieces cut at odd places — through lines, between CR and LF — so the client's reads
split the framing. Items alternate between the two shapes in the wild: even ranks the
LeanExplore v2 ``name`` shape, odd ranks the statement group's
``primary_declaration.lean_name``. Events use CRLF line ends. Bodies are synthetic.
"""

from __future__ import annotations

import json
from typing import Any

from engines.emulate.apis import EngineAPI, Mods, Reply, Request, finish_items, jreply
from engines.emulate.scorer import Row

EVENT_STREAM = "text/event-stream"


def split_odd(body: bytes, sizes: tuple[int, ...] = (7, 1, 13, 2, 31, 5, 997, 1499)) -> list[bytes]:
    """``body`` in pieces of cycling odd sizes, small ones through lines and between events'
    CR and LF, large ones so that a long stream costs few pauses; the first event's CRLF is
    always cut between its CR and its LF."""
    first = body.find(b"\r\n")
    if 0 <= first:
        return [body[:first + 1]] + _pieces(body[first + 1:], sizes)
    return _pieces(body, sizes)


def _pieces(body: bytes, sizes: tuple[int, ...]) -> list[bytes]:
    out, i, k = [], 0, 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        out.append(body[i:i + n])
        i, k = i + n, k + 1
    return out


class LeanDexAPI(EngineAPI):
    error_key = "error"
    drift_key = "lean_name_"

    def item(self, row: Row, rank: int) -> dict[str, Any]:
        if rank % 2 == 0:
            return {"name": row.name, "module": row.module, "source_text": (row.get("signature") or "").strip(),
                    "docstring": row.get("docstring"), "informalization": row.get("informal_description")}
        return {"id": row.index + 1, "primary_declaration": {"lean_name": row.name},
                "source_file": "/".join(row.module_parts) + ".lean", "range_start_line": 1,
                "display_statement_text": (row.get("signature") or "").strip(), "docstring": row.get("docstring"),
                "informal_description": row.get("informal_description")}

    def stream(self, events: list[Any]) -> bytes:
        return b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode("utf-8") + b"\r\n\r\n" for e in events)

    def handle(self, req: Request, mods: Mods) -> Reply:
        if req.path != "/api/v1/search":
            return self.error(404, "Not Found")
        if req.method != "GET":
            return self.error(405, "Method Not Allowed")
        accept = req.headers.get("accept", "")
        if EVENT_STREAM not in accept and "*/*" not in accept:
            return jreply(406, {"error": f"Not Acceptable: this endpoint streams {EVENT_STREAM}"})
        q = (req.query.get("q") or [""])[0]
        if not q.strip():
            return self.error(400, "Missing query parameter 'q'")
        if any((req.query.get(f) or ["False"])[0].lower() != "false" for f in ("generate_query", "analyze_result")):
            return self.error(400, "the stand-in runs no LLM stage: generate_query and analyze_result must be False")
        try:
            limit = int((req.query.get("limit") or ["5"])[0])
        except ValueError:
            limit = 0
        if limit < 1:
            return self.error(400, "Invalid 'limit'")
        ranked = self.index.search(q, limit)
        items = [self.item(row, i) for i, (row, _) in enumerate(ranked)]
        items = finish_items(items, Mods(duplicate=mods.duplicate), "name", self.drift_key)
        if mods.drift:  # both shapes lose their name field
            items = [{("lean_name_" if k == "name" else "declaration" if k == "primary_declaration" else k): v
                      for k, v in it.items()} for it in items]
        events = [{"stage": "generate_query", "query": q}, {"stage": "search", "count": len(items)},
                  {"data": {"search_results": items}}]
        body = self.stream(events)
        return Reply(200, body, content_type=EVENT_STREAM, chunks=split_odd(body), served=True)
