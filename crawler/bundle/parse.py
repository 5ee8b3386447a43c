"""Parsing imported exchanges into answers with the current parsers (crawler.bundle)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from crawler.bundle.warc import _BATCH, ImportSummary
from store.models import EngineConfig, Exchange, ParseOutcome
from store.types import utcnow


def parse_imported(db, summary: ImportSummary, *, into=None, adapters: dict[int, Any] | None = None) -> None:
    """Answers from every unparsed 2xx exchange of the imported configurations (current parsers),
    in the transaction of connection ``into`` when given, else one transaction per batch.

    As the crawler writes them (its statements: an answer already current for the text stays,
    fetch once), 500 exchanges at a time, their parse in reparse's worker process while the
    previous batch is written (crawler.reparse._Parser) when there are many and a core is free.
    """
    from contextlib import nullcontext

    from crawler.fetch import _ANSWER, _LEASES_DONE, _PARSE
    from crawler.reparse import WORKER_MIN, _Parser, spare_core
    from engines.registry import adapter_for_config
    from store.benchmarks import query_sha256
    from store.writes import paused_gc, write_hit_rows

    if summary.configs:
        db.refresh_statistics("exchanges", "parse_outcomes", "answers", "hits", conn=into)
    answer = _ANSWER["postgresql" if db.dialect == "postgresql" else "sqlite"]
    for cid in sorted(summary.configs):
        adapter = (adapters or {}).get(cid)
        if adapter is None:
            with db.session() as s:
                cfg = s.get(EngineConfig, cid)
                adapter = adapter_for_config(cfg.engine, cfg.params)
        version = adapter.parser_version
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
                with (nullcontext(into) if into is not None else db.engine.begin()) as conn, paused_gc():
                    outcomes = []
                    for ex, (lists, error, _) in zip(batch, results):
                        if lists is None:
                            # As the crawler records them; an outage body (Loogle "Restarting") too.
                            outcomes.append(dict(exchange_id=ex.id, parser_version=version, ok=False, error=error,
                                                 dropped_items=0, drop_reason=None))
                            summary.parse_failures += 1
                        else:
                            outcomes.append(dict(exchange_id=ex.id, parser_version=version, ok=True, error=None,
                                                 dropped_items=sum(d for _, d, _ in lists),
                                                 drop_reason=next((w for _, _, w in lists if w), None)))
                    conn.execute(_PARSE, outcomes)
                    hit_rows: list[tuple] = []
                    leases: dict[int, list[str]] = {}
                    fetched_at = utcnow()
                    for ex, (lists, _, _) in zip(batch, results):
                        if lists is None:
                            continue
                        shas = [query_sha256(t) for t in ex.query_texts]
                        for text, sha, (hits, dropped, _) in zip(ex.query_texts, shas, lists):
                            answer_id = conn.execute(answer, dict(
                                config_id=cid, query_text=text, query_sha256=sha, epoch=ex.epoch,
                                exchange_id=ex.id, parser_version=version, fetched_at=fetched_at,
                                n_returned=len(hits), latency_ms=ex.elapsed_ms, meta=None, superseded=False,
                                dropped_items=dropped)).scalar()
                            if answer_id is None:
                                continue  # answered meanwhile (another path); fetch-once keeps the first
                            hit_rows.extend((answer_id, *h, None, None, None) for h in hits)
                            summary.answers += 1
                        leases.setdefault(ex.epoch, []).extend(shas)
                    write_hit_rows(conn, hit_rows)
                    for epoch, shas in leases.items():
                        for i in range(0, len(shas), 500):
                            conn.execute(_LEASES_DONE, {"c": cid, "e": epoch, "shas": shas[i:i + 500]})
        finally:
            parser.close()
