"""One archived exchange → its outcome: the one parse path of the crawler and the archive.

The live fetcher (:mod:`crawler.fetch`), the recovery of bodies a killed run never parsed
(:mod:`archive.recovery`), ``engines reparse`` (:mod:`archive.reparse`) and ``engines
import`` (:func:`archive.bundle.parse_imported`) all turn a response into answers with
:func:`outcome` (or :func:`outcomes`, a batch of them), and write what it gives with
:func:`write_outcomes` (reparse decides its own supersessions, but writes the same rows).

The classification, written once here:

- ``answers``: one answer list per text, each as (hits, items dropped, first drop reason)
  with every hit already the ``hits`` row it becomes (rank, name, normalized name, raw
  JSON text, then the three resolution columns, empty): plain values, cheap to send back
  from a worker process, all the per-hit work done where the parse runs;
- ``outage``: the parser reads the body as the service being down (``EngineOutage``);
  the texts were never refused, they stay due;
- ``refused``: the engine refused the query (``EngineHTTPError``: a 400, an in-band query
  error): permanent for that query;
- ``failed``: the body does not parse (``EngineParseError``, a wrong number of answer
  lists, or whatever else a body does to a parser: a failed parse, never a crash).

Anything but ``answers`` carries the ``parse_outcomes`` error (cleaned for a text column).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import sqlalchemy as sa

from engines.base import EngineHTTPError, EngineOutage, EngineParseError
from store.models import ParseOutcome, WorkLease
from store.names import normalize_name
from store.text import clean_text
from store.types import utcnow
from store.writes import answer_row, encode_raw, insert_answers, paused_gc

ANSWERS, OUTAGE, REFUSED, FAILED = "answers", "outage", "refused", "failed"
_OUTAGE_PREFIX = "outage: "


class Outcome(NamedTuple):
    """What one exchange's body gives under the adapter's current parser."""

    kind: str  # ANSWERS, OUTAGE, REFUSED or FAILED
    lists: list[tuple[list[tuple], int, str | None]] | None  # per text (answers only)
    error: str | None  # the parse outcome's error (None for answers)

    @property
    def reason(self) -> str | None:
        """An outage's reason (its error without the ``outage: `` prefix)."""
        return self.error[len(_OUTAGE_PREFIX):] if self.kind == OUTAGE and self.error else self.error

    def row(self, exchange_id: int, parser_version: int) -> dict[str, Any]:
        """The ``parse_outcomes`` row: ok or the error, drop count and first drop reason."""
        if self.lists is None:
            return dict(exchange_id=exchange_id, parser_version=parser_version, ok=False, error=self.error,
                        dropped_items=0, drop_reason=None)
        reason = next((why for _, _, why in self.lists if why), None)
        return dict(exchange_id=exchange_id, parser_version=parser_version, ok=True, error=None,
                    dropped_items=sum(d for _, d, _ in self.lists),
                    drop_reason=None if reason is None else clean_text(reason))


def failure(kind: str, error: str) -> Outcome:
    """An outcome without answers (``error`` cleaned for a text column)."""
    return Outcome(kind, None, clean_text(error))


def outcome(adapter, texts: list[str], status: int, headers, body: bytes | None) -> Outcome:
    """The outcome of one exchange: ``adapter.parse`` of its response, classified."""
    try:
        parsed = adapter.parse(texts, status, headers or {}, body or b"")
        if len(parsed) != len(texts):
            raise EngineParseError(f"{len(parsed)} answer lists for {len(texts)} queries")
        return Outcome(ANSWERS, [
            ([(h.rank, h.name, normalize_name(h.name), encode_raw(h.raw), None, None, None) for h in hits],
             int(getattr(hits, "dropped", 0) or 0), getattr(hits, "drop_reason", None))
            for hits in parsed], None)
    except EngineOutage as exc:
        return failure(OUTAGE, f"{_OUTAGE_PREFIX}{exc}")
    except EngineHTTPError as exc:
        return failure(REFUSED, str(exc))
    except EngineParseError as exc:
        return failure(FAILED, str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever a body does to a parser is a failed parse
        # (nested 200,000 deep, a value of the wrong type, ...): not a crash of the run.
        return failure(FAILED, f"{adapter.engine}: the parser failed: {type(exc).__name__}: {exc}"[:500])


def outcomes(adapter, items: list[tuple]) -> list[Outcome]:
    """:func:`outcome` of every (texts, status, headers, body) of a batch, the garbage
    collector paused (in a worker process or here)."""
    with paused_gc():
        return [outcome(adapter, list(texts), status, headers, body) for texts, status, headers, body in items]


_PARSE = sa.insert(ParseOutcome.__table__)
_LEASES = WorkLease.__table__
_LEASES_DONE = sa.delete(_LEASES).where(
    _LEASES.c.config_id == sa.bindparam("c"), _LEASES.c.epoch == sa.bindparam("e"),
    _LEASES.c.query_sha256.in_(sa.bindparam("shas", expanding=True)))


class Parsed(NamedTuple):
    """One exchange and its outcome, as :func:`write_outcomes` writes them."""

    exchange_id: int
    epoch: int
    items: list[tuple[str, str]]  # (sha, text) of every text of the exchange
    outcome: Outcome
    latency_ms: float | None


def write_outcomes(conn: sa.Connection, config_id: int, parser_version: int, parsed: list[Parsed]) -> list[str]:
    """Parse outcomes, answers and hits of exchanges of one configuration in the caller's
    transaction: a ``parse_outcomes`` row each; for every exchange with answers, an answer
    per text (fetch once: an answer already current stays, :func:`store.writes.insert_answers`)
    and its texts' ``work_leases`` rows go. Returns the shas answered now, in order."""
    if not parsed:
        return []
    conn.execute(_PARSE, [p.outcome.row(p.exchange_id, parser_version) for p in parsed])
    fetched_at = utcnow()
    rows: list[dict[str, Any]] = []
    hits: list[list[tuple]] = []
    shas: list[str] = []
    leases: dict[int, list[str]] = {}
    for p in parsed:
        if p.outcome.lists is None:
            continue
        for (sha, text), (hs, dropped, _) in zip(p.items, p.outcome.lists):
            rows.append(answer_row(config_id, text, sha, p.epoch, p.exchange_id, parser_version, fetched_at,
                                   len(hs), p.latency_ms, dropped))
            hits.append(hs)
            shas.append(sha)
        leases.setdefault(p.epoch, []).extend(sha for sha, _ in p.items)
    ids = insert_answers(conn, rows, hits, fetch_once=True)
    for epoch, done in leases.items():
        for i in range(0, len(done), 500):
            conn.execute(_LEASES_DONE, {"c": config_id, "e": epoch, "shas": done[i:i + 500]})
    return [sha for sha, aid in zip(shas, ids) if aid is not None]
