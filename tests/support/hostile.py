"""A hostile HTTP server on loopback for tests: every answer is written byte by byte by
the test (a nested body, a gzip bomb, an endless chunked body, a drip), and it can turn
healthy (a plain Loogle answer) at any time.

``Hostile(reply)``: ``reply(i)`` (the 0-based arrival) returns either the whole response
as bytes, or an async function ``write(server, writer)`` that streams it (through
``server.send`` so the bytes are counted). ``healthy(...)`` builds
a Loogle answer. Counts what it sent (``sent_bytes``) so bounds are checked by bytes.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Awaitable, Callable

Reply = bytes | Callable[[asyncio.StreamWriter], Awaitable[None]]


def response(body: bytes, *, status: int = 200, headers: dict[str, str] | None = None,
             ctype: str = "application/json") -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Type: {ctype}", f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def loogle_body(names: list[Any]) -> bytes:
    return json.dumps({"count": len(names), "hits": [{"name": n, "type": "T", "module": "Mathlib"} for n in names]},
                      ensure_ascii=True).encode()


def healthy(i: int) -> bytes:
    return response(loogle_body(["Nat.add_comm", "Nat.mul_comm"]))


class Hostile:
    def __init__(self, reply: Callable[[int], Reply]) -> None:
        self.reply = reply
        self.requests = 0
        self.sent_bytes = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":", 1)[1]))
            i = self.requests
            self.requests += 1
            out = self.reply(i)
            if isinstance(out, bytes):
                writer.write(out)
                self.sent_bytes += len(out)
                await writer.drain()
            else:
                await out(self, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass

    def send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        self.sent_bytes += len(data)

    def __enter__(self) -> "Hostile":
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop

            async def main() -> None:
                self._stop = asyncio.Event()
                server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
                self.port = server.sockets[0].getsockname()[1]
                ready.set()
                await self._stop.wait()
                server.close()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            loop.run_until_complete(main())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
