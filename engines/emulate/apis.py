"""What each stand-in answers: paths, methods, status codes and body shapes per engine.

Each API turns one parsed HTTP request into a :class:`Reply`, ranking the corpus with
:class:`engines.emulate.scorer.LexicalIndex`. Shapes follow ENGINE-APIS.md field by
field; where the real service's behaviour is undocumented, the choice made here is
noted in the method's docstring. Fault hooks (schema drift, duplicates) act on the hit
items before serialisation so the faulty body keeps the engine's framing.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping
from urllib.parse import parse_qs, quote

from engines.emulate.scorer import LexicalIndex, Row

JSON = "application/json"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case keys
    body: bytes


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    served: bool = False  # a well-formed search answer (counted in stats.served)
    # Sent as these pieces, one write each with a pause between, chunked transfer encoding
    # (a streaming server: an SSE stream whose framing is split across the client's reads).
    chunks: list[bytes] | None = None


@dataclass
class Mods:
    """Content faults for one answer: a renamed name field, a duplicated hit."""

    drift: bool = False
    duplicate: random.Random | None = None


def jreply(status: int, obj: Any, **kw: Any) -> Reply:
    return Reply(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), **kw)


def parse_query_string(raw: str) -> dict[str, list[str]]:
    return parse_qs(raw, keep_blank_values=True)


def finish_items(items: list[dict[str, Any]], mods: Mods, name_key: str, drift_key: str) -> list[dict[str, Any]]:
    """The hit items of one answer with the content faults of ``mods`` applied: a duplicated
    hit, the name field renamed from ``name_key`` to ``drift_key`` (schema drift)."""
    if mods.duplicate is not None and items:
        rng = mods.duplicate
        src = rng.randrange(len(items))
        items.insert(rng.randrange(src + 1, len(items) + 1), dict(items[src]))
    if mods.drift:
        items = [{(drift_key if k == name_key else k): v for k, v in it.items()} for it in items]
    return items


class EngineAPI:
    """One engine's API as a stand-in serves it; subclasses answer :meth:`handle`.

    ``base_path``: what the adapter's base URL adds to the server's root (LeanExplore's
    ``/api/v2``). A new engine's stand-in subclasses this and is declared on its adapter
    (``stand_in = "module:Class"``)."""

    base_path = ""
    name_key = "name"
    drift_key = "full_name"
    error_key = "detail"

    def __init__(self, index: LexicalIndex) -> None:
        self.index = index

    def handle(self, req: Request, mods: Mods) -> Reply:  # pragma: no cover - abstract
        raise NotImplementedError

    query_param = "q"

    def texts(self, req: Request) -> list[str]:
        """The query texts a request carries, as sent (for a stand-in's canned replies)."""
        return list(req.query.get(self.query_param, []))[:1]

    def error(self, status: int, message: str, **kw: Any) -> Reply:
        return jreply(status, {self.error_key: message}, **kw)

    def rate_limited(self, retry_after: float) -> Reply:
        return self.error(429, "Rate limit exceeded")

    def maintenance(self) -> Reply:
        return jreply(405, {"detail": "Method Not Allowed"})

    def server_error(self, status: int) -> Reply:
        if status == 502:
            return Reply(502, b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>",
                         content_type="text/html")
        return self.error(status, "Internal Server Error")

    def html_page(self) -> Reply:
        page = (b"<!DOCTYPE html><html><head><title>Maintenance</title></head>"
                b"<body><h1>We'll be back soon</h1><p>The service is under maintenance.</p></body></html>")
        return Reply(200, page, content_type="text/html; charset=utf-8")


class LeanSearchAPI(EngineAPI):
    """``POST /search`` (§2). Validation errors are FastAPI's 422; the cap is 50 hits."""

    cap = 50

    def rate_limited(self, retry_after: float) -> Reply:
        # slowapi's stock handler: 429, no Retry-After (§2.7).
        return jreply(429, {"error": "Rate limit exceeded: limit reached"})

    def record(self, row: Row) -> dict[str, Any]:
        rec = {"name": list(row.name_parts), "module_name": list(row.module_parts)}
        for key in ("kind", "signature", "type", "value", "docstring", "informal_name", "informal_description"):
            rec[key] = row.get(key)
        return rec

    def texts(self, req: Request) -> list[str]:
        try:
            queries = json.loads(req.body).get("query")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return []
        return [q for q in queries if isinstance(q, str)] if isinstance(queries, list) else []

    def handle(self, req: Request, mods: Mods) -> Reply:
        if req.path != "/search":
            return self.error(404, "Not Found")
        if req.method != "POST":
            return self.error(405, "Method Not Allowed")
        try:
            payload = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            return jreply(422, {"detail": [{"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error"}]})
        queries = payload.get("query") if isinstance(payload, dict) else None
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return jreply(422, {"detail": [{"type": "list_type", "loc": ["body", "query"], "msg": "Input should be a valid list"}]})
        n = payload.get("num_results", 10)
        try:
            n = int(n)  # numeric strings are accepted (lean-lsp-mcp sends "5")
        except (TypeError, ValueError):
            n = -1
        if not 0 < n <= 150:
            return jreply(422, {"detail": [{"type": "less_than_equal", "loc": ["body", "num_results"],
                                            "msg": "Input should be greater than 0 and less than or equal to 150"}]})
        out = []
        for q in queries:
            items = []
            for row, score in self.index.search(q, min(n, self.cap)):
                # Deterministic, and like v2 not monotone in rank (first-stage distance).
                dist = round(0.5 / (1 + score) + (row.index * 7919 % 101) / 1000, 6)
                items.append({"result": self.record(row), "distance": dist})
            if mods.drift:
                for it in items:
                    it["result"] = {("full_name" if k == "name" else k): v for k, v in it["result"].items()}
            out.append(finish_items(items, Mods(duplicate=mods.duplicate), "name", "full_name"))
        return jreply(200, out, served=True)


class LeanExploreAPI(EngineAPI):
    """``GET /api/v2/search?q=&limit=&packages=`` and ``GET /api/v2/declarations/{id}`` (§3).

    Errors are ``{"msg": ...}``; 429 carries ``Retry-After`` (seconds until the window
    frees). ``limit`` has no documented maximum, so none is applied. ``/search`` without
    the ``/api/v2`` prefix is answered too, for convenience.
    """

    error_key = "msg"
    drift_key = "lean_name"
    prefix = "/api/v2"
    base_path = prefix

    def rate_limited(self, retry_after: float) -> Reply:
        return self.error(429, "Rate limit exceeded", headers={"Retry-After": str(max(1, math.ceil(retry_after)))})

    def item(self, row: Row) -> dict[str, Any]:
        sig = row.get("signature") or ""
        kind = row.get("kind") or "theorem"
        path = row.get("source_path") or ("/".join(row.module_parts) + ".lean")
        line = row.get("source_line") or 1
        return {
            "id": row.index + 1,
            "name": row.name,
            "module": row.module,
            "docstring": row.get("docstring"),
            "source_text": f"{kind} {row.name}{'' if sig.startswith(' ') else ' '}{sig}",
            "source_link": f"https://github.com/leanprover-community/mathlib4/blob/master/{path}#L{line}",
            "dependencies": json.dumps([]),  # a JSON array inside a string, as the real API sends
            "informalization": row.get("informal_description"),
        }

    def handle(self, req: Request, mods: Mods) -> Reply:
        path = req.path[len(self.prefix):] if req.path.startswith(self.prefix + "/") else req.path
        if path.startswith("/declarations/"):
            if req.method != "GET":
                return jreply(405, {"detail": "Method Not Allowed"})
            ident = path.rsplit("/", 1)[-1]
            if not ident.isdigit() or not 1 <= int(ident) <= len(self.index.rows):
                return self.error(404, "Declaration not found")
            return jreply(200, self.item(self.index.rows[int(ident) - 1]), served=True)
        if path != "/search":
            return self.error(404, "Not found")
        if req.method != "GET":
            return jreply(405, {"detail": "Method Not Allowed"})
        q = (req.query.get("q") or [""])[0]
        if not q.strip():
            return self.error(400, "Missing or empty query parameter 'q'")
        try:
            limit = int((req.query.get("limit") or ["20"])[0])
        except ValueError:
            limit = 0
        if limit < 1:
            return self.error(400, "Invalid 'limit': must be a positive integer")
        packages = {p.strip().lower() for v in req.query.get("packages", []) for p in v.split(",") if p.strip()}
        ranked = self.index.search(q, None if packages else limit)
        if packages:
            ranked = [(r, s) for r, s in ranked if r.module_parts and r.module_parts[0].lower() in packages][:limit]
        items = finish_items([self.item(r) for r, _ in ranked], mods, self.name_key, self.drift_key)
        body = {"query": q, "results": items, "count": len(items), "processing_time_ms": 1}
        return jreply(200, body, served=True)


class LeanFinderAPI(EngineAPI):
    """``POST /`` with ``{"inputs", "top_k", "version"}`` (§4).

    With ``version`` the answer uses the current schema; without it, the older
    ``url``/``formal_statement`` schema (the stand-in's way to exercise both parsers).
    Errors are ``{"error": ...}``; the real status is undocumented, 400 is used here.
    """

    error_key = "error"
    name_key = "formal_name"
    drift_key = "formalName"
    versions = ("v4.19.0", "v4.24.0", "v4.28.0")

    def texts(self, req: Request) -> list[str]:
        try:
            inputs = json.loads(req.body).get("inputs")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return []
        return [inputs] if isinstance(inputs, str) else []

    def handle(self, req: Request, mods: Mods) -> Reply:
        if req.path not in ("/", ""):
            return self.error(404, "Not Found")
        if req.method != "POST":
            return self.error(405, "Method Not Allowed")
        try:
            payload = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            return self.error(400, "Body is not valid JSON")
        if not isinstance(payload, dict) or not isinstance(payload.get("inputs"), str):
            return self.error(400, "Missing `inputs` string")
        try:
            k = int(payload.get("top_k", 10))
        except (TypeError, ValueError):
            k = 0
        if k < 1:
            return self.error(400, "`top_k` must be a positive integer")
        version = payload.get("version")
        if version is not None and version not in self.versions:
            return self.error(400, f"Unsupported version {version!r}; available: {', '.join(self.versions)}")
        ranked = self.index.search(payload["inputs"], k)
        if version is None:
            items = [{
                "url": f"https://leanprover-community.github.io/mathlib4_docs/find/?pattern={quote(r.name, safe='')}#doc",
                "formal_statement": f"{r.get('kind') or 'theorem'} {r.name} {(r.get('signature') or '').strip()}",
                "informal_statement": r.get("informal_description") or "",
            } for r, _ in ranked]
            items = finish_items(items, mods, "url", "link")
        else:
            items = [{
                "score": round(float(score), 6),
                "formal_name": r.name,
                "informal_name": r.get("informal_name") or "",
                "kind": r.get("kind") or "",
                "type": r.get("type") or (r.get("signature") or "").strip(),
                "informal_description": r.get("informal_description") or "",
                "path": "/".join(r.module_parts),
            } for r, score in ranked]
            items = finish_items(items, mods, self.name_key, self.drift_key)
        return jreply(200, {"results": items}, served=True)


class LoogleAPI(EngineAPI):
    """``GET /json?q=`` (§5). Query errors are 200 + ``error``; load shedding is 503 + ``Retry-After: 5``.

    The stand-in reports an error for unbalanced brackets and for a query with no
    searchable token; everything else is ranked like the other stand-ins (the real
    Loogle is a pattern search).
    """

    error_key = "error"
    drift_key = "decl_name"
    cap = 200
    _pairs = {"(": ")", "[": "]", "{": "}"}

    def rate_limited(self, retry_after: float) -> Reply:
        # Loogle has no per-client limit; its answer to overload is this 503.
        return self.error(503, "Loogle is currently under load, please try again later.", headers={"Retry-After": "5"})

    def server_error(self, status: int) -> Reply:
        if status == 503:
            return self.rate_limited(5)
        return super().server_error(status)

    def _syntax_error(self, q: str) -> str | None:
        stack: list[str] = []
        for i, ch in enumerate(q):
            if ch in self._pairs:
                stack.append(self._pairs[ch])
            elif ch in self._pairs.values():
                if not stack or stack.pop() != ch:
                    return f"<input>:1:{i}: unexpected token '{ch}'; expected term"
        if stack:
            return f"<input>:1:{len(q)}: unexpected end of input; expected '{stack[-1]}'"
        return None

    def handle(self, req: Request, mods: Mods) -> Reply:
        if req.headers.get("user-agent") == "Python-urllib/3.12":
            return Reply(403, b"Your requests are causing issues on this loogle instance. Please contact the maintainer.",
                         content_type="text/plain; charset=utf-8")
        if req.path != "/json":
            return Reply(404, b"Not Found", content_type="text/plain")
        qs = req.query.get("q", [])
        if len(qs) != 1 or not qs[0].strip():
            return jreply(200, {})
        q = qs[0]
        if q.startswith("#find "):
            q = q[len("#find "):]
        q = "".join(" " if ch.isspace() else ch for ch in q)
        err = self._syntax_error(q)
        if err is None and not self.index.scores(q):
            err = f"Unknown identifier or pattern: {q.strip()!r}"
        if err is not None:
            return jreply(200, {"error": err, "heartbeats": 0, "suggestions": []})
        ranked = self.index.search(q, None)
        hits = [{"name": r.name, "type": (" " + (r.get("signature") or "").lstrip()) if r.get("signature") else "",
                 "module": r.module or None, "doc": r.get("docstring")} for r, _ in ranked[: self.cap]]
        if "lucky" in req.query and hits:
            return Reply(302, b"", headers={"Location": f"https://leanprover-community.github.io/mathlib4_docs/find/?pattern={quote(hits[0]['name'])}#doc"})
        hits = finish_items(hits, mods, self.name_key, self.drift_key)
        shown = f" Of these, {len(hits)} are shown." if len(ranked) > len(hits) else ""
        body = {"header": f"Found {len(ranked)} declarations mentioning {q.strip()}.{shown}",
                "heartbeats": 1, "count": len(ranked), "hits": hits}
        return jreply(200, body, served=True)


class LeanStateSearchAPI(EngineAPI):
    """``GET /api/search?query=&results=&rev=`` (§6): a bare list on success, 400 + ``error``/``schema``.

    Follows ``route.ts``: all three parameters required, ``query`` must hold ``⊢``, ``rev``
    must be indexed (the stand-in indexes ``revisions``; the real list is not published),
    ``error`` before ``schema`` in error bodies. The server has no rate limit in code; the
    stand-in answers excess traffic with 429 + ``error``. Items carry no score.
    """

    error_key = "error"
    query_param = "query"
    revisions = ("v4.17.0-rc1", "v4.22.0")

    def invalid(self, error: str, description: str, **schema: Any) -> Reply:
        return jreply(400, {"error": error, "schema": {"description": description, **schema}})

    def handle(self, req: Request, mods: Mods) -> Reply:
        if req.path != "/api/search":
            return self.error(404, "Not Found")
        if req.method != "GET":
            return self.error(405, "Method Not Allowed")
        params = {k: (req.query.get(k) or [""])[0] for k in ("query", "results", "rev")}
        if not all(params.values()):
            return self.invalid("Missing required parameters", "query, results and rev are all required",
                                parameters={"query": "string", "results": "number", "rev": "string"})
        if "⊢" not in params["query"]:
            return self.invalid("Invalid parameter value", "The 'query' parameter must be a valid Lean proof state")
        try:
            n = int(params["results"])
        except ValueError:
            n = 0
        if n < 1:
            return self.invalid("Invalid parameter value", "The 'results' parameter must be a positive integer")
        if params["rev"] not in self.revisions:
            return self.invalid("Invalid parameter value", "Lean State Search does not support the specified revision")
        ranked = self.index.search(params["query"].replace("⊢", " "), n)
        items = [{"name": r.name, "formal_type": r.get("type") or (r.get("signature") or "").strip(),
                  "module": r.module, "rev": params["rev"]} for r, _ in ranked]
        return jreply(200, finish_items(items, mods, self.name_key, self.drift_key), served=True)


class _StandIns(Mapping):
    """Engine name → its stand-in API class, read from each adapter's ``stand_in``
    declaration in :data:`engines.registry.ENGINES` (a live view: a later-registered engine
    is in it too)."""

    def __getitem__(self, engine: str) -> type[EngineAPI]:
        from engines.registry import ENGINES, stand_in_api

        if engine not in ENGINES or not ENGINES[engine].stand_in:
            raise KeyError(engine)
        return stand_in_api(engine)

    def __iter__(self) -> Iterator[str]:
        from engines.registry import ENGINES

        return iter([name for name, cls in ENGINES.items() if cls.stand_in])

    def __len__(self) -> int:
        return len(list(iter(self)))


APIS: Mapping[str, type[EngineAPI]] = _StandIns()
