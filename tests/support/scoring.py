"""Shared builders for the scoring tests: a real SQLite cache with the shipped benchmarks
and the real Mathlib slice, copied per test from one prepared file, and answer writers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pytest
import sqlalchemy as sa

import benchmarks
from engines.base import config_hash
from store.benchmarks import load_shipped
from store.corpus import load_corpus
from store.db import Database, open_database
from store.models import Benchmark, Query
from store.writes import HitRow, add_answer, ensure_config


@pytest.fixture(scope="session")
def prepared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file with MathlibQR/MPR/subsets and the slice corpus, built once."""
    path = tmp_path_factory.mktemp("scoring-base") / "base.db"
    db = open_database(f"sqlite:///{path}")
    load_shipped(db)
    load_corpus(db, str(benchmarks.SLICE_CORPUS), name=benchmarks.SLICE_CORPUS_NAME,
                revision=benchmarks.SLICE_CORPUS_REVISION)
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.dispose()
    return path


@pytest.fixture
def cache_url(prepared_cache: Path, tmp_path: Path) -> str:
    dst = tmp_path / "cache.db"
    shutil.copyfile(prepared_cache, dst)
    return f"sqlite:///{dst}"


@pytest.fixture
def cache(cache_url: str):
    db = open_database(cache_url)
    yield db
    db.dispose()


def bench_queries(db: Database, bench: str, *, primary_only: bool = True) -> list[Query]:
    with db.session() as s:
        stmt = sa.select(Query).join(Benchmark).where(Benchmark.name == bench).order_by(Query.id)
        if primary_only:
            stmt = stmt.where(Query.primary.is_(True))
        qs = list(s.execute(stmt).scalars())
        for q in qs:
            _ = [u.names for u in q.gold_units]  # load while the session is open
        return qs


def make_config(db: Database, label: str, *, result_cap: int | None = None, local: bool = False,
                licence: str | None = None) -> int:
    with db.session() as s, s.begin():
        params = {"label": label, "cap": result_cap}
        cfg = ensure_config(s, engine=label.split("-")[0], endpoint_version="v1", params=params,
                            config_hash=config_hash({"engine": label, **params}), label=label,
                            local=local, result_cap=result_cap, licence=licence)
        return cfg.id


def answer_all(
    db: Database,
    config_id: int,
    queries: Iterable[Query],
    ranking: Callable[[Query], Sequence[str] | None],
    *,
    epoch: int = 0,
    latency: Callable[[Query], float | None] = lambda q: None,
) -> int:
    """Write one answer per distinct query text; ``ranking`` returns names in rank order
    (None = leave the query unanswered). Returns the number of answers written."""
    seen: set[str] = set()
    n = 0
    with db.session() as s, s.begin():
        for q in queries:
            if q.query_sha256 in seen:
                continue
            names = ranking(q)
            if names is None:
                continue
            seen.add(q.query_sha256)
            add_answer(s, config_id=config_id, query_text=q.text, query_sha256=q.query_sha256,
                       hits=[HitRow(r, nm) for r, nm in enumerate(names, start=1)], epoch=epoch,
                       latency_ms=latency(q))
            n += 1
    return n


def gold_name(q: Query) -> str:
    return q.gold_units[0].names[0].name


def filler(n: int, tag: str = "x") -> list[str]:
    return [f"Not.In.Corpus.{tag}{i}" for i in range(n)]
