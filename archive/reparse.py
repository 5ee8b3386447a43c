"""``engines reparse``: re-derive answers and hits from archived bodies, with no network.

The archive keeps every response's bytes, so a parser that was wrong is fixed (and its
``parser_version`` bumped) and re-run here instead of re-crawling. For every remote
configuration (optionally only some engines) the adapter is rebuilt from the stored
identity (engine, ``base_url``, parameters), and every archived 2xx exchange with a
body that has no parse outcome under the adapter's current ``parser_version`` is parsed
again:

- a new ``parse_outcomes`` row (ok or the error, drop count and first drop reason);
- per text of the exchange: when the current answer came from this exchange and its
  hits differ (rank, name, raw item), it is marked superseded (kept as history) and a
  new answer with the new hits takes its place (``fetched_at`` stays the time the
  bytes were fetched); unchanged hits only get the new ``parser_version``; a text with
  no current answer becomes answered *without a send* (its ``work_leases`` row goes,
  so the next crawl sends nothing for it); a current answer from another exchange is
  left alone (fetch once: the first parsed answer wins, as in the crawler);
- an exchange the current parser rejects supersedes the answers it had given (parse
  errors never make answers): those texts are due again;
- an exchange the parser now reads as an outage (``EngineOutage``) frees texts that
  were marked failed because of it;
- stored gold positions of every touched configuration × epoch are deleted, so the
  scorer recomputes them.

One transaction per batch of exchanges (500, or 64 MiB of bodies), written with a few
bulk statements: a kill loses at most the batch in progress and
never leaves one exchange half re-parsed; a second run finds nothing left to do
(exchanges already parsed by the current version are skipped). ``dry_run`` does all of
it in one transaction and rolls it back.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from archive.outcome import OUTAGE, Outcome, outcomes
from store.errors import InputError, UserError
from store.models import Answer, EngineConfig, Exchange, Hit, ParseOutcome, Position, WorkLease
from store.writes import answer_row, insert_answers, paused_gc

BATCH = 500  # exchanges per transaction
BATCH_BYTES = 64 << 20  # ... and at most this many bytes of bodies (one is always taken)
_COLUMNS = (Exchange.id, Exchange.config_id, Exchange.epoch, Exchange.query_texts, Exchange.status_code,
            Exchange.response_headers, Exchange.response_body, Exchange.finished_at, Exchange.sent_at,
            Exchange.elapsed_ms)


@dataclass
class ConfigReparse:
    engine: str
    label: str
    config_id: int
    parser_version: int
    exchanges: int = 0  # re-parsed now
    newly_parsed: int = 0  # parsed ok now, failed (or never parsed) before
    newly_failed: int = 0  # parsed ok before, rejected now
    changed: int = 0  # answers whose hit list (rank, name) changed
    answered: int = 0  # texts that became answered without a send
    unanswered: int = 0  # texts whose answer the current parser rejects (due again)
    dropped: int = 0  # items the current parser dropped (tolerant parse)
    skipped: str | None = None  # why this configuration could not be re-parsed


@dataclass
class ReparseSummary:
    results: list[ConfigReparse] = field(default_factory=list)
    elapsed: float = 0.0
    dry_run: bool = False

    @property
    def exchanges(self) -> int:
        return sum(r.exchanges for r in self.results)

    @property
    def rate(self) -> float:
        return self.exchanges / self.elapsed if self.elapsed > 0 else 0.0


def adapter_for_config(cfg: EngineConfig):
    """The current adapter for a stored configuration (:func:`engines.registry.adapter_for_config`)."""
    from engines.registry import adapter_for_config as rebuild

    return rebuild(cfg.engine, cfg.params)


class _Cur:
    """A current answer, as much of it as re-parsing needs."""

    __slots__ = ("id", "exchange_id", "dropped_items", "fetched_at", "latency_ms")

    def __init__(self, id, exchange_id, dropped_items, fetched_at, latency_ms) -> None:  # noqa: A002
        self.id, self.exchange_id, self.dropped_items = id, exchange_id, dropped_items
        self.fetched_at, self.latency_ms = fetched_at, latency_ms


class _Batch:
    """What one batch needs from the database, read with a few queries instead of several per
    exchange: each exchange's latest parse outcome, the current answers of its texts and
    the hits of those answers. Kept up to date as the batch decides its new answers; the
    writes it collects go out together at the end (:meth:`write`)."""

    def __init__(self, s: Session, config_id: int, exchanges: list) -> None:
        from store.benchmarks import query_sha256

        ids = [ex.id for ex in exchanges]
        self.prev_ok: dict[int, bool] = {}
        for ex_id, ok in s.execute(sa.select(ParseOutcome.exchange_id, ParseOutcome.ok)
                                   .where(ParseOutcome.exchange_id.in_(ids)).order_by(ParseOutcome.id)):
            self.prev_ok[ex_id] = ok  # the latest outcome wins
        self.shas = {ex.id: [query_sha256(t) for t in ex.query_texts] for ex in exchanges}
        wanted = sorted({sha for v in self.shas.values() for sha in v})
        self.current: dict[tuple[int, str], _Cur] = {}
        for i in range(0, len(wanted), 500):
            for aid, epoch, sha, ex_id, dropped, fetched, latency in s.execute(sa.select(
                    Answer.id, Answer.epoch, Answer.query_sha256, Answer.exchange_id, Answer.dropped_items,
                    Answer.fetched_at, Answer.latency_ms).where(
                    Answer.config_id == config_id, Answer.query_sha256.in_(wanted[i:i + 500]), ~Answer.superseded)):
                self.current[(epoch, sha)] = _Cur(aid, ex_id, dropped, fetched, latency)
        in_batch = set(ids)
        mine = [a.id for a in self.current.values() if a.exchange_id in in_batch]
        # Hits as (rank, name, raw JSON text): the raw items are decoded only for an answer whose
        # ranks and names did not change (:meth:`same_raws`).
        self.hits: dict[int, list[tuple[int, str, Any]]] = {}
        raw_text = sa.cast(Hit.raw, sa.Text)
        for i in range(0, len(mine), 500):
            for aid, rank, name, raw in s.execute(
                    sa.select(Hit.answer_id, Hit.rank, Hit.name, raw_text).where(Hit.answer_id.in_(mine[i:i + 500]))
                    .order_by(Hit.answer_id, Hit.rank, Hit.id)):
                self.hits.setdefault(aid, []).append((rank, name, raw))
        # What the batch writes, in this order (old answers superseded before new ones go in).
        self.outcomes: list[dict[str, Any]] = []
        self.superseded: list[int] = []
        self.bumped: list[int] = []
        self.answers: list[tuple[dict[str, Any], list[tuple]]] = []  # (answers row, its hits without answer_id)
        self.freed: list[tuple[int, int, list[str]]] = []  # (config, epoch, shas) failed leases due again
        self.answered: list[tuple[int, int, list[str]]] = []  # (config, epoch, shas) leases that go

    @staticmethod
    def same_names(old: list[tuple[int, str, Any]], new: list[tuple[int, str, Any]]) -> bool:
        return len(old) == len(new) and all(o[0] == n[0] and o[1] == n[1] for o, n in zip(old, new))

    @staticmethod
    def same_raws(old: list[tuple[int, str, Any]], new: list[tuple]) -> bool:
        # The raw items as values (the stored JSON text decoded), as the ORM compared them.
        return all((None if o[2] is None else json.loads(o[2])) == (None if n[3] is None else json.loads(n[3]))
                   for o, n in zip(old, new))

    def write(self, s: Session, version: int) -> None:
        conn = s.connection()
        if self.outcomes:
            conn.execute(sa.insert(ParseOutcome), self.outcomes)
        for i in range(0, len(self.superseded), 500):
            conn.execute(sa.update(Answer).where(Answer.id.in_(self.superseded[i:i + 500])).values(superseded=True))
        for i in range(0, len(self.bumped), 500):
            conn.execute(sa.update(Answer).where(Answer.id.in_(self.bumped[i:i + 500])).values(parser_version=version))
        if self.answers:
            # Hits as the parse made them (in the parsing worker, when there is one).
            insert_answers(conn, [a for a, _ in self.answers], [hits for _, hits in self.answers])
        # A failed lease freed by one exchange and answered by another of the batch goes either
        # way: freeing first and deleting after leaves what the per-exchange order left.
        for cid, epoch, shas in self.freed:
            conn.execute(sa.update(WorkLease).where(
                WorkLease.config_id == cid, WorkLease.epoch == epoch, WorkLease.query_sha256.in_(shas),
                WorkLease.status == "failed").values(status="leased", leased_until=0.0, worker="", note=None))
        for cid, epoch, shas in self.answered:
            conn.execute(sa.delete(WorkLease).where(
                WorkLease.config_id == cid, WorkLease.epoch == epoch, WorkLease.query_sha256.in_(shas)))


WORKER_MIN = 2000  # exchanges to re-parse before a parsing worker process is worth its start-up (~1 s)


def spare_core() -> bool:
    """A second core to parse on: two or more, and the load leaves one free. On a busy machine
    the worker only adds its start-up and the pickling of bodies and hits (import's parse of
    2,000 exchanges at load average 9-13: 12-16 s here, 20 s with the worker)."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores >= 2 and os.getloadavg()[0] <= cores - 1


class Parser:
    """Parses batches in one spawned worker process while this one writes the previous batch
    (two cores instead of one), or here when there is little to do, the adapter cannot be sent
    to a process, or the worker died: whatever goes wrong over there, the batch is parsed again
    here, so a result (or an error) is always the one this process's parse gives."""

    def __init__(self, adapter, worker: bool) -> None:
        self.adapter = adapter
        self.pool = None
        if worker:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, rows) -> Callable[[], list[Outcome]]:
        """The outcomes (:func:`archive.outcome.outcomes`) of the exchanges ``rows``, when called."""
        items = [(r.query_texts, r.status_code, r.response_headers, r.response_body) for r in rows]
        if self.pool is None:
            return lambda: outcomes(self.adapter, items)
        try:
            future = self.pool.submit(outcomes, self.adapter, items)
        except Exception:  # noqa: BLE001 - a broken pool: parse here
            self.close()
            return lambda: outcomes(self.adapter, items)

        def result() -> list[Outcome]:
            try:
                return future.result()
            except Exception:  # noqa: BLE001 - the worker died or could not take the adapter: parse here
                self.close()
                return outcomes(self.adapter, items)
        return result

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def _reparse_exchange(adapter, res: ConfigReparse, ex, touched: set[int], b: _Batch, result: Outcome) -> None:
    """Decide what re-parsing ``ex`` changes (``result``: its outcome); ``b`` collects the writes."""
    version = adapter.parser_version
    prev_ok = b.prev_ok.get(ex.id)
    texts = list(ex.query_texts)
    parsed = result.lists
    res.exchanges += 1
    shas = b.shas[ex.id]
    b.outcomes.append(result.row(ex.id, version))
    if parsed is None:
        if prev_ok:
            res.newly_failed += 1
        mine = {sha: a for sha in shas if (a := b.current.get((ex.epoch, sha))) is not None and a.exchange_id == ex.id}
        if mine:
            b.superseded.extend(a.id for a in mine.values())
            for sha in mine:
                del b.current[(ex.epoch, sha)]
            res.unanswered += len(mine)
            touched.add(ex.epoch)
        if result.kind == OUTAGE:
            # A body once read as the engine refusing the text is now known to be an outage:
            # the text was never refused, so it is due again.
            b.freed.append((ex.config_id, ex.epoch, shas))
        return
    drops = [dropped for _, dropped, _ in parsed]
    res.dropped += sum(drops)
    if not prev_ok:
        res.newly_parsed += 1
    done: set[str] = set()
    answered: list[str] = []
    for text, sha, (hits, _, _), dropped in zip(texts, shas, parsed, drops):
        if sha in done:
            continue  # the same text twice in one batch: one answer
        done.add(sha)
        new = hits
        cur = b.current.get((ex.epoch, sha))
        fetched_at = ex.finished_at or ex.sent_at
        if cur is not None:
            if cur.exchange_id != ex.id:
                continue  # answered from another exchange: fetch once, the first answer stays
            old = b.hits.get(cur.id, [])
            names = _Batch.same_names(old, new)
            if names and cur.dropped_items == dropped and _Batch.same_raws(old, new):
                b.bumped.append(cur.id)
                continue
            if not names:
                res.changed += 1
            fetched_at = cur.fetched_at
            b.superseded.append(cur.id)
        else:
            res.answered += 1
            answered.append(sha)
        # fetched_at: when the bytes were fetched, not when they were re-read (drift studies use it).
        b.answers.append((answer_row(ex.config_id, text, sha, ex.epoch, ex.id, version, fetched_at, len(new),
                                     cur.latency_ms if cur is not None else ex.elapsed_ms, dropped), new))
        b.current[(ex.epoch, sha)] = _Cur(None, ex.id, dropped, fetched_at, None)  # written with the batch
        touched.add(ex.epoch)
    if answered:
        b.answered.append((ex.config_id, ex.epoch, answered))


def _pending_ids(db, config_id: int, version: int, only: list[int] | None = None) -> list[tuple[int, int]]:
    """(id, body length) of every exchange left to re-parse, in id order; with ``only``, those
    exchanges whatever parsed them before."""
    done = sa.exists().where(ParseOutcome.exchange_id == Exchange.id, ParseOutcome.parser_version == version)
    q = sa.select(Exchange.id, sa.func.length(Exchange.response_body)).where(
        Exchange.config_id == config_id, Exchange.status_code >= 200, Exchange.status_code < 300,
        Exchange.response_body.is_not(None))
    with db.session() as s:
        if only is None:
            return [tuple(r) for r in s.execute(q.where(~done).order_by(Exchange.id))]
        found = []
        for i in range(0, len(only), 500):
            found += [tuple(r) for r in s.execute(q.where(Exchange.id.in_(only[i:i + 500])))]
        return sorted(found)


def _batches(pending: list[tuple[int, int]], batch: int, max_bytes: int) -> Iterator[list[int]]:
    """Ids in batches of at most ``batch`` exchanges and ``max_bytes`` of bodies (at least one each)."""
    ids: list[int] = []
    size = 0
    for ex_id, length in pending:
        if ids and (len(ids) >= batch or size + (length or 0) > max_bytes):
            yield ids
            ids, size = [], 0
        ids.append(ex_id)
        size += length or 0
    if ids:
        yield ids


def reparse(
    db, engines: list[str] | None = None, *, dry_run: bool = False, batch: int = BATCH,
    on_batch: Callable[[ConfigReparse], None] | None = None, only: dict[int, list[int]] | None = None,
) -> ReparseSummary:
    """Re-parse archived bodies of every remote configuration (or those of ``engines``).

    ``only`` (configuration id -> exchange ids) re-parses exactly those exchanges of those
    configurations, even when the current parser version parsed them already (healing answers
    whose hits were lost: :mod:`archive.heal`)."""
    from engines.registry import ENGINES

    wanted = [e.lower() for e in engines or []]
    for name in wanted:
        if name not in ENGINES:
            raise InputError(f"unknown engine {name!r}; remote engines: {', '.join(ENGINES)}")
    t0 = time.perf_counter()
    summary = ReparseSummary(dry_run=dry_run)
    with db.session() as s:
        q = sa.select(EngineConfig).where(EngineConfig.local.is_(False)).order_by(EngineConfig.id)
        q = q.where(EngineConfig.engine.in_(wanted)) if wanted else q
        q = q.where(EngineConfig.id.in_(sorted(only))) if only is not None else q
        configs = list(s.execute(q).scalars())
        s.expunge_all()
    if configs:
        db.refresh_statistics("exchanges", "parse_outcomes", "answers", "hits")
    dry = db.session() if dry_run else None  # one transaction for everything, rolled back
    try:
        for cfg in configs:
            try:
                adapter = adapter_for_config(cfg)
            except InputError as exc:
                summary.results.append(ConfigReparse(cfg.engine, cfg.label, cfg.id, 0, skipped=str(exc)))
                continue
            res = ConfigReparse(cfg.engine, cfg.label, cfg.id, adapter.parser_version)
            summary.results.append(res)
            pending = _pending_ids(db, cfg.id, adapter.parser_version,
                                   None if only is None else only[cfg.id])
            batches = list(_batches(pending, batch, BATCH_BYTES))
            parser = Parser(adapter, worker=len(pending) >= WORKER_MIN and spare_core())

            def read(ids: list[int]):
                """The batch's exchanges, and its parse started (in the worker while this one writes)."""
                r = dry if dry is not None else db.session()
                try:
                    rows = r.execute(sa.select(*_COLUMNS).where(Exchange.id.in_(ids)).order_by(Exchange.id)).all()
                finally:
                    if dry is None:
                        r.close()
                return rows, parser.submit(rows)

            try:
                ahead = read(batches[0]) if batches else None
                for k in range(len(batches)):
                    exchanges, parsed = ahead
                    ahead = read(batches[k + 1]) if k + 1 < len(batches) else None
                    s = dry if dry is not None else db.session()
                    try:
                        touched: set[int] = set()
                        results = parsed()
                        with paused_gc():
                            loaded = _Batch(s, cfg.id, exchanges)
                            for ex, result in zip(exchanges, results):
                                _reparse_exchange(adapter, res, ex, touched, loaded, result)
                            loaded.write(s, adapter.parser_version)
                            for epoch in touched:
                                # Stored positions of this system are stale now: the scorer rebuilds them.
                                s.execute(sa.delete(Position).where(Position.config_id == cfg.id,
                                                                    Position.epoch == epoch))
                            s.flush()
                        if dry is None:
                            s.commit()
                        else:
                            s.expunge_all()
                    except IntegrityError:
                        s.rollback()
                        raise UserError(
                            f"reparse: answers of {cfg.label!r} were written meanwhile (a crawl is running?); "
                            "nothing of this batch was written: run `engines reparse` again when the crawl is done"
                        ) from None
                    finally:
                        if dry is None:
                            s.close()
                    if on_batch is not None:
                        on_batch(res)
            finally:
                parser.close()
    finally:
        if dry is not None:
            dry.rollback()
            dry.close()
    summary.elapsed = time.perf_counter() - t0
    return summary


def summary_lines(summary: ReparseSummary) -> list[str]:
    lines = []
    for r in summary.results:
        if r.skipped:
            lines.append(f"{r.engine} [{r.label}]: skipped ({r.skipped})")
            continue
        line = (f"{r.engine} [{r.label}]: {r.exchanges} exchanges re-parsed with parser v{r.parser_version}, "
                f"{r.newly_parsed} newly parsed, {r.newly_failed} newly failed, {r.changed} answers changed, "
                f"{r.answered} texts answered without a send")
        if r.unanswered:
            line += f", {r.unanswered} answers rejected (those texts are due again)"
        if r.dropped:
            line += f", {r.dropped} items dropped"
        lines.append(line)
    lines.append(f"reparse: {summary.exchanges} exchanges in {summary.elapsed:.2f} s "
                 f"({summary.rate:.0f} exchanges/s)" + ("; dry run, nothing written" if summary.dry_run else ""))
    return lines
