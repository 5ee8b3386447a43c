"""Failing fast without a network (issue 34, item 12).

A host that does not resolve is not a 503: retrying it for a minute and a half prints
thirty lines and changes nothing. :func:`unresolved` asks the resolver once (bounded by
a few seconds), and :func:`is_dns_failure` recognises the same failure inside a
transport error, so the crawler and the dense engine can stop with one line instead.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

# The longest wait for the resolver's answer; a slower answer counts as "resolves"
# (the caller goes on as before, and its own timeouts apply).
RESOLVE_TIMEOUT = 5.0


def unresolved(url: str, timeout: float = RESOLVE_TIMEOUT) -> str | None:
    """The resolver's reason when ``url``'s host does not resolve (``Name or service not
    known``), else None (it resolves, the answer is slow, or the URL names no host)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    port = port or (443 if parts.scheme == "https" else 80)
    answer: list[str | None] = []

    def look() -> None:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            answer.append(exc.strerror or str(exc))
            return
        except (OSError, UnicodeError):
            pass
        answer.append(None)

    thread = threading.Thread(target=look, name="resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else None


def is_dns_failure(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is the resolver saying the host does not resolve."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, socket.gaierror):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False
