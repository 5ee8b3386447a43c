"""``engines reparse`` at archive speed (issue 24): bulk writes per batch, batches bounded by
bytes, parsing in a worker process (and here when the worker dies), statistics refreshed
on PostgreSQL. Whichever way it runs, it writes the same rows as one exchange at a time did."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest
import sqlalchemy as sa

import archive.reparse as rp
from engines import registry
from engines.base import config_hash
from engines.leansearch import LeanSearchAdapter
from store.benchmarks import query_sha256
from store.db import open_database
from store.models import Answer, Exchange, Hit, ParseOutcome, WorkLease
from store.writes import AnswerRow, HitRow, add_answers, ensure_config

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
FETCHED = T0 + dt.timedelta(hours=1)  # when the v1 answers say the bytes were fetched
N = 40  # exchanges: i % 5 says what the previous parse left (see _build)


def _item(i: int, r: int, *, distance: float) -> dict:
    return {"result": {"name": ["Demo", f"lemma_{i}_{r}"], "module_name": ["Mathlib", "Demo"], "kind": "theorem",
                       "signature": f"(n : ℕ) : n + {r} = {r} + n"}, "distance": distance}


def _build(url: str) -> int:
    """N LeanSearch exchanges parsed by parser v1; by i % 5 the v1 answer is: 0 other hits (changed),
    1 the same names with other raw items, 2 the same hits (only its version moves), 3 none (the
    body failed to parse then: answered now, lease goes), 4 an answer whose body is broken now."""
    db = open_database(url)
    try:
        adapter = LeanSearchAdapter("http://127.0.0.1:9")
        ident = adapter.identity()
        with db.session() as s, s.begin():
            cid = ensure_config(s, engine="leansearch", endpoint_version=adapter.endpoint_version, params=ident,
                                config_hash=config_hash(ident), label="ls").id
            for i in range(N):
                text = f"query {i}"
                body = json.dumps([[_item(i, r, distance=0.5 + r) for r in range(6)]], ensure_ascii=False).encode()
                if i % 5 == 4:
                    body = body[:-7]  # truncated: today's parser rejects it
                ex = Exchange(config_id=cid, attempt=1, epoch=0, query_texts=[text], request_fingerprint=f"{i:064x}",
                              method="POST", url="http://127.0.0.1:9/search", request_headers={},
                              request_body=b"{}", status_code=200, response_headers={"content-type": "application/json"},
                              response_body=body, sent_at=T0 + dt.timedelta(seconds=i),
                              finished_at=T0 + dt.timedelta(seconds=i, milliseconds=30), elapsed_ms=30.0 + i)
                s.add(ex)
                s.flush()
                s.add(ParseOutcome(exchange_id=ex.id, parser_version=1, ok=i % 5 != 3, error=None))
                if i % 5 == 3:
                    s.add(WorkLease(config_id=cid, query_sha256=query_sha256(text), epoch=0, worker="w",
                                    leased_until=0.0, status="failed"))
                    continue
                hits = [HitRow(rank=r + 1, name=f"Demo.lemma_{i}_{r}",
                               raw=_item(i, r, distance=(9.0 if i % 5 == 1 else 0.5 + r))) for r in range(6)]
                if i % 5 == 0:
                    hits = hits[:3]
                add_answers(s, [AnswerRow(config_id=cid, query_text=text, query_sha256=query_sha256(text), hits=hits,
                                          exchange_id=ex.id, parser_version=1, latency_ms=30.0 + i)])
            s.execute(sa.update(Answer).values(fetched_at=FETCHED))
        return cid
    finally:
        db.dispose()


def _state(url: str) -> dict:
    db = open_database(url)
    try:
        with db.engine.connect() as conn:
            return {
                "outcomes": conn.execute(sa.select(ParseOutcome.exchange_id, ParseOutcome.parser_version,
                                                   ParseOutcome.ok, ParseOutcome.error, ParseOutcome.dropped_items)
                                         .order_by(ParseOutcome.id)).all(),
                "answers": conn.execute(sa.select(Answer.id, Answer.query_sha256, Answer.exchange_id,
                                                  Answer.parser_version, Answer.fetched_at, Answer.latency_ms,
                                                  Answer.n_returned, Answer.superseded, Answer.dropped_items)
                                        .order_by(Answer.id)).all(),
                "hits": conn.execute(sa.select(Hit.answer_id, Hit.rank, Hit.name, Hit.normalized_name,
                                               sa.cast(Hit.raw, sa.Text)).order_by(Hit.id)).all(),
                "leases": conn.execute(sa.select(WorkLease.query_sha256, WorkLease.status)).all(),
            }
    finally:
        db.dispose()


def _reparse(url: str, **kw) -> rp.ReparseSummary:
    db = open_database(url)
    try:
        return rp.reparse(db, **kw)
    finally:
        db.dispose()


@pytest.fixture
def v2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Today's LeanSearch parser is v1's successor (so every v1 outcome is re-parsed)."""
    monkeypatch.setattr(LeanSearchAdapter, "parser_version", 2)


def test_reparse_counts_and_rows_with_byte_bounded_batches(any_db_url: str, v2, monkeypatch) -> None:
    _build(any_db_url)
    size = len(json.dumps([[_item(N - 1, r, distance=0.5 + r) for r in range(6)]], ensure_ascii=False).encode())
    monkeypatch.setattr(rp, "BATCH_BYTES", 3 * size)  # three bodies a batch, though 500 exchanges are allowed
    batches = []
    s = _reparse(any_db_url, on_batch=lambda r: batches.append(r.exchanges))
    assert len(batches) == -(-N // 3) and batches[-1] == N
    r = s.results[0]
    assert (r.exchanges, r.changed, r.answered, r.unanswered, r.newly_failed, r.newly_parsed) == (
        N, N // 5, N // 5, N // 5, N // 5, N // 5)
    st = _state(any_db_url)
    current = [a for a in st["answers"] if not a.superseded]
    assert len(current) == N - N // 5 and {a.parser_version for a in current} == {2}
    # Changed names or changed raw items: a new answer (3 of 5 kinds); the same hits keep their row.
    assert sum(a.superseded for a in st["answers"]) == 3 * N // 5
    assert st["leases"] == []  # the failed leases of the texts answered now are gone
    by_ex = {a.exchange_id: a for a in current}
    ex1 = by_ex[2]  # i = 1: the same names, other raw items; keeps when the bytes were fetched
    assert ex1.n_returned == 6 and ex1.latency_ms == 31.0 and ex1.fetched_at == FETCHED
    ex3 = by_ex[4]  # i = 3: answered now, at the time its exchange finished
    assert ex3.latency_ms == 33.0 and ex3.fetched_at == T0 + dt.timedelta(seconds=3, milliseconds=30)
    assert _reparse(any_db_url).exchanges == 0  # nothing left


def test_worker_process_writes_what_parsing_here_writes(tmp_path: Path, v2, monkeypatch) -> None:
    here, there = f"sqlite:///{tmp_path / 'here.db'}", f"sqlite:///{tmp_path / 'there.db'}"
    _build(here)
    _build(there)
    monkeypatch.setattr(rp, "WORKER_MIN", 10**9)
    a = _reparse(here, batch=7)
    monkeypatch.setattr(rp, "WORKER_MIN", 0)
    monkeypatch.setattr(rp, "spare_core", lambda: True)  # whatever the machine's load
    started = []
    real = rp.Parser.__init__

    def spy(self, adapter, worker):
        real(self, adapter, worker)
        started.append(self.pool is not None)

    monkeypatch.setattr(rp.Parser, "__init__", spy)
    b = _reparse(there, batch=7)
    assert started == [True]  # the worker process ran
    assert a.results[0] == b.results[0]
    assert _state(here) == _state(there)


MARK = "ENGINES_TEST_KILLED_WORKER"


class KillsItsWorker(LeanSearchAdapter):
    """Parses here; in any other process it dies on the spot (as an out-of-memory kill would)."""

    def parse(self, texts, status_code, headers, body):
        if str(os.getpid()) != os.environ[MARK + "_PARENT"]:
            Path(os.environ[MARK]).write_text(str(os.getpid()))
            os._exit(9)
        return super().parse(texts, status_code, headers, body)


def test_dead_worker_means_parsing_here_and_the_same_rows(tmp_path: Path, v2, monkeypatch) -> None:
    here, there = f"sqlite:///{tmp_path / 'here.db'}", f"sqlite:///{tmp_path / 'there.db'}"
    _build(here)
    _build(there)
    monkeypatch.setattr(rp, "WORKER_MIN", 10**9)
    a = _reparse(here, batch=7)
    mark = tmp_path / "died"
    monkeypatch.setenv(MARK, str(mark))
    monkeypatch.setenv(MARK + "_PARENT", str(os.getpid()))
    monkeypatch.setattr(rp, "WORKER_MIN", 0)
    monkeypatch.setattr(rp, "spare_core", lambda: True)
    monkeypatch.setitem(registry.ENGINES, "leansearch", KillsItsWorker)
    b = _reparse(there, batch=7)
    assert mark.exists() and int(mark.read_text()) != os.getpid()  # the worker did die
    assert a.results[0] == b.results[0]
    assert _state(here) == _state(there)


@pytest.mark.postgres
def test_statistics_are_refreshed_first_on_postgresql(pg_url: str, v2) -> None:
    _build(pg_url)
    db = open_database(pg_url)
    try:
        q = ("SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() "
             "AND last_analyze IS NOT NULL ORDER BY relname")
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql(q).scalars().all() == []
        rp.reparse(db)
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql(q).scalars().all() == ["answers", "exchanges", "hits", "parse_outcomes"]
    finally:
        db.dispose()


def test_import_parses_the_same_with_and_without_the_worker(tmp_path: Path, monkeypatch) -> None:
    from archive.bundle import export_bundle, import_bundle

    src = f"sqlite:///{tmp_path / 'src.db'}"
    _build(src)
    db = open_database(src)
    try:
        export_bundle(db, tmp_path / "b.warc.gz")
    finally:
        db.dispose()
    states, summaries = [], []
    for worker in (False, True):
        monkeypatch.setattr(rp, "WORKER_MIN", 0 if worker else 10**9)
        monkeypatch.setattr(rp, "spare_core", lambda: True)
        url = f"sqlite:///{tmp_path / f'dst{worker}.db'}"
        db = open_database(url)
        try:
            s = import_bundle(db, tmp_path / "b.warc.gz")
        finally:
            db.dispose()
        summaries.append((s.added, s.answers, s.parse_failures))
        st = _state(url)
        st["answers"] = [a[:4] + a[5:] for a in st["answers"]]  # fetched_at: the time of the import
        states.append(st)
    assert summaries[0] == summaries[1] == (N, N - N // 5, N // 5)
    assert states[0] == states[1]
