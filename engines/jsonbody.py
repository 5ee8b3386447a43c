"""JSON bodies: decoding a response (:func:`decode_json_body`, :func:`decode_json_object`) and
reading a request's JSON (:func:`request_json`), with :func:`snippet` for error lines.

A body that is not JSON (an HTML page, empty, truncated, not UTF-8, nested too deep) is an
:class:`engines.protocol.EngineParseError`; a non-2xx status is an
:class:`engines.protocol.EngineHTTPError` first. NUL and lone surrogates decode to U+FFFD
(:mod:`store.text`), as stored.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from engines.protocol import EngineHTTPError, EngineParseError
from store.text import clean_json, clean_text


def snippet(body: bytes, n: int = 160) -> str:
    """The start of ``body`` as one printable line (``...`` when cut), for error messages."""
    text = clean_text(body[:n].decode("utf-8", "replace"))  # no NUL in a stored error (PostgreSQL)
    return text.replace("\n", " ") + ("..." if len(body) > n else "")


try:
    import orjson as _orjson
    # Before 3.10 orjson had no nesting limit of its own: a body nested 200,000 deep overflowed
    # the C stack (a segmentation fault, seen with 3.8.3). From 3.10 it refuses depth > 1024
    # with JSONDecodeError, and such a body takes the json.loads path (a RecursionError there
    # is a failed parse).
    if tuple(int(p) for p in _orjson.__version__.split(".")[:2]) < (3, 10):
        _orjson = None
except (ImportError, ValueError):  # pragma: no cover - orjson is a dependency
    _orjson = None
_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def decode_json_body(engine: str, status_code: int, headers: Mapping[str, str], body: bytes) -> Any:
    """JSON of a response body, or :class:`EngineParseError` (HTML page, empty, truncated, not UTF-8).

    A non-2xx status raises :class:`EngineHTTPError` first, so callers that do parse
    error responses get the status rather than a misleading parse message.
    """
    if not 200 <= status_code < 300:
        raise EngineHTTPError(f"{engine}: HTTP {status_code}: {snippet(body)}")
    ctype = ""
    for k, v in dict(headers).items():
        if k.lower() == "content-type":
            ctype = v.lower()
    head = body.lstrip()[:15].lower()
    if "html" in ctype or head.startswith((b"<!doctype", b"<html", b"<")):
        raise EngineParseError(f"{engine}: HTML page instead of JSON (status {status_code}): {snippet(body)}")
    if not body.strip():
        raise EngineParseError(f"{engine}: empty body (status {status_code})")
    if _orjson is not None and body.translate(_DIGITS).find(b"0" * 19) < 0:
        # orjson is 2-3x faster and gives what json.loads gives, except for integers beyond
        # 64 bits and floats with more digits than a double holds (19+ digits in a row),
        # and bodies it refuses (NaN, surrogates, 1e400...): those take the json.loads path.
        try:
            data = _orjson.loads(body)
        except _orjson.JSONDecodeError:
            pass
        else:  # orjson takes NUL: stored as U+FFFD like below (store.text)
            return clean_json(data) if b"\\u" in body else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EngineParseError(f"{engine}: body is not UTF-8: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        kind = "truncated" if exc.pos >= len(text.rstrip()) - 1 else "malformed"
        raise EngineParseError(f"{engine}: {kind} JSON at char {exc.pos}: {exc.msg}") from None
    except (RecursionError, ValueError, MemoryError) as exc:  # nested 200,000 deep, a huge number
        raise EngineParseError(f"{engine}: JSON the decoder cannot take: {type(exc).__name__}: {exc}"[:300]) from None
    # NUL and lone surrogates only come from \u escapes: stored as U+FFFD (store.text).
    return clean_json(data) if b"\\u" in body else data


def request_json(body: bytes | None) -> dict[str, Any] | None:
    """The JSON object a request body holds, or None (no body, not JSON, not an object)."""
    if not body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def decode_json_object(engine: str, status_code: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """:func:`decode_json_body` for APIs whose answer is a JSON object."""
    data = decode_json_body(engine, status_code, headers, body)
    if not isinstance(data, dict):
        raise EngineParseError(f"{engine}: top level is {type(data).__name__}, expected an object")
    return data
