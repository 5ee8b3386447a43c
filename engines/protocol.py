"""The adapter protocol: what the crawler, the archive and the scorer rely on, nothing else.

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
  (:mod:`engines.identity`) keys the cache, so changing any of them makes a new configuration.
- ``adapter.read_request(method, url, body)`` → the inverse of ``build_request``: an
  :class:`AskedFor` (the query texts and the parameters the request shows), or None when
  it is not a request this adapter builds. An import recognises with it the requests
  another tool archived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

import httpx

from engines.rates import Rate


@dataclass(frozen=True)
class ParsedHit:
    """One returned item: 1-based rank as returned, dotted name, the raw item JSON."""

    rank: int
    name: str
    raw: Any


@dataclass(frozen=True)
class EngineDefaults:
    rate: Rate  # the courtesy rate: at most this many requests per window
    timeout: float  # seconds per request
    result_cap: int | None  # most results the service returns (None: no known cap)
    batch_size: int = 1  # query texts per request
    num_results: int = 50  # results requested per query


class EngineParseError(Exception):
    """The body is not a well-formed answer (wrong type, missing field, HTML, truncated)."""


class ForeignItem(EngineParseError):
    """An item that is a normal part of an answer but names nothing to score (Lean Finder's
    links into other libraries): dropped like any unusable item, yet it does not count
    towards "every item unusable" (:func:`finish_hits`'s ``benign``)."""


class EngineHTTPError(Exception):
    """The engine reported an error inside an otherwise successful HTTP response."""


class EngineOutage(Exception):
    """The service is down, not refusing this query: a maintenance page (HTML or JSON on
    405/502/503/504 to the correct method), a backend that is restarting (Loogle's
    ``{"error": "... Restarting ..."}`` with status 200). Transient: the crawler pauses
    the host with growing backoff and retries; the text is never counted as failed."""


OUTAGE_STATUSES = (405, 502, 503, 504)


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


@dataclass(frozen=True)
class AskedFor:
    """What one request asked an engine for (``read_request``).

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
