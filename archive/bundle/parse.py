"""Parsing imported exchanges into answers with the current parsers (archive.bundle).

Two ways in, one parse and one write (:func:`_write_batch`: :func:`archive.outcome.outcomes`
in reparse's parser, :func:`archive.outcome.write_outcomes`): :class:`Feed` parses the
exchanges an import has just inserted, batch by batch, while the import reads on (their
bodies are still in memory: read back from the database they cost as much as the parse);
:func:`parse_imported` parses whatever 2xx exchange of the imported configurations is
still unparsed afterwards, read from the database.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import sqlalchemy as sa

from archive.bundle.warc import IMPORT_BATCH, ImportSummary
from store.models import EngineConfig, Exchange, ParseOutcome


class Row(NamedTuple):
    """What parsing one exchange needs (the columns :func:`parse_imported` reads)."""

    id: int
    epoch: int
    query_texts: list[str]
    status_code: int | None
    response_headers: dict[str, str] | None
    response_body: bytes | None
    elapsed_ms: float | None


def _unparsed(cid: int) -> tuple:
    """The 2xx exchanges of configuration ``cid`` without a parse outcome."""
    return (Exchange.config_id == cid, Exchange.status_code >= 200, Exchange.status_code < 300,
            ~sa.exists().where(ParseOutcome.exchange_id == Exchange.id))


def _write_batch(conn: sa.Connection, cid: int, adapter, batch: list, results: list, summary: ImportSummary) -> None:
    """Outcomes, answers and hits of one parsed batch (``results``: the outcomes of ``batch``), as the
    crawler writes them (:func:`archive.outcome.write_outcomes`: an answer already current for the
    text stays, fetch once). A failed parse as the crawler records it; an outage body (Loogle
    "Restarting") too."""
    from archive.outcome import Parsed, write_outcomes
    from store.benchmarks import query_sha256
    from store.writes import paused_gc

    summary.parse_failures += sum(r.lists is None for r in results)
    with paused_gc():
        summary.answers += len(write_outcomes(conn, cid, adapter.parser_version, [
            Parsed(ex.id, ex.epoch, [(query_sha256(t), t) for t in ex.query_texts], res, ex.elapsed_ms)
            for ex, res in zip(batch, results)]))


class Feed:
    """Parses exchanges as the import inserts them, in the import's transaction (``conn``): each
    batch's parse is started when it is added (in reparse's worker process once there are
    many, archive.reparse.Parser) and written when the next one comes, so the parse runs
    while the import reads the next records. Only for a configuration with no unparsed
    exchange stored before the import (:meth:`takes`): otherwise the older ones come first
    (fetch once) and :func:`parse_imported` does all of that configuration's afterwards."""

    def __init__(self, conn: sa.Connection, summary: ImportSummary, adapters: dict[int, Any]) -> None:
        self.conn, self.summary, self.adapters = conn, summary, adapters
        self.fed: dict[int, int] = {}  # config id → exchanges fed so far
        self.parsers: dict[int, Any] = {}
        self.ahead: dict[int, tuple[list[Row], Any]] = {}  # config id → the batch whose parse is under way
        self.refused: set[int] = set()
        self.grown: set[int] = set()  # configurations whose parser was given its chance of a worker

    def takes(self, cid: int) -> bool:
        """Whether the exchanges of ``cid`` can be parsed as they arrive (asked once per configuration)."""
        if cid not in self.fed and cid not in self.refused:
            older = self.conn.execute(sa.select(Exchange.id).where(*_unparsed(cid)).limit(1)).first()
            if older is None:
                self.fed[cid] = 0
            else:
                self.refused.add(cid)
        return cid in self.fed

    def stop(self, cid: int) -> None:
        """No more exchanges of ``cid`` are fed (the ones after are parsed by :func:`parse_imported`)."""
        self.fed.pop(cid, None)
        self.refused.add(cid)

    def add(self, cid: int, rows: list[Row]) -> None:
        """Start the parse of ``rows`` (just inserted exchanges of ``cid``, in id order), and write
        the batch before it."""
        from archive.reparse import WORKER_MIN, Parser, spare_core

        rows = [r for r in rows if r.status_code is not None and 200 <= r.status_code < 300]
        if not rows:
            return
        if cid not in self.fed:
            return
        self.fed[cid] += len(rows)
        parser = self.parsers.get(cid)
        if parser is None or cid not in self.grown and self.fed[cid] >= WORKER_MIN:
            # Parsed here until there is enough to pay for a worker's start-up (~1 s), then (a core
            # being free) in reparse's worker process.
            if parser is not None:
                self.drain(cid)
                parser.close()
            if self.fed[cid] >= WORKER_MIN:
                self.grown.add(cid)
            parser = self.parsers[cid] = Parser(self.adapters[cid], worker=cid in self.grown and spare_core())
        self.drain(cid)
        self.ahead[cid] = (rows, parser.submit(rows))

    def drain(self, cid: int) -> None:
        """Write the batch of ``cid`` whose parse is under way."""
        pending = self.ahead.pop(cid, None)
        if pending is not None:
            batch, parsed = pending
            _write_batch(self.conn, cid, self.adapters[cid], batch, parsed(), self.summary)

    def close(self, *, write: bool = True) -> None:
        """Write what is still under way (unless the import failed), and end the workers."""
        try:
            if write:
                for cid in list(self.ahead):
                    self.drain(cid)
        finally:
            for parser in self.parsers.values():
                parser.close()
            self.parsers.clear()


def parse_imported(db, summary: ImportSummary, *, into=None, adapters: dict[int, Any] | None = None) -> None:
    """Answers from every unparsed 2xx exchange of the imported configurations (current parsers),
    in the transaction of connection ``into`` when given, else one transaction per batch.

    As the crawler writes them (:func:`_write_batch`), 500 exchanges at a time, their parse in
    reparse's worker process while the previous batch is written (archive.reparse.Parser)
    when there are many and a core is free.
    """
    from contextlib import nullcontext

    from archive.reparse import WORKER_MIN, Parser, spare_core
    from engines.registry import adapter_for_config

    if summary.configs:
        db.refresh_statistics("exchanges", "parse_outcomes", "answers", "hits", conn=into)
    for cid in sorted(summary.configs):
        adapter = (adapters or {}).get(cid)
        if adapter is None:
            with db.session() as s:
                cfg = s.get(EngineConfig, cid)
                adapter = adapter_for_config(cfg.engine, cfg.params)
        unparsed = _unparsed(cid)
        with (nullcontext(into) if into is not None else db.session()) as s:
            todo = s.scalar(sa.select(sa.func.count()).select_from(Exchange).where(*unparsed))
        if not todo:
            continue
        parser = Parser(adapter, worker=todo >= WORKER_MIN and spare_core())

        def read(after: int):
            with (nullcontext(into) if into is not None else db.session()) as s:
                rows = s.execute(
                    sa.select(Exchange.id, Exchange.epoch, Exchange.query_texts, Exchange.status_code,
                              Exchange.response_headers, Exchange.response_body, Exchange.elapsed_ms)
                    .where(Exchange.id > after, *unparsed).order_by(Exchange.id).limit(IMPORT_BATCH)
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
                with nullcontext(into) if into is not None else db.engine.begin() as conn:
                    _write_batch(conn, cid, adapter, batch, results, summary)
        finally:
            parser.close()
