"""Writing engine configurations, answers and hits: one path for crawled and local rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import Answer, EngineConfig, Hit
from store.names import normalize_name
from store.types import utcnow


@dataclass(frozen=True)
class HitRow:
    rank: int  # 1-based, as returned
    name: str  # as returned (dotted if the engine sent a list)
    raw: Any = None
    # Set when the hit is a corpus row by construction (local engines); crawled hits
    # are resolved later by the scorer.
    resolved_corpus_id: int | None = None
    declaration_id: int | None = None
    resolution: str | None = None


def ensure_config(
    session: Session,
    *,
    engine: str,
    endpoint_version: str,
    params: dict[str, Any],
    config_hash: str,
    label: str | None = None,
    local: bool = False,
    result_cap: int | None = None,
    licence: str | None = None,
) -> EngineConfig:
    """Get or create the configuration with this hash (safe against a concurrent creator)."""
    found = session.execute(sa.select(EngineConfig).where(EngineConfig.config_hash == config_hash)).scalar_one_or_none()
    if found is not None:
        return found
    cfg = EngineConfig(
        engine=engine,
        endpoint_version=endpoint_version,
        params=params,
        config_hash=config_hash,
        label=label or engine,
        local=local,
        result_cap=result_cap,
        licence=licence,
    )
    try:
        with session.begin_nested():
            session.add(cfg)
    except IntegrityError:
        return session.execute(sa.select(EngineConfig).where(EngineConfig.config_hash == config_hash)).scalar_one()
    return cfg


def add_answer(
    session: Session,
    *,
    config_id: int,
    query_text: str,
    query_sha256: str,
    hits: Iterable[HitRow],
    epoch: int = 0,
    exchange_id: int | None = None,
    parser_version: int | None = None,
    latency_ms: float | None = None,
    meta: dict[str, Any] | None = None,
    dropped_items: int = 0,
) -> Answer:
    """Add one ranked list (caller commits). Ranks are kept exactly as given.

    Hits go in as one executemany: through the unit of work, 200 hit objects per
    answer made writing a local run's 945 answers take over 20 s on SQLite.
    """
    hits = list(hits)
    answer = Answer(
        config_id=config_id,
        query_text=query_text,
        query_sha256=query_sha256,
        epoch=epoch,
        exchange_id=exchange_id,
        parser_version=parser_version,
        fetched_at=utcnow(),
        n_returned=len(hits),
        latency_ms=latency_ms,
        meta=meta,
        dropped_items=dropped_items,
    )
    session.add(answer)
    session.flush()
    if hits:
        session.execute(
            sa.insert(Hit),
            [
                {
                    "answer_id": answer.id,
                    "rank": h.rank,
                    "name": h.name,
                    "normalized_name": normalize_name(h.name),
                    "raw": h.raw,
                    "resolved_corpus_id": h.resolved_corpus_id,
                    "declaration_id": h.declaration_id,
                    "resolution": h.resolution,
                }
                for h in hits
            ],
        )
    return answer
