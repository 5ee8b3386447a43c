"""Pacing holds with three workers on PostgreSQL while the machine is busy (issue 12).

A shorter run of ``perf/pacing_load.py`` (27 MathlibMPR texts): one LeanExplore stand-in
in its own process enforcing 4 per second (a rate three starved workers still fill),
three crawl worker processes sharing one PostgreSQL schema, one CPU-burning process per
core. From the server's own arrival times: no window of 1 s holds more than 4 requests and the server refused none. Every worker exits normally and
leaves no lease row naming it. The default margin is used (what a user gets).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from crawler.plan import WorkQueue, benchmark_texts
from store.benchmarks import load_benchmark_file
from benchmarks import shipped_path
from store.db import open_database
from store.models import WorkLease

PERF = Path(__file__).resolve().parents[2] / "perf" / "pacing_load.py"


def _perf():
    # Importable by name: the script's worker processes are spawned and import it again.
    if str(PERF.parent) not in sys.path:
        sys.path.insert(0, str(PERF.parent))
    return importlib.import_module("pacing_load")


@pytest.mark.postgres
@pytest.mark.slow
def test_three_workers_under_load_never_exceed_the_window() -> None:
    from tests.support.postgres import PG_BASE_URL

    r = _perf().run(workers=3, n=4, period=1.0, queries=27, pg=PG_BASE_URL, rows=300, bench="mathlibmpr")
    assert r["requests"] >= 27
    assert r["violations"] == 0, r
    assert r["max_in_window"] <= 4, r
    assert r["answered"] == 27 and r["exits"] == [3, 3, 3]  # 3: MathlibMPR has 69 texts, by design
    assert r["lease_rows_naming_a_worker"] == 0
    assert len(r["send_jitter"]) == r["requests"]


def test_release_deletes_claims_and_seed_brings_them_back(any_db_url: str) -> None:
    db = open_database(any_db_url)
    try:
        bench = load_benchmark_file(db, shipped_path("MathlibMPR.json"))
        from store.benchmarks import find_benchmark
        from store.writes import ensure_config

        b = find_benchmark(db, "mathlibmpr")
        with db.session() as s, s.begin():
            cfg = ensure_config(s, engine="x", endpoint_version="v", params={"a": 1}, config_hash="h" * 64,
                                label="x", result_cap=None)
            cid = cfg.id
        texts = benchmark_texts(db, b.id, False)
        now = [1000.0]
        q = WorkQueue(db, config_id=cid, epoch=0, texts=texts, benchmark_id=b.id, all_styles=False,
                      worker="w1", lease_ttl=60, clock=lambda: now[0])
        q.seed()
        claimed = [sha for sha, _ in q.claim(5)]
        assert len(claimed) == 5 and bench.created

        def rows(**kw) -> int:
            import sqlalchemy as sa

            with db.session() as s:
                return s.scalar(sa.select(sa.func.count()).select_from(WorkLease).filter_by(**kw))

        assert rows(worker="w1") == 5
        q.release()
        assert rows(worker="w1") == 0 and rows() == len(texts) - 5  # deleted, not reset
        q.seed()
        assert rows() == len(texts)  # still due: the next seed recreates them
        # A dead worker's claims are reclaimed after the TTL, as before.
        dead = WorkQueue(db, config_id=cid, epoch=0, texts=texts, benchmark_id=b.id, all_styles=False,
                         worker="dead", lease_ttl=60, clock=lambda: now[0])
        got = [sha for sha, _ in dead.claim(3)]
        live = WorkQueue(db, config_id=cid, epoch=0, texts=texts, benchmark_id=b.id, all_styles=False,
                         worker="live", lease_ttl=1000, clock=lambda: now[0])
        assert len(live.claim(len(texts))) == len(texts) - 3
        now[0] += 61
        assert sorted(sha for sha, _ in live.claim(10)) == sorted(got)
    finally:
        db.dispose()
