"""The one place that decides what of a request may be archived or logged.

The crawler applies :func:`redact_headers` and :func:`redact_url` to every archived
exchange; :data:`SECRET_NAME` is the pattern of header and query-parameter names whose
values are secrets (the crawl's plain-http check uses it too).
"""

from __future__ import annotations

import re
from typing import Mapping

# Header and query-parameter names that may carry a secret: their values are never
# archived or logged. A pattern, not a fixed list, so a new engine's "X-Auth-Token" or
# "?apikey=" is covered without editing this file.
SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|passw|session|signature", re.I)
REDACTED = "[redacted]"


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers as they may be archived: every secret-looking header kept, its value replaced."""
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in dict(headers).items()}


def redact_url(url: str) -> str:
    """A URL as it may be archived: user:password@ removed, secret-looking query values replaced."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc and not parts.query:
        return url
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    if parts.query:
        q = [(k, REDACTED if SECRET_NAME.search(k) else v)
             for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        parts = parts._replace(query=urlencode(q))
    return urlunsplit(parts)
