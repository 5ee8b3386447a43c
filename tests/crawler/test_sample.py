"""Sampled crawls: a seeded, style-stratified, nested order; `engines crawl --sample`
against a stand-in over loopback; the subset in `engines status`; sampled rows scored on
their own n with the `n=N sampled` badge; `--slice engine-subset:E`."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from benchmarks import SLICE_CORPUS
from crawler.plan import parse_sample_name, sample_order, sampled_texts
from crawler.crawl import CrawlOptions, Reporter, run_crawl
from engines.base import Rate
from cli.main import app
from engines.emulate import StandIn
from scoring.results import score
from store.models import Answer, Benchmark, Query, Subset
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, gold_name, make_config, prepared_cache,
)

runner = CliRunner()


def test_sample_order_is_stratified_nested_and_seeded():
    items = [(f"a{i}", "nl") for i in range(60)] + [(f"b{i}", "lean") for i in range(30)] + [(f"c{i}", "tex") for i in range(10)]
    order = sample_order(items, seed=3)
    assert sorted(order) == sorted(sha for sha, _ in items)  # a permutation
    assert order == sample_order(list(reversed(items)), seed=3)  # input order does not matter
    assert order != sample_order(items, seed=4)
    share = {"nl": 0.6, "lean": 0.3, "tex": 0.1}
    style = dict(items)
    for n in range(1, 101):
        got = Counter(style[s] for s in order[:n])
        for st, frac in share.items():
            assert abs(got[st] - n * frac) <= 1, (n, st, got)
    # Nested by construction: the sample of 50 is the first 50 of the sample of 80.
    assert order[:50] == order[:80][:50]
    # Within a style, a seeded permutation (not the input order).
    assert [s for s in order if style[s] == "nl"] != [f"a{i}" for i in range(60)]


def test_sampled_texts_keep_mathlibqr_style_mix(cache):
    with cache.session() as s:
        bid = s.execute(sa.select(Benchmark.id).where(Benchmark.name == "mathlibqr")).scalar_one()
        styles = dict(s.execute(sa.select(Query.query_sha256, Query.style).where(Query.benchmark_id == bid, Query.primary)).all())
    total = Counter(styles.values())
    small, big = sampled_texts(cache, bid, False, 300, 7), sampled_texts(cache, bid, False, 500, 7)
    assert len(small) == 300 and len(big) == 500 and set(small) <= set(big)
    got = Counter(styles[s] for s in big)
    n_all = sum(total.values())
    for st, c in total.items():
        assert abs(got[st] - 500 * c / n_all) <= 1


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        return [json.loads(line) for line in itertools.islice(fh, 400)]


def _crawl(db, srv, n, seed=0):
    opts = CrawlOptions(engines=["leanexplore"], bench="mathlibmpr", rates={"*": Rate(20, 0.5)},
                        urls={"leanexplore": srv.url}, sample=n, seed=seed, margin=0.1)
    return run_crawl(db, opts, Reporter(every=1e9))


def test_sampled_crawl_grows_nested_and_scores_on_its_own_n(cache, cache_url, rows):
    with StandIn("leanexplore", rows, rate=Rate(20, 0.5)).in_thread() as srv:
        s1 = _crawl(cache, srv, 10, seed=5)
        assert s1.results[0].counts.total == 10 and s1.results[0].counts.answered == 10 and s1.exit_code == 0
        s2 = _crawl(cache, srv, 16, seed=5)
        # Growing N keeps the earlier texts: only the 6 new ones are sent.
        assert s2.results[0].sent_texts == 6 and s2.results[0].counts.answered == 16
    with cache.session() as s:
        names = sorted(s.execute(sa.select(Subset.name).where(Subset.name.like("sample:%"))).scalars())
        assert names == ["sample:leanexplore:5:10", "sample:leanexplore:5:16"]
        assert parse_sample_name(names[1]) == ("leanexplore", 5, 16)
        assert s.scalar(sa.select(sa.func.count()).select_from(Answer)) == 16

    res = runner.invoke(app, ["status", "--bench", "mathlibmpr"], env={"ENGINES_DATABASE_URL": cache_url, "COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "sample:leanexplore:5:16" in res.stdout and "16/16" in res.stdout and "10/10" in res.stdout

    # A second, fully crawled row: every MathlibMPR text answered.
    qs = bench_queries(cache, "mathlibmpr")
    full = make_config(cache, "full")
    answer_all(cache, full, qs, lambda q: [u.names[0].name for u in q.gold_units][:3])
    le_id = next(s["id"] for s in score(cache, "mathlibmpr").to_json()["systems"] if s["engine"] == "leanexplore")
    doc = score(cache, "mathlibmpr", compare=("full", le_id)).to_json()
    by = {s["id"]: s for s in doc["systems"]}
    le, fu = by[le_id], by["full"]
    assert le["sample"] == "sample:leanexplore:5:16" and fu["sample"] is None
    assert le["n"] + le["dropped"] == 16 and le["unanswered"] == 0
    assert f"n={le['n']} sampled" in le["badges"] and "incomplete" not in le["badges"]
    assert fu["n"] + fu["dropped"] == 69
    # Its interval comes from its own n: the bootstrap over le["n"] queries, not 69.
    cmp = {c["metric"]: c for c in doc["comparisons"]}
    assert cmp["R@10"]["n"] == le["n"]
    assert cmp["R@10"]["diff"] == pytest.approx(
        sum(json_r10(fu, q) for q in le["per_query"]) / le["n"] - le["metrics"]["R@10"]["value"], abs=1e-12)

    # The engine-subset slice: every row on leanexplore's 16 texts.
    sl = score(cache, "mathlibmpr", slice="engine-subset:leanexplore").to_json()
    sby = {s["id"]: s for s in sl["systems"]}
    assert sl["scope"]["slice"] == {"name": "engine-subset:leanexplore", "subset": "sample:leanexplore:5:16", "members": 16}
    assert sby["full"]["n"] == sby[le_id]["n"] == le["n"]
    assert set(sby["full"]["per_query"]) == set(le["per_query"])

    res = runner.invoke(app, ["--db", cache_url, "score", "--bench", "mathlibmpr", "--slice", "engine-subset:leanexplore"])
    assert res.exit_code == 0, res.output
    assert f"n={le['n']} sampled" in res.stdout
    res = runner.invoke(app, ["--db", cache_url, "score", "--bench", "mathlibmpr", "--slice", "engine-subset:nobody"])
    assert res.exit_code == 1 and res.stderr.startswith("error: --slice engine-subset:nobody") and "Traceback" not in res.output


def json_r10(system: dict, qid: str) -> float:
    ps = system["per_query"][qid]["positions"]
    return sum(p is not None and p <= 10 for p in ps) / len(ps)


@pytest.mark.postgres
def test_sampled_crawl_on_postgres(pg_url, rows):
    from store.benchmarks import load_benchmark_file
    from benchmarks import shipped_path
    from store.db import open_database

    db = open_database(pg_url)
    try:
        load_benchmark_file(db, shipped_path("MathlibMPR.json"))
        with StandIn("leanexplore", rows, rate=Rate(20, 0.5)).in_thread() as srv:
            # A full crawl's leases for other texts must not be claimed by a sampled run.
            first = run_crawl(db, CrawlOptions(engines=["leanexplore"], bench="mathlibmpr", rates={"*": Rate(20, 0.5)},
                                               urls={"leanexplore": srv.url}, limit=2, margin=0.1), Reporter(every=1e9))
            assert first.results[0].counts.answered == 2
            s = _crawl(db, srv, 8, seed=2)
        r = s.results[0]
        assert r.counts.total == 8 and r.counts.answered == 8 and s.exit_code == 0
        with db.session() as ses:
            sub = ses.execute(sa.select(Subset).where(Subset.name == "sample:leanexplore:2:8")).scalar_one()
            assert sub.member_kind == "query_sha256" and sub.meta["n"] == 8
            answered = set(ses.execute(sa.select(Answer.query_sha256)).scalars())
        with db.session() as ses:
            bid = ses.execute(sa.select(Benchmark.id).where(Benchmark.name == "mathlibmpr")).scalar_one()
        sample = set(sampled_texts(db, bid, False, 8, 2))
        # Everything answered is either the sample or the two texts of the limited full run.
        assert sample <= answered and len(answered - sample) <= 2
    finally:
        db.dispose()


def test_samples_belong_to_their_benchmark(cache):
    from crawler.plan import store_sample
    from store.errors import InputError

    with cache.session() as s:
        ids = dict(s.execute(sa.select(Benchmark.name, Benchmark.id)).all())
    mpr = sampled_texts(cache, ids["mathlibmpr"], False, 5, 0)
    store_sample(cache, engine="leanexplore", bench="mathlibmpr", seed=0, texts=mpr)
    assert store_sample(cache, engine="leanexplore", bench="mathlibmpr", seed=0, texts=mpr)  # idempotent
    qr = sampled_texts(cache, ids["mathlibqr"], False, 5, 0)
    with pytest.raises(InputError, match="already holds benchmark mathlibmpr's sample; pick another --seed"):
        store_sample(cache, engine="leanexplore", bench="mathlibqr", seed=0, texts=qr)
    # A MathlibMPR sample is no slice of MathlibQR.
    with pytest.raises(Exception, match="engine 'leanexplore' has no sampled crawl"):
        score(cache, "mathlibqr", slice="engine-subset:leanexplore")
