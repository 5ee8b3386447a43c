"""The stand-in HTTP server: a small HTTP/1.1 server on asyncio streams, rate limit, faults.

One :class:`StandIn` serves one engine's API (:mod:`engines.emulate.apis`) over a real
loopback socket, with keep-alive. It measures arrivals itself: every request is
timestamped (``time.perf_counter``) when its headers have been read; a request that
would make more than ``rate.n`` *admitted* requests fall within ``rate.period``
seconds is answered the way that engine answers excess traffic (429, or Loogle's 503)
and counted in ``stats.violations``. A client pacing exactly at the limit should keep
a small safety margin, because arrival times include network jitter.

Faults (:class:`FaultConfig`) are drawn per request from ``random.Random(f"{seed}:{i}")``
where ``i`` is the request's arrival number, so a sequential client sees the same
faults on the same requests for the same seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import socket
import struct
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Union

from engines.emulate.apis import Mods, Reply, Request, parse_query_string
from engines.emulate.scorer import LexicalIndex, Row, load_rows
from engines.rates import Rate
from engines.registry import stand_in_api
from store.errors import InputError

RESET = "reset"
HANG = "timeout"

# A recorded answer: (status, headers, body bytes). ``Content-Type`` in the headers is
# sent as the content type (default JSON).
CannedReply = tuple[int, Mapping[str, str], bytes]
# Query text -> recorded answer, or a callable (query texts, request) -> answer or None.
# Texts with no recorded answer are ranked from the corpus as usual.
Canned = Union[Mapping[str, CannedReply], Callable[[list[str], Request], Union[CannedReply, None]]]


@dataclass(frozen=True)
class FaultConfig:
    """Fault switches: probabilities in [0, 1] per request, plus latency and a 405 window.

    - ``latency``: seconds added before answering (to a ``latency_p`` share of requests);
    - ``error_5xx``: 500, 502 (HTML from a proxy) or 503 (for Loogle: the overload answer);
    - ``reset``: the connection is reset (RST) without an answer;
    - ``timeout``: no answer at all, the connection stays open until the client gives up;
    - ``malformed_json``, ``truncated``: status 200, JSON broken / cut in half;
    - ``html_200``: an HTML maintenance page with status 200;
    - ``schema_drift``: the name field of every hit is renamed;
    - ``duplicates``: one hit is repeated later in the list;
    - ``maintenance``: requests number ``start <= i < stop`` (0-based arrivals) get 405.
    """

    latency: float = 0.0
    latency_p: float = 1.0
    error_5xx: float = 0.0
    reset: float = 0.0
    timeout: float = 0.0
    malformed_json: float = 0.0
    truncated: float = 0.0
    html_200: float = 0.0
    schema_drift: float = 0.0
    duplicates: float = 0.0
    maintenance: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("latency_p", "error_5xx", "reset", "timeout", "malformed_json", "truncated",
                     "html_200", "schema_drift", "duplicates"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise InputError(f"fault {name}={p} is not a probability in [0, 1]")
        if self.latency < 0:
            raise InputError(f"fault latency={self.latency} must be >= 0 seconds")


@dataclass
class Stats:
    """What the server saw. ``violations`` = requests over the rate limit."""

    requests: int = 0
    violations: int = 0
    served: int = 0  # 200 answers carrying results (schema-drift and duplicate answers included)
    connections: int = 0  # TCP connections accepted (keep-alive reuses one)
    in_flight: int = 0  # requests read and not yet answered
    max_in_flight: int = 0  # the most requests this server held at once (a count, not a clock)
    receive_times: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    log: list[dict[str, Any]] = field(default_factory=list)  # one entry per request, in arrival order


def _break_json(body: bytes) -> bytes:
    """Insert ``,,`` at the first point past the middle that is outside a string: never valid JSON."""
    in_str = escaped = False
    half = len(body) // 2
    for i, ch in enumerate(body):
        if in_str:
            if escaped:
                escaped = False
            elif ch == 0x5C:  # backslash
                escaped = True
            elif ch == 0x22:
                in_str = False
        elif ch == 0x22:
            in_str = True
        elif i >= half:
            return body[:i] + b",," + body[i:]
    return body + b",,"


class StandIn:
    """A loopback stand-in for ``engine``: ``async with StandIn(...) as srv`` or ``with StandIn(...).in_thread() as srv``.

    ``canned`` replays recorded answers (see :data:`Canned`) instead of ranking the
    corpus; the rate limit and the maintenance window still apply to them.
    """

    def __init__(
        self,
        engine: str,
        corpus: Iterable[dict[str, Any]] | str | Path,
        rate: Rate | None = None,
        faults: FaultConfig | None = None,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        canned: Canned | None = None,
        variant: str | None = None,
    ) -> None:
        api = stand_in_api(engine)  # one line (InputError) for an engine without a stand-in
        self.engine = engine
        self.rows: list[Row] = load_rows(corpus)
        self.index = LexicalIndex(self.rows)
        self.api = api(self.index, variant=variant) if variant else api(self.index)  # variant: MCP wire variant
        self.rate = rate
        self.faults = faults or FaultConfig()
        self.seed = seed
        self.host = host
        self.port = port
        # Recorded bodies to replay (real responses in tests): the framing, quirks and
        # errors of a real service go over the same socket and crawler path.
        self.canned = canned
        self.maintenance = False  # switch a 405 window on and off at run time
        self.stats = Stats()
        self._admitted: deque[float] = deque()
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task] = set()

    # ---------------------------------------------------------------- lifecycle
    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The base URL to give this engine's adapter (the root + its API's ``base_path``, e.g. LeanExplore's ``/api/v2``)."""
        return self.root_url + self.api.base_path

    async def start(self) -> "StandIn":
        if hasattr(self.api, "astart"):  # an ASGI-backed stand-in (the MCP SDK's app)
            await self.api.astart()
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        if hasattr(self.api, "astop"):
            await self.api.astop()

    async def __aenter__(self) -> "StandIn":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @contextlib.contextmanager
    def in_thread(self) -> Iterator["StandIn"]:
        """Serve from a background thread with its own event loop (for sync code and subprocess clients)."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the caller below
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=run, name=f"standin-{self.engine}", daemon=True)
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            loop.close()
            raise failure[0]
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()

    def __enter__(self) -> "StandIn":
        """Sync use: the same as ``in_thread()``."""
        self._thread_cm = self.in_thread()
        return self._thread_cm.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._thread_cm.__exit__(*exc)

    # ---------------------------------------------------------------- HTTP
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._conns.add(task)
        self.stats.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                arrival = time.perf_counter()
                try:
                    req, keep_alive = await self._read_request(head, reader)
                except (ValueError, asyncio.IncompleteReadError):
                    await self._write(writer, Reply(400, b"Bad Request", content_type="text/plain"), False)
                    return
                self.stats.in_flight += 1
                self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
                try:
                    outcome = await self._respond(req, arrival)
                finally:
                    self.stats.in_flight -= 1
                if outcome == RESET:
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        # SO_LINGER 0: close() sends RST, the client sees a reset, not EOF.
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if outcome == HANG:
                    with contextlib.suppress(ConnectionError):
                        await reader.read()  # until the client gives up (or the server stops)
                    return
                assert isinstance(outcome, Reply)
                keep_alive = keep_alive and outcome.headers.get("Connection") != "close"
                await self._write(writer, outcome, keep_alive)
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._conns.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _read_request(self, head: bytes, reader: asyncio.StreamReader) -> tuple[Request, bool]:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(data[:-2])
            body = b"".join(chunks)
        else:
            n = int(headers.get("content-length") or 0)
            body = await reader.readexactly(n) if n else b""
        path, _, raw_query = target.partition("?")
        conn = headers.get("connection", "").lower()
        keep_alive = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        return Request(method.upper(), path, parse_query_string(raw_query), headers, body), keep_alive

    async def _write(self, writer: asyncio.StreamWriter, reply: Reply, keep_alive: bool) -> None:
        reason = HTTPStatus(reply.status).phrase if reply.status in HTTPStatus._value2member_map_ else ""
        length = "Transfer-Encoding: chunked" if reply.chunks is not None else f"Content-Length: {len(reply.body)}"
        head = [f"HTTP/1.1 {reply.status} {reason}", f"Content-Type: {reply.content_type}",
                length, "Server: engines-stand-in",
                f"Connection: {'keep-alive' if keep_alive else 'close'}"]
        head += [f"{k}: {v}" for k, v in reply.headers.items() if k != "Connection"]
        head_bytes = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if reply.chunks is None:
            writer.write(head_bytes + reply.body)
            await writer.drain()
            return
        writer.write(head_bytes)
        for piece in reply.chunks:  # one write each, a pause between: separate reads at the client
            if piece:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await asyncio.sleep(0.002)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    # ---------------------------------------------------------------- behaviour
    def _over_limit(self, now: float) -> float | None:
        """None when admitted; else seconds until the window has room again."""
        if self.rate is None:
            return None
        window = self._admitted
        while window and window[0] <= now - self.rate.period:
            window.popleft()
        if len(window) >= self.rate.n:
            return window[0] + self.rate.period - now
        window.append(now)
        return None

    def _replay(self, req: Request) -> Reply | None:
        if self.canned is None:
            return None
        texts = self.api.texts(req)
        if callable(self.canned):
            found = self.canned(texts, req)
        else:
            found = self.canned.get(texts[0]) if len(texts) == 1 else None
        if found is None:
            return None
        status, headers, body = found
        headers = dict(headers)
        ctype = next((headers.pop(k) for k in list(headers) if k.lower() == "content-type"), "application/json")
        return Reply(int(status), bytes(body), content_type=ctype, headers=headers, served=200 <= int(status) < 300)

    async def _respond(self, req: Request, arrival: float) -> Reply | str:
        st = self.stats
        i = st.requests
        st.requests += 1
        st.receive_times.append(arrival)
        entry: dict[str, Any] = {
            "i": i, "t": arrival, "method": req.method, "path": req.path, "fault": None,
            "user_agent": req.headers.get("user-agent"),
            "authorization": "authorization" in req.headers,  # presence only: never keep a secret
        }
        st.log.append(entry)
        f = self.faults
        rng = random.Random(f"{self.seed}:{i}")
        # Fixed number of draws per request, so each fault's outcome for request i
        # depends only on (seed, i) and not on which other faults are switched on.
        u = {k: rng.random() for k in ("latency", "reset", "timeout", "error_5xx", "html_200",
                                        "malformed_json", "truncated", "schema_drift", "duplicates")}
        status_pick = rng.choice((500, 502, 503))
        dup_rng = random.Random(rng.random())

        wait = self._over_limit(arrival)
        fault: str | None = None
        if wait is not None:
            st.violations += 1
            reply: Reply | str = self.api.rate_limited(wait)
            fault = "rate_limited"
        elif self.maintenance or (f.maintenance and f.maintenance[0] <= i < f.maintenance[1]):
            reply, fault = self.api.maintenance(), "maintenance"
        elif u["reset"] < f.reset:
            reply, fault = RESET, "reset"
        elif u["timeout"] < f.timeout:
            reply, fault = HANG, "timeout"
        elif u["error_5xx"] < f.error_5xx:
            reply, fault = self.api.server_error(status_pick), "error_5xx"
        elif u["html_200"] < f.html_200:
            reply, fault = self.api.html_page(), "html_200"
        else:
            mods = Mods(drift=u["schema_drift"] < f.schema_drift,
                        duplicate=dup_rng if u["duplicates"] < f.duplicates else None)
            reply = self._replay(req) or self.api.handle(req, mods)
            if inspect.isawaitable(reply):  # an ASGI app (engines.emulate.asgi)
                reply = await reply
            if reply.served and mods.drift:
                fault = "schema_drift"
            elif reply.served and mods.duplicate is not None:
                fault = "duplicates"
            if reply.status == 200 and reply.served:
                if u["malformed_json"] < f.malformed_json:
                    reply = Reply(200, _break_json(reply.body))
                    fault = "malformed_json"
                elif u["truncated"] < f.truncated:
                    reply = Reply(200, reply.body[: max(1, len(reply.body) // 2)], headers={"Connection": "close"})
                    fault = "truncated"
        if fault:
            st.faults[fault] += 1
            entry["fault"] = fault
        if f.latency > 0 and u["latency"] < f.latency_p and reply != RESET:
            await asyncio.sleep(f.latency)
        if isinstance(reply, Reply):
            st.statuses[reply.status] += 1
            entry["status"] = reply.status
            if reply.served:
                st.served += 1
        return reply
