"""MathlibMPR's premise task: ``leanpremise``, ``leansearch-ps`` and ``leanstatesearch`` rows
(crawled from their stand-ins over the real slice corpus) scored beside BM25 with group
recall (R@k over premise groups) and Covered@k (issue 33)."""

from __future__ import annotations

import pytest

import benchmarks
from scoring.results import score
from tests.support.scoring import cache, cache_url, prepared_cache  # noqa: F401  (fixtures)

PREMISE_ENGINES = ("leanpremise", "leansearch-ps", "leanstatesearch")


def _slice_rows() -> list[dict]:
    import json

    with open(benchmarks.SLICE_CORPUS, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.slow
def test_premise_engines_scored_on_mathlibmpr_beside_bm25(cache):  # noqa: F811
    from crawler.fetch import RetryPolicy
    from crawler.crawl import CrawlOptions, run_crawl
    from engines.base import Rate
    from engines.emulate import StandIn
    from engines.local.runner import run_bm25
    from tests.support.crawl import Quiet

    rows = _slice_rows()
    rate = Rate(1000, 1.0)
    for engine in PREMISE_ENGINES:
        with StandIn(engine, rows, rate=rate).in_thread() as srv:
            opts = CrawlOptions(engines=[engine], bench="mathlibmpr", rates={"*": rate}, urls={engine: srv.url},
                                policy=RetryPolicy(max_attempts=3, backoff_initial=0.01), margin=0.0, num_results=20,
                                limit=20)
            rep = Quiet()
            assert run_crawl(cache, opts, rep).exit_code in (0, 3), rep.lines
            assert srv.stats.served > 0
    run_bm25(cache, bench="mathlibmpr", corpus=f"{benchmarks.SLICE_CORPUS_NAME}@{benchmarks.SLICE_CORPUS_REVISION}")
    doc = score(cache, "mathlibmpr").to_json()
    systems = {s["label"].split(" (")[0].split("@")[0]: s for s in doc["systems"]}
    assert {"leanpremise", "leansearch-ps", "leanstatesearch"} <= set(systems) and any("bm25" in k for k in systems)
    for name, s in systems.items():
        m = s["metrics"]
        assert m["R@10"]["value"] is not None and m["Covered@10"]["value"] is not None, name
        assert m["Covered@10"]["value"] <= m["R@10"]["value"] + 1e-12, name
    # Scored on the same queries (the crawled texts answered, BM25 everywhere, the shared cut).
    assert len({s["n"] for s in systems.values()}) == 1 and next(iter(systems.values()))["n"] > 0
