"""Parsing imported exchanges into answers with the current parsers (crawler.bundle)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from crawler.bundle.warc import _BATCH, ImportSummary
from store.models import EngineConfig, Exchange, ParseOutcome


def parse_imported(db, summary: ImportSummary, *, into=None, adapters: dict[int, Any] | None = None) -> None:
    """Answers from every unparsed 2xx exchange of the imported configurations (current parsers),
    in the transaction of connection ``into`` when given, else one transaction per batch.

    As the crawler writes them (:func:`crawler.outcome.write_outcomes`: an answer already current
    for the text stays, fetch once), 500 exchanges at a time, their parse in reparse's worker
    process while the previous batch is written (crawler.reparse._Parser) when there are many
    and a core is free.
    """
    from contextlib import nullcontext

    from crawler.outcome import Parsed, write_outcomes
    from crawler.reparse import WORKER_MIN, _Parser, spare_core
    from engines.registry import adapter_for_config
    from store.benchmarks import query_sha256
    from store.writes import paused_gc

    if summary.configs:
        db.refresh_statistics("exchanges", "parse_outcomes", "answers", "hits", conn=into)
    for cid in sorted(summary.configs):
        adapter = (adapters or {}).get(cid)
        if adapter is None:
            with db.session() as s:
                cfg = s.get(EngineConfig, cid)
                adapter = adapter_for_config(cfg.engine, cfg.params)
        unparsed = (Exchange.config_id == cid, Exchange.status_code >= 200, Exchange.status_code < 300,
                    ~sa.exists().where(ParseOutcome.exchange_id == Exchange.id))
        with (nullcontext(into) if into is not None else db.session()) as s:
            todo = s.scalar(sa.select(sa.func.count()).select_from(Exchange).where(*unparsed))
        parser = _Parser(adapter, worker=todo >= WORKER_MIN and spare_core())

        def read(after: int):
            with (nullcontext(into) if into is not None else db.session()) as s:
                rows = s.execute(
                    sa.select(Exchange.id, Exchange.epoch, Exchange.query_texts, Exchange.status_code,
                              Exchange.response_headers, Exchange.response_body, Exchange.elapsed_ms)
                    .where(Exchange.id > after, *unparsed).order_by(Exchange.id).limit(_BATCH)
                ).all()
            return (rows, parser.submit(rows)) if rows else None

        try:
            ahead = read(0)
            while ahead is not None:
                batch, parsed = ahead
                ahead = read(batch[-1].id)
                results = parsed()
                # One transaction per batch of exchanges (a transaction each made import a
                # commit-bound 10 exchanges/s on PostgreSQL): outcomes, answers and hits together.
                # A failed parse as the crawler records it; an outage body (Loogle "Restarting") too.
                summary.parse_failures += sum(r.lists is None for r in results)
                with (nullcontext(into) if into is not None else db.engine.begin()) as conn, paused_gc():
                    summary.answers += len(write_outcomes(conn, cid, adapter.parser_version, [
                        Parsed(ex.id, ex.epoch, [(query_sha256(t), t) for t in ex.query_texts], res, ex.elapsed_ms)
                        for ex, res in zip(batch, results)]))
        finally:
            parser.close()
