"""Issue 33's done-means for leanpremise, leansearch-ps and leandex, on SQLite and PostgreSQL:
crawl against the stand-in (faults included), hits stored equal what was served rank by
rank, a re-crawl sends nothing, ``engines reparse`` sends nothing and changes nothing,
export → import → score equal, publish → verify exit 0. Stand-in bodies are synthetic."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from benchmarks import SLICE_CORPUS, shipped_path
from cli.main import run as cli
from store.db import open_database

ENGINES = ["leanpremise", "leansearch-ps", "leandex"]
FAULTS = {  # each engine's own failures on the way: retried, then answered
    "leanpremise": {"error_5xx": 0.2, "malformed_json": 0.1},
    "leansearch-ps": {"error_5xx": 0.2, "truncated": 0.1},
    "leandex": {"error_5xx": 0.2, "malformed_json": 0.1},
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))


def _rows(db) -> tuple[list[dict], str, str]:
    from pipelines.demo import demo_cut
    from store.benchmarks import load_benchmark_file
    from store.models import Benchmark, GoldName, GoldUnit, Query

    load_benchmark_file(db, shipped_path("MathlibQR.json"))
    subset, cut, _ = demo_cut(db, 3)
    with db.session() as s:
        gold = set(s.execute(sa.select(GoldName.name).join(GoldUnit).join(Query).join(Benchmark)
                             .where(Benchmark.name == cut)).scalars())
    rows = []
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            obj = json.loads(line)
            if i < 200 or ".".join(obj["name"]) in gold:
                rows.append(obj)
    return rows, subset, cut


def _stored(db, engine: str) -> dict[str, list[tuple[int, str]]]:
    from store.models import Answer, EngineConfig, Hit

    with db.session() as s:
        got = s.execute(sa.select(Answer.query_text, Hit.rank, Hit.name).join(Hit, Hit.answer_id == Answer.id)
                        .join(EngineConfig, EngineConfig.id == Answer.config_id)
                        .where(EngineConfig.engine == engine, Answer.superseded.is_(False))
                        .order_by(Answer.query_text, Hit.rank)).all()
    out: dict[str, list[tuple[int, str]]] = {}
    for text, rank, name in got:
        out.setdefault(text, []).append((rank, name))
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_crawl_archive_reparse_export_publish(engine, any_db_url, tmp_path, capsys):
    from crawler.fetch import RetryPolicy
    from crawler.crawl import CrawlOptions, run_crawl
    from engines.base import Rate
    from engines.emulate import FaultConfig, StandIn
    from engines.registry import get_adapter
    from store.corpus import load_corpus
    from tests.support.crawl import Quiet

    db = open_database(any_db_url)
    try:
        rows, subset, cut = _rows(db)
        corpus = tmp_path / "tiny.jsonl"
        corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        load_corpus(db, str(corpus), name="tiny", revision="t1")
        rate = Rate(500, 1.0)
        policy = RetryPolicy(max_attempts=15, backoff_initial=0.01, backoff_max=0.05, outage_initial=0.05,
                             outage_max=0.2)
        with StandIn(engine, rows, rate=rate, faults=FaultConfig(**FAULTS[engine]), seed=5).in_thread() as srv:
            opts = CrawlOptions(engines=[engine], bench=cut, rates={"*": rate}, urls={engine: srv.url},
                                policy=policy, margin=0.01, num_results=20)
            rep = Quiet()
            summary = run_crawl(db, opts, rep)
            assert summary.exit_code == 0, rep.lines
            assert sum(srv.stats.faults.values()) > 0, srv.stats.faults
            # Their 500s are outages (paused, retried), not failures; LeanSearch-PS's is Flask's HTML 500.
            assert (summary.results[0].outages > 0) == (engine != "leansearch-ps"), rep.lines
            sent = srv.stats.requests
            # A re-crawl sends nothing.
            assert run_crawl(db, opts, Quiet()).exit_code == 0
            assert srv.stats.requests == sent
            stored = _stored(db, engine)
            assert len(stored) >= 3
            # What was served, asked again of a fault-free stand-in over the same corpus.
        with StandIn(engine, rows).in_thread() as clean, httpx.Client() as client:
            adapter = get_adapter(engine, clean.url, num_results=20, batch_size=1)
            for text, hits in stored.items():
                resp = client.send(adapter.build_request([text]))
                (served,) = adapter.parse([text], resp.status_code, resp.headers, resp.content)
                assert hits == [(h.rank, h.name) for h in served], text
        url = db.engine.url.render_as_string(hide_password=False)
        # reparse: nothing sent (no stand-in runs now), nothing changed.
        assert cli(["--db", url, "reparse", engine]) == 0
        assert _stored(db, engine) == stored
        # export → import → score equal.
        warc, dst_url = tmp_path / "x.warc.gz", f"sqlite:///{tmp_path / 'imp.db'}"
        assert cli(["--db", url, "export", "--out", str(warc)]) == 0
        dst = open_database(dst_url)
        try:
            _rows(dst)
            load_corpus(dst, str(corpus), name="tiny", revision="t1")
        finally:
            dst.dispose()
        assert cli(["--db", dst_url, "import", str(warc)]) == 0
        scores = []
        for u, name in ((url, "a.json"), (dst_url, "b.json")):
            assert cli(["--db", u, "score", "--bench", cut, "--json", str(tmp_path / name)]) == 0
            data = json.loads((tmp_path / name).read_text("utf-8"))
            scores.append({s["label"].split(" (")[0]: s["metrics"] for s in data["systems"]})
        assert scores[0] == scores[1] and scores[0]
        # publish → verify.
        bundle = tmp_path / "b.warc.gz"
        assert cli(["--db", url, "publish", "--bench", "mathlibqr", "--subset", subset, "--with-corpus",
                    "--out", str(bundle)]) == 0
        capsys.readouterr()
        assert cli(["verify", str(bundle)]) == 0, capsys.readouterr()
    finally:
        db.dispose()


def test_stand_ins_answer_like_their_servers():
    """leanpremise's FastAPI stand-in: pydantic's 422 naming the field, 404 at /, the
    liveness integer; leandex: 406 without text/event-stream, its stream split across reads."""
    from engines.emulate import StandIn
    from engines.registry import get_adapter

    rows = [{"name": ["Nat", "add_comm"], "module": ["Mathlib"], "signature": "(a b : ℕ) : a + b = b + a"}]
    with StandIn("leanpremise", rows).in_thread() as srv, httpx.Client() as client:
        r = client.post(srv.url + "/retrieve", json={"state": ["a", "b"], "k": 3})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "state"]
        line = get_adapter("leanpremise", srv.url).refusal(r.status_code, r.headers, r.content)
        assert "`state`: Input should be a valid string" in line
        assert client.get(srv.url + "/").status_code == 404 and client.get(srv.url + "/").json() == {"detail": "Not Found"}
        assert client.get(srv.url + "/max-new-premises").json() == 2048
        assert client.post(srv.url + "/retrieve", json={"state": "⊢ a + b = b + a", "k": 0}).json() == []
    with StandIn("leandex", rows).in_thread() as srv, httpx.Client() as client:
        r = client.get(srv.url + "/api/v1/search", params={"q": "add comm"}, headers={"Accept": "application/json"})
        assert r.status_code == 406
        adapter = get_adapter("leandex", srv.url)
        with client.stream("GET", srv.url + "/api/v1/search", params={"q": "add comm"},
                           headers={"Accept": "text/event-stream"}) as r:
            reads = list(r.iter_raw())
        assert len(reads) > 3  # the framing arrives in pieces
        (hits,) = adapter.parse(["add comm"], 200, r.headers, b"".join(reads))
        assert [h.name for h in hits] == ["Nat.add_comm"]
