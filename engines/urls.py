"""Base URL checks: a bad ``--url`` or ``ENGINES_<NAME>_URL`` is one line before anything is sent."""

from __future__ import annotations

from engines.redact import redact_url


def check_base_url(engine: str, url: str, where: str = "the base URL") -> str:
    """A usable base URL (scheme http/https, a host, a port 1..65535), without a trailing ``/``;
    anything else is one :class:`store.errors.InputError` line (never a later crash mid-crawl)."""
    from urllib.parse import urlsplit

    from store.errors import InputError

    shown = redact_url(url)
    if not url.startswith(("http://", "https://")):
        raise InputError(f"{engine}: base URL {shown!r} must start with http:// or https:// (check {where})")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raw = urlsplit(url).netloc.rpartition("@")[2].rpartition(":")[2]
        if raw.isdigit():
            raise InputError(f"{engine}: base URL {shown!r}: port {raw} is out of range 1..65535 (check {where})") from None
        raise InputError(f"{engine}: base URL {shown!r} has a bad port {raw!r}; use 1..65535 (check {where})") from None
    if not parts.hostname:
        raise InputError(f"{engine}: base URL {shown!r} has no host (check {where})")
    if port is not None and not 1 <= port <= 65535:
        raise InputError(f"{engine}: base URL {shown!r}: port {port} is out of range 1..65535 (check {where})")
    if any(c.isspace() for c in url):
        raise InputError(f"{engine}: base URL {shown!r} contains whitespace (check {where})")
    return url.rstrip("/")
