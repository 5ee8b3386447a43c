"""The adapter protocol shared by every remote engine, and configuration identity.

An adapter is pure: it builds ``httpx.Request`` objects for a batch of query texts and
parses response bytes into ranked hits. It does no I/O, so the crawler owns sending,
pacing and archiving, and a changed parser can re-run over archived bytes.

Contract (the crawler relies on exactly this):

- ``adapter.build_request(texts)`` → one ``httpx.Request`` carrying ``texts``
  (``len(texts) <= adapter.batch_size``), with the project's ``User-Agent``.
- ``adapter.parse(texts, status_code, headers, body)`` → one ``list[ParsedHit]`` per
  text, in the order of ``texts``; raises :class:`EngineParseError` for anything that
  is not a well-formed answer (never returns an empty list for a malformed body) and
  :class:`EngineHTTPError` for an HTTP-level failure the body reveals (e.g. Loogle's
  200 + ``error``). Retryable HTTP statuses are decided by the crawler, not here.
- ``adapter.identity()`` → the result-changing parameters; ``config_hash(identity)``
  keys the cache, so changing any of them makes a new configuration.
- ``adapter.read_request(method, url, body)`` → the inverse of ``build_request``: an
  :class:`AskedFor` (the query texts and the parameters the request shows), or None when
  it is not a request this adapter builds. An import recognises with it the requests
  another tool archived (crawler.bundle).

Also here: :func:`parse_rate` (``"3/30s"`` → :class:`Rate`), the plumbing the remote
adapters share (:class:`RemoteAdapter`, :func:`decode_json_body`), and the one place that
decides what of a request may be archived or logged: :func:`redact_headers` and
:func:`redact_url` (the crawler applies both to every archived exchange).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

import httpx

from engines import __version__
from store.text import clean_json, clean_text

USER_AGENT = f"engines/{__version__} (Lean/Mathlib search benchmark harness; +https://github.com/engines-bench/engines)"


@dataclass(frozen=True)
class ParsedHit:
    """One returned item: 1-based rank as returned, dotted name, the raw item JSON."""

    rank: int
    name: str
    raw: Any


@dataclass(frozen=True)
class Rate:
    """A courtesy limit: at most ``n`` requests in any window of ``period`` seconds."""

    n: int
    period: float

    def __str__(self) -> str:
        return f"{self.n}/{self.period:g}s"


_RATE_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_rate(text: str) -> Rate:
    """Parse ``"3/30s"``, ``"20/2s"``, ``"1/s"``, ``"24/60s"``, ``"5/1m"`` into a :class:`Rate`.

    Raises :class:`store.errors.InputError` (one clear line) for anything else.
    """
    from store.errors import InputError

    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(3) not in _RATE_UNITS or not (m.group(2) or m.group(3)):
        raise InputError(
            f"invalid rate {text!r}: expected N/PERIOD like '3/30s', '1/s', '24/60s' or '5/1m'"
        )
    n = int(m.group(1))
    period = float(m.group(2) or 1) * _RATE_UNITS[m.group(3)]
    if n < 1 or period <= 0:
        raise InputError(f"invalid rate {text!r}: need at least 1 request per positive period")
    return Rate(n, period)


@dataclass(frozen=True)
class EngineDefaults:
    rate: Rate
    timeout: float  # seconds per request
    result_cap: int | None  # most results the service returns (None: no known cap)
    batch_size: int = 1  # query texts per request
    num_results: int = 50  # results requested per query


class HitList(list):
    """One query's parsed hits (a ``list[ParsedHit]``) plus what a tolerant parse dropped.

    When the envelope is valid but an item is not (an empty name list, a null item, no
    Lean name), the item is dropped: ``dropped`` counts it, ``drop_reason`` keeps the
    first reason, and every surviving hit keeps its *as-returned* rank (the dropped
    rank stays empty, so no later hit moves up). A plain list means nothing dropped.
    """

    def __init__(self, hits=(), *, dropped: int = 0, drop_reason: str | None = None) -> None:
        super().__init__(hits)
        self.dropped = dropped
        self.drop_reason = drop_reason

    def drop(self, reason: str) -> None:
        self.dropped += 1
        if self.drop_reason is None:
            self.drop_reason = reason


def finish_hits(engine: str, hits: HitList, n_items: int, *, where: str = "answer", benign: int = 0) -> HitList:
    """``hits`` once every item was looked at; a parse error if *every* item was unusable.

    One bad item is dropped, but a list whose items all fail the same way is a changed
    schema (a renamed name field), not an empty answer: that stays an
    :class:`EngineParseError`, so the crawler retries and the archive can be re-parsed.
    ``benign`` counts drops that are normal answers (Lean Finder's non-Mathlib links).
    """
    if n_items and not hits and hits.dropped - benign >= n_items:
        raise EngineParseError(
            f"{engine}: {where}: all {n_items} item(s) unusable (first: {hits.drop_reason}); did the schema change?"
        )
    return hits


class EngineParseError(Exception):
    """The body is not a well-formed answer (wrong type, missing field, HTML, truncated)."""


class EngineHTTPError(Exception):
    """The engine reported an error inside an otherwise successful HTTP response."""


class EngineOutage(Exception):
    """The service is down, not refusing this query: a maintenance page (HTML or JSON on
    405/502/503/504 to the correct method), a backend that is restarting (Loogle's
    ``{"error": "... Restarting ..."}`` with status 200). Transient: the crawler pauses
    the host with growing backoff and retries; the text is never counted as failed."""


OUTAGE_STATUSES = (405, 502, 503, 504)


@dataclass(frozen=True)
class AskedFor:
    """What one request asked an engine for (:meth:`RemoteAdapter.read_request`).

    ``texts``: the query texts, as ``build_request`` was given them. ``params``: the
    constructor keywords the request shows (``num_results``, ``version``...); a field the
    request does not carry is left out, so the adapter's default applies to it.
    """

    texts: list[str]
    params: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Adapter(Protocol):
    engine: str  # registry name, e.g. "leansearch"
    endpoint_version: str  # e.g. "post-search-v1"
    parser_version: int
    defaults: EngineDefaults
    base_url: str
    batch_size: int

    @property
    def host(self) -> str: ...

    def identity(self) -> dict[str, Any]: ...

    def build_request(self, texts: list[str]) -> httpx.Request: ...

    def parse(
        self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes
    ) -> list[list[ParsedHit]]: ...

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None: ...


def config_hash(identity: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a configuration identity."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class LocalConfig:
    """Identity of a local engine row (BM25, dense): written like a remote configuration."""

    engine: str
    endpoint_version: str
    params: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        return {"engine": self.engine, "endpoint_version": self.endpoint_version, **self.params}


# --- Shared plumbing for the remote adapters (engines/leansearch.py, leanexplore.py, ...) ---

# Header and query-parameter names that may carry a secret: their values are never
# archived or logged. A pattern, not a fixed list, so a new engine's "X-Auth-Token" or
# "?apikey=" is covered without editing this file.
_SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|passw|session|signature", re.I)
REDACTED = "[redacted]"


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers as they may be archived: every secret-looking header kept, its value replaced."""
    return {k: (REDACTED if _SECRET_NAME.search(k) else v) for k, v in dict(headers).items()}


def redact_url(url: str) -> str:
    """A URL as it may be archived: user:password@ removed, secret-looking query values replaced."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc and not parts.query:
        return url
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    if parts.query:
        q = [(k, REDACTED if _SECRET_NAME.search(k) else v)
             for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        parts = parts._replace(query=urlencode(q))
    return urlunsplit(parts)


def _snippet(body: bytes, n: int = 160) -> str:
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
        raise EngineHTTPError(f"{engine}: HTTP {status_code}: {_snippet(body)}")
    ctype = ""
    for k, v in dict(headers).items():
        if k.lower() == "content-type":
            ctype = v.lower()
    head = body.lstrip()[:15].lower()
    if "html" in ctype or head.startswith((b"<!doctype", b"<html", b"<")):
        raise EngineParseError(f"{engine}: HTML page instead of JSON (status {status_code}): {_snippet(body)}")
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


class RemoteAdapter:
    """Common constructor, identity, host and request headers of the remote adapters.

    Subclasses set ``engine``, ``endpoint_version``, ``parser_version``, ``defaults``,
    ``DEFAULT_URL`` and ``PARAMS`` (the result-changing parameters beyond
    ``num_results``, with defaults), and implement ``build_request``, its inverse
    ``read_request``, and ``parse``.
    """

    engine: str = ""
    endpoint_version: str = ""
    parser_version: int = 1
    defaults: EngineDefaults
    DEFAULT_URL: str = ""
    PARAMS: dict[str, Any] = {}
    MAX_BATCH: int | None = 1  # most texts one request can carry (None: no limit)
    MAX_NUM_RESULTS: int | None = None  # most results one request may ask for (None: no limit)
    # Environment variables holding this engine's secrets (API keys): a crawl refuses to
    # start when one of them would go over plain http:// to a non-loopback host.
    SECRET_ENVS: tuple[str, ...] = ()

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        import os

        from store.errors import InputError

        env = f"ENGINES_{self.engine.upper()}_URL"
        url = base_url or os.environ.get(env) or self.DEFAULT_URL
        self.base_url = check_base_url(self.engine, url, f"--url or {env}")
        self.batch_size = int(params.pop("batch_size", self.defaults.batch_size))
        if self.batch_size < 1 or (self.MAX_BATCH is not None and self.batch_size > self.MAX_BATCH):
            raise InputError(f"{self.engine}: batch_size {self.batch_size} out of range 1..{self.MAX_BATCH}")
        self.num_results = int(params.pop("num_results", self.defaults.num_results))
        if self.MAX_NUM_RESULTS is not None and not 1 <= self.num_results <= self.MAX_NUM_RESULTS:
            raise InputError(f"{self.engine}: num_results {self.num_results} out of range 1..{self.MAX_NUM_RESULTS}")
        if self.num_results < 1:
            raise InputError(f"{self.engine}: num_results {self.num_results} must be at least 1")
        self.timeout = float(params.pop("timeout", self.defaults.timeout))
        self.params = {k: params.pop(k, v) for k, v in self.PARAMS.items()}
        if params:
            known = ", ".join(["batch_size", "num_results", "timeout", *self.PARAMS])
            raise InputError(f"{self.engine}: unknown parameter(s) {', '.join(sorted(params))}; known: {known}")

    @property
    def host(self) -> str:
        from urllib.parse import urlsplit

        # host[:port] only: credentials in --url (user:password@) are sent, never stored
        # (host_state, send_log) nor printed.
        return urlsplit(self.base_url).netloc.rpartition("@")[2]

    def identity(self) -> dict[str, Any]:
        ident: dict[str, Any] = {
            "engine": self.engine,
            "endpoint_version": self.endpoint_version,
            "num_results": self.num_results,
            **self.params,
        }
        # A stand-in or mirror must never share cache rows with the public service. The
        # identity is stored and shown (params, label): credentials in the URL stay out.
        if self.base_url != self.DEFAULT_URL.rstrip("/"):
            ident["base_url"] = redact_url(self.base_url)
        return ident

    def outage_reason(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        """Why this response means the service is down (an outage), or None.

        The fetcher asks this first, for every response. Default: 405/502/503/504 (our
        requests always use the correct method, so a 405 is a maintenance page, as
        LeanSearch served from 2025-05-31 to 2025-06-02). Adapters add in-band signs.
        """
        if status_code in OUTAGE_STATUSES:
            return f"HTTP {status_code}: {_snippet(body, 100)}"
        return None

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """The inverse of :meth:`build_request`: what a request asked for, or None.

        None when the request is not one this adapter builds: another method, another host
        or path than its base URL's endpoint, or a body or query without this engine's
        fields. A request of its shape whose value cannot be read (``num_results`` not a
        number) raises ``ValueError``. Round trip: ``read_request`` of
        ``build_request(texts)`` gives ``texts`` back, and its ``params`` rebuild an
        adapter with the same identity (except where an adapter's docstring says).
        Adapters that recognise nothing keep this default.
        """
        return None

    def _sent_to(self, method: str, url: str, want: str, path: str) -> dict[str, list[str]] | None:
        """The query parameters of ``url`` when the request is a ``want`` to this adapter's base
        URL + ``path`` (host and path compared, a trailing ``/`` ignored), else None."""
        from urllib.parse import parse_qs, urlsplit

        if str(method).strip().upper() != want:
            return None
        try:
            got, endpoint = urlsplit(url), urlsplit(self.base_url + path)
        except ValueError:
            return None
        if got.netloc.rpartition("@")[2].lower() != self.host.lower():
            return None
        if got.path.rstrip("/") != endpoint.path.rstrip("/"):
            return None
        return parse_qs(got.query)

    def _headers(self, *, json_body: bool = False) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if json_body:
            headers["Content-Type"] = "application/json"
        return headers

    def _request(self, method: str, url: str, **kw: Any) -> httpx.Request:
        # httpx only applies a timeout to a hand-built Request through this extension.
        ext = {"timeout": httpx.Timeout(self.timeout).as_dict()}
        return httpx.Request(method, url, extensions=ext, **kw)

    def _check_texts(self, texts: list[str]) -> None:
        if not texts or len(texts) > self.batch_size:
            raise ValueError(f"{self.engine}: need 1..{self.batch_size} texts per request, got {len(texts)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, params={self.identity()!r})"
