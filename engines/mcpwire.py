"""MCP over streamable HTTP, the pure half: JSON-RPC requests, answers read from JSON or SSE.

The Model Context Protocol (ENGINE-APIS.md §10) is spoken by the crawler over its own
transport (:mod:`crawler.mcp_session` sends, paces and archives every POST), never through
the ``mcp`` SDK's client, which hides the bytes and counts nothing against a budget.
:class:`McpAdapter` is the base of the MCP engines: it builds the JSON-RPC requests of both
eras the SDK 2.3.0 speaks — the stateless **2026-07-28** envelope (``Mcp-Method`` /
``Mcp-Name`` headers, ``_meta`` in ``params``) and the **handshake** era (``initialize``,
``Mcp-Session-Id``, ``notifications/initialized``) — reads a JSON body or an SSE stream
(the JSON-RPC answer in it, not a notification), and turns an answer into hits.

Per worker the crawler keeps an :class:`McpState` (era, negotiated version, session id,
the ``tools/list`` result). Preamble exchanges are archived with no query texts: they
parse to no answers. The cache identity of an answer is the configuration's identity
(server URL, tool, arguments' parameters, ``era``) and, per exchange, the fingerprint
:meth:`McpAdapter.fingerprint` (URL, tool, canonical arguments, era): never the JSON-RPC
id, ``_meta`` or the session id.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import httpx

from engines import __version__
from engines.jsonbody import snippet
from engines.protocol import AskedFor, EngineHTTPError, EngineOutage, EngineParseError, HitList
from engines.remote import RemoteAdapter
from engines.sse import is_event_stream, parse_sse

STATELESS = "2026-07-28"  # the stateless era's protocol version
HANDSHAKE = "handshake"
OFFER = "2025-11-25"  # the version offered to ``initialize`` (the SDK's)
ERAS = ("auto", STATELESS, HANDSHAKE)
CLIENT_INFO = {"name": "engines", "version": __version__}
PREAMBLE = ("server/discover", "initialize", "notifications/initialized", "tools/list")


@dataclass
class McpState:
    """One worker's MCP connection: the era (None until opened), the negotiated version, the
    session id (never archived), the ``tools/list`` result, the next JSON-RPC id."""

    era: str | None = None
    version: str | None = None
    session_id: str | None = field(default=None, repr=False)
    tools: dict[str, Any] | None = None
    next_id: int = 1

    def take_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rpc_message(engine: str, headers: Mapping[str, str], body: bytes, want_id: Any = None) -> dict[str, Any]:
    """The JSON-RPC answer of a body: the one JSON message, or, for ``text/event-stream``,
    the stream's answer (a message with ``result`` or ``error`` and an id: ``want_id`` when
    given, else the last); notifications and empty priming events are skipped."""
    try:
        if is_event_stream(headers):
            found = None
            for ev in parse_sse(body, flush_partial=True):  # a stream cut short shows what arrived
                if ev.event != "message" or not ev.data.strip():
                    continue
                msg = json.loads(ev.data)
                if isinstance(msg, dict) and ("result" in msg or "error" in msg) and msg.get("id") is not None:
                    if want_id is None or msg.get("id") == want_id:
                        found = msg
            if found is None:
                raise EngineParseError(f"{engine}: no JSON-RPC answer in the event stream: {snippet(body, 120)}")
            return found
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EngineParseError(f"{engine}: not a JSON-RPC message ({exc}): {snippet(body, 120)}") from None
    if not isinstance(msg, dict) or ("result" not in msg and "error" not in msg):
        raise EngineParseError(f"{engine}: not a JSON-RPC answer: {snippet(body, 120)}")
    return msg


class McpAdapter(RemoteAdapter):
    """An engine served as an MCP tool; subclasses declare :attr:`tool` and the hooks
    :meth:`arguments` (query text → arguments) and :meth:`items` (structuredContent → items)."""

    transport = "mcp"
    accepts = ("application/json", "text/event-stream")
    tool: str = ""  # the tool called with tools/call
    query_key: str = "query"  # the argument carrying the query text
    reads_tools = True  # read tools/list once per crawl (archived, kept with the crawl)
    item_label = "hit"

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        params.setdefault("era", "auto")
        super().__init__(base_url, **params)
        if self.params["era"] not in ERAS:
            from store.errors import InputError

            raise InputError(f"{self.engine}: era {self.params['era']!r} is not one of {', '.join(ERAS)}")

    # --- requests ------------------------------------------------------------------------
    def arguments(self, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def rpc_request(self, state: McpState, method: str, params: dict[str, Any] | None = None) -> httpx.Request:
        """One JSON-RPC POST in ``state``'s era (a notification has no id)."""
        headers = self.request_headers(json_body=True)
        params = dict(params or {})
        if state.era == STATELESS or (state.era is None and method == "server/discover"):
            headers.update({"Mcp-Protocol-Version": STATELESS, "Mcp-Method": method})
            if method == "tools/call":
                headers["Mcp-Name"] = params.get("name", "")
            params["_meta"] = {"io.modelcontextprotocol/protocolVersion": STATELESS,
                               "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
                               "io.modelcontextprotocol/clientCapabilities": {}}
        elif method != "initialize" and state.version:
            headers["Mcp-Protocol-Version"] = state.version
        if state.session_id and state.era == HANDSHAKE:
            headers["Mcp-Session-Id"] = state.session_id
        msg: dict[str, Any] = {"jsonrpc": "2.0"}
        if not method.startswith("notifications/"):
            msg["id"] = state.take_id()
        msg["method"] = method
        if params or method not in ("notifications/initialized", "tools/list"):
            msg["params"] = params
        body = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return self.new_request("POST", self.base_url, content=body, headers=headers)

    def build_call(self, texts: list[str], state: McpState) -> httpx.Request:
        self.check_texts(texts)
        return self.rpc_request(state, "tools/call", {"name": self.tool, "arguments": self.arguments(texts[0])})

    def build_request(self, texts: list[str]) -> httpx.Request:
        """A ``tools/call`` outside any session (the era the identity names; handshake for auto)."""
        era = STATELESS if self.params["era"] == STATELESS else HANDSHAKE
        return self.build_call(texts, McpState(era=era, version=None if era == HANDSHAKE else STATELESS))

    def fingerprint(self, method: str, url: str, body: bytes | None, era: str | None) -> str:
        """The cache identity of an exchange: URL, tool, canonical arguments and era for a
        ``tools/call``; the JSON-RPC method and era for a preamble (never id, _meta, session)."""
        try:
            msg = json.loads(body or b"null")
        except ValueError:
            msg = None
        if isinstance(msg, dict) and isinstance(msg.get("params"), dict):
            p = msg["params"]
            key: Any = [msg.get("method"), p.get("name"), p.get("arguments")]
        else:
            key = [msg.get("method") if isinstance(msg, dict) else None]
        raw = canonical([method, url, key, era or self.params["era"]]).encode("utf-8")
        return hashlib.sha256(raw).hexdigest()

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """The query text of an archived ``tools/call`` of this engine's tool (None: a preamble)."""
        if self.sent_to(method, url, "POST", "") is None:
            return None
        try:
            msg = json.loads(body or b"")
        except ValueError:
            return None
        p = msg.get("params") if isinstance(msg, dict) and msg.get("method") == "tools/call" else None
        if not isinstance(p, dict) or p.get("name") != self.tool or not isinstance(p.get("arguments"), dict):
            return None
        text = p["arguments"].get(self.query_key)
        if not isinstance(text, str):
            return None
        return AskedFor([text], self.params_shown(p["arguments"]))

    def params_shown(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The constructor parameters a call's arguments show (default: none)."""
        return {}

    # --- answers --------------------------------------------------------------------------
    def parse(self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes) -> list[HitList]:
        """A preamble (no texts) answers nothing; a ``tools/call`` answer gives one hit list."""
        if not texts:
            return []
        msg = rpc_message(self.engine, headers, body)
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {"message": msg["error"]}
            self.rpc_error(err.get("code"), str(err.get("message", "")))
            raise EngineHTTPError(f"{self.engine}: JSON-RPC error {err.get('code')}: {str(err.get('message'))[:200]}")
        result = msg["result"]
        if not isinstance(result, dict):
            raise EngineParseError(f"{self.engine}: result is {type(result).__name__}, expected an object")
        if result.get("isError"):
            text = " ".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))
            self.tool_error(text)
            raise EngineHTTPError(f"{self.engine}: tool error: {text[:200]}")
        sc = result.get("structuredContent")
        if not isinstance(sc, dict):
            raise EngineParseError(f"{self.engine}: no structuredContent object in the tool result")
        return [self.hit_list(self.items(sc))]

    def rpc_error(self, code: Any, message: str) -> None:
        """A JSON-RPC error: raise :class:`EngineOutage` when it means the service is down
        (default: -32603 naming a rate limit); otherwise return (a permanent failure)."""
        if code == -32603 and "ratelimit" in message.lower().replace(" ", "").replace("_", ""):
            raise EngineOutage(f"{self.engine}: {message[:200]}")

    def tool_error(self, text: str) -> None:
        """A tool error (``isError``): may raise :class:`EngineOutage`; else a permanent failure."""

    def pause_seconds(self, status_code: int, headers: Mapping[str, str], body: bytes, now: float) -> float | None:
        """Seconds to pause the host for this answer (a limit reported in-band), or None."""
        return None

    def use_tools(self, tools: dict[str, Any]) -> str | None:
        """Take the ``tools/list`` result; a one-line reason when this crawl cannot go on."""
        if not any(isinstance(t, dict) and t.get("name") == self.tool for t in tools.get("tools") or []):
            return f"{self.engine}: the server lists no tool {self.tool!r}"
        return None
