"""Recovery after a kill: answers from archived 2xx exchanges that a killed run never parsed."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from archive.outcome import Parsed, outcomes, write_outcomes
from store.models import Exchange, ParseOutcome
from store.types import utcnow


def recover_unparsed(db, eng: Any, *, min_age: float) -> int:
    """Answers from archived 2xx exchanges of ``eng`` (a crawl run's engine: its adapter,
    configuration and epoch) that a killed run never parsed (no network needed); the
    number of texts answered.

    In batches of 500 exchanges, each parsed (:func:`archive.outcome.outcomes`) and written
    (:func:`archive.outcome.write_outcomes`) in one transaction with the garbage collector
    paused (one transaction per exchange made recovering 10,000 bodies take 15 s); a body
    outside ``min_age`` may be another worker's being parsed right now. An outage body
    answers nothing: its texts stay due and the crawl sends them again.
    """
    from store.benchmarks import query_sha256
    from store.writes import paused_gc

    cutoff = utcnow().timestamp() - min_age
    unparsed = (Exchange.config_id == eng.config_id, Exchange.epoch == eng.epoch,
                Exchange.status_code >= 200, Exchange.status_code < 300,
                ~sa.exists().where(ParseOutcome.exchange_id == Exchange.id))
    with db.session() as s:
        ids = list(s.execute(sa.select(Exchange.id).where(*unparsed).order_by(Exchange.id)).scalars())
    recovered = 0
    for i in range(0, len(ids), 500):
        with db.engine.begin() as conn, paused_gc():
            rows = conn.execute(
                sa.select(Exchange.id, Exchange.query_texts, Exchange.status_code, Exchange.response_headers,
                          Exchange.response_body, Exchange.elapsed_ms, Exchange.finished_at)
                .where(Exchange.id.in_(ids[i:i + 500]), *unparsed).order_by(Exchange.id)).all()
            # Not those finished inside min_age: possibly another worker's, being parsed right now.
            rows = [r for r in rows if r.finished_at is None or r.finished_at.timestamp() <= cutoff]
            results = outcomes(eng.adapter, [(r.query_texts, r.status_code, r.response_headers, r.response_body)
                                             for r in rows])
            parsed = [Parsed(r.id, eng.epoch, [(query_sha256(t), t) for t in r.query_texts], res, r.elapsed_ms)
                      for r, res in zip(rows, results)]
            recovered += len(write_outcomes(conn, eng.config_id, eng.adapter.parser_version, parsed))
    return recovered
