"""An MCP session over the crawler's own transport: opened once per worker, reused, re-opened once.

The fetcher (:mod:`crawler.fetch`) owns one :class:`McpSession` per MCP engine. Before a
``tools/call`` it awaits :meth:`McpSession.ready`, which opens the session the way the
SDK 2.3.0 client does in ``auto`` mode (ENGINE-APIS.md §10.2): ``server/discover`` with the
2026-07-28 envelope; on a JSON-RPC error or an HTTP error, the handshake (``initialize``
offering 2025-11-25, the ``Mcp-Session-Id`` it returns, ``notifications/initialized``).
``era=handshake`` skips the probe, ``era=2026-07-28`` never falls back. Then ``tools/list``
once per crawl. Every one of these POSTs takes a slot of the host's pacer, and is
archived byte for byte (session id redacted) with no query texts: counted, never an answer.
An expired session (404, or a 400 naming the session, on a request that carried one) is
re-opened once; a second expiry in a row is a failure.
"""

from __future__ import annotations

import asyncio
import hashlib
from types import SimpleNamespace
from typing import Any

from archive.outcome import ANSWERS, Outcome
from crawler.retry import EngineBroken, Retryable
from engines.base import EngineParseError
from engines.mcpwire import CLIENT_INFO, HANDSHAKE, OFFER, STATELESS, McpState, rpc_message

_NO_ANSWER = Outcome(ANSWERS, [], None)  # a preamble exchange: parsed, answers nothing


class PlainSession:
    """What the fetcher asks of a session, for an engine without one: nothing to open."""

    def __init__(self, fetcher: Any) -> None:
        self.adapter = fetcher.adapter

    async def ready(self, attempt: int) -> None:
        return None

    async def check_expired(self, texts: list[str], exchange: dict[str, Any]) -> None:
        return None

    def build_request(self, texts: list[str]):
        return self.adapter.build_request(texts)

    def fingerprint(self, method: str, url: str, body: bytes | None) -> str:
        """The request's cache fingerprint: method, URL (redacted) and body bytes."""
        return hashlib.sha256(b"\0".join([method.encode(), url.encode(), body or b""])).hexdigest()


def session_for(fetcher: Any):
    """An :class:`McpSession` for an MCP adapter (it has ``build_call``), else a :class:`PlainSession`."""
    return McpSession(fetcher) if hasattr(fetcher.adapter, "build_call") else PlainSession(fetcher)


class McpFailure(EngineBroken):
    """The session cannot be opened for a reason retrying will not change (one line): the
    engine stops like a broken one."""


class McpSession:
    def __init__(self, fetcher: Any) -> None:
        self.f = fetcher
        self.adapter = fetcher.adapter
        self.state = McpState()
        self.lock = asyncio.Lock()
        self.expired_in_row = 0
        self.known_era: str | None = None  # the era found when the session was first opened
        self.sent: dict[tuple[str, ...], str | None] = {}  # texts in flight -> the session they carry
        self.posts = 0  # preamble POSTs sent

    # ------------------------------------------------------------------ public
    async def ready(self, attempt: int) -> None:
        """Open the session and read ``tools/list`` when not done yet (raises Retryable,
        :class:`McpFailure`)."""
        async with self.lock:
            if self.state.era is None:
                try:
                    await self._open(attempt)
                except BaseException:
                    self.state = McpState(tools=self.state.tools)  # half-open: start again next time
                    raise
            if self.state.tools is None and self.adapter.reads_tools:
                msg = await self._post("tools/list", None, attempt)
                result = msg.get("result") if msg else None
                if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
                    raise McpFailure(f"{self.adapter.engine}: tools/list gave no tool list")
                problem = self.adapter.use_tools(result)
                if problem:
                    raise McpFailure(problem)
                self.state.tools = result
                self.f.on_event(f"{self.adapter.engine}: MCP era {self.state.era} "
                                f"(protocol {self.state.version}); tools/list archived")

    def build_request(self, texts: list[str]):
        """The ``tools/call`` of ``texts`` on the open session (raises Retryable while another
        loop re-opens it: the attempt goes round again, re-paced)."""
        if self.state.era is None:
            raise Retryable(f"{self.adapter.engine}: MCP session re-opening")
        self.sent[tuple(texts)] = self.state.session_id
        return self.adapter.build_call(texts, self.state)

    def expired(self, texts: list[str], status: int | None, body: bytes | None) -> bool:
        """Whether the answer to ``texts`` says the session it carried ended (404, or a 400
        naming the session). The current session is then forgotten (the next ready()
        re-opens it); an answer for a session already replaced only asks for a retry."""
        carried = self.sent.pop(tuple(texts), None)
        if not carried or status not in (400, 404):
            return False
        if status == 400 and b"session" not in (body or b"").lower():
            return False
        if carried != self.state.session_id:
            return True  # another loop already re-opened (or is re-opening) the session
        self.expired_in_row += 1
        if self.expired_in_row > 1:
            raise McpFailure(f"{self.adapter.engine}: the MCP session expired again right after re-opening "
                             f"(HTTP {status}); the service is treated as down")
        self.state = McpState(tools=self.state.tools)
        return True

    def fingerprint(self, method: str, url: str, body: bytes | None) -> str:
        return self.adapter.fingerprint(method, url, body, self.state.era)

    async def check_expired(self, texts: list[str], exchange: dict[str, Any]) -> None:
        """When the answer to ``texts`` says its session ended: archive it and raise Retryable
        (the next attempt re-opens it). A 2xx answer: the session works."""
        status = exchange["status_code"]
        if self.expired(texts, status, exchange["response_body"]):
            await self.f._store(exchange)
            raise Retryable(f"{self.adapter.engine}: MCP session expired (HTTP {status}); re-opening")
        if status is not None and 200 <= status < 300:
            self.expired_in_row = 0

    # ----------------------------------------------------------------- opening
    async def _open(self, attempt: int) -> None:
        era = self.adapter.params["era"]
        self.state = McpState(tools=self.state.tools)
        if era != HANDSHAKE and self.known_era != HANDSHAKE:  # a re-opened session skips the probe: 2 POSTs
            msg = await self._post("server/discover", {}, attempt, probe=True)
            result = msg.get("result") if msg else None
            if isinstance(result, dict) and STATELESS in (result.get("supportedVersions") or []):
                self.state.era, self.state.version = STATELESS, STATELESS
                return
            if era == STATELESS:
                raise McpFailure(f"{self.adapter.engine}: the server does not speak the {STATELESS} era "
                                 "(server/discover refused); crawl with era auto or handshake")
        params = {"protocolVersion": OFFER, "capabilities": {}, "clientInfo": dict(CLIENT_INFO)}
        msg = await self._post("initialize", params, attempt, keep_session=True)
        result = msg.get("result") if msg else None
        if not isinstance(result, dict) or not isinstance(result.get("protocolVersion"), str):
            self.state = McpState(tools=self.state.tools)
            raise McpFailure(f"{self.adapter.engine}: initialize was refused: {str(msg)[:200]}")
        self.state.era, self.state.version = HANDSHAKE, result["protocolVersion"]
        self.known_era = HANDSHAKE
        await self._post("notifications/initialized", None, attempt, probe=True)

    async def _post(self, method: str, params: dict[str, Any] | None, attempt: int, *, probe: bool = False,
                    keep_session: bool = False) -> dict[str, Any] | None:
        """One paced, archived preamble POST: its JSON-RPC answer (None for none). A 4xx to a
        probe (discover, the notification) is an answer to fall back on; other failures raise."""
        f = self.f
        request = self.adapter.rpc_request(self.state, method, params)
        granted = await f.pacer.acquire()
        self.posts += 1
        exchange, headers, truncated, elapsed = await f._send([], attempt, granted, request=request)
        status, body = exchange["status_code"], exchange["response_body"] or b""
        if probe and 400 <= status < 500 and status not in (408, 429):
            await f._store(exchange, answers=([], _NO_ANSWER, elapsed))
            return None
        if status == 202 or not 200 <= status < 300 or truncated:
            if status == 202:
                await f._store(exchange, answers=([], _NO_ANSWER, elapsed))
                return None
            out = SimpleNamespace(failed=None)  # what the fetcher's status check fills in
            if await f._refused(exchange, headers, truncated, attempt, out):  # raises when retryable
                raise McpFailure(f"{self.adapter.engine}: {method}: {out.failed}")
        await f._store(exchange, answers=([], _NO_ANSWER, elapsed))
        if keep_session:
            self.state.session_id = next((v for k, v in headers.items() if k.lower() == "mcp-session-id"), None)
        try:
            return rpc_message(self.adapter.engine, headers, body)
        except EngineParseError:
            return None if probe else {"error": "unreadable answer"}
