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
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

import httpx

from engines import __version__

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
    import re

    from store.errors import InputError

    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(3) not in _RATE_UNITS:
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


class EngineParseError(Exception):
    """The body is not a well-formed answer (wrong type, missing field, HTML, truncated)."""


class EngineHTTPError(Exception):
    """The engine reported an error inside an otherwise successful HTTP response."""


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
