"""BM25 on real Mathlib (--corpus; the README's figures: the 250,379-row extract): index time, queries/s, quality.

Runs the production path end to end in a fresh SQLite file and cache directory: load
the corpus and the shipped benchmarks, ``run_bm25`` over all MathlibQR queries (index
build, per-query search, answers + hits written), then a second build call that loads the
cached index memory-mapped. Prints, all measured in this run:

- tokenise + index seconds and rows/s; cached (mmap) reload seconds;
- queries/s of the per-query search path, and its ratio to bm25s's own batch
  ``retrieve`` over the same index and the same tokens (the baseline: overhead of ours);
- nDCG@10 and R@10 from ``scoring.results.score`` (golds absent from the corpus dropped,
  n printed), cross-checked by a small inline calculation over the written hits.

Two field sets: ``rendered`` (the lsv2-compat text; on this corpus only kind + name,
since it has no types or informal descriptions) and ``name,signature,docstring``.

    python perf/bm25.py [--corpus PATH] [--fields rendered name,signature,docstring]

--corpus defaults to the shipped 11,651-row slice (benchmarks/data/mathlib-slice/), which
runs in seconds; pass the extracted Mathlib's declarations.jsonl.gz for Mathlib scale.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from _scratch import SHIPPED_SLICE  # noqa: E402

DEFAULT_CORPUS = SHIPPED_SLICE
CORPUS = "perf-corpus"


def inline_metrics(db, config_id: int, bench_id: int, corpus_id: int) -> dict[str, float]:  # noqa: ANN001
    """nDCG@10 / R@10 over MathlibQR queries whose gold is in the corpus (single gold)."""
    from store.models import Answer, Declaration, GoldName, GoldUnit, Hit, Query

    with db.session() as s:
        present = set(s.execute(sa.select(Declaration.full_name).where(Declaration.corpus_id == corpus_id)).scalars())
        gold = dict(s.execute(
            sa.select(Query.query_sha256, GoldName.name).join(GoldUnit, GoldUnit.query_id == Query.id)
            .join(GoldName, GoldName.gold_unit_id == GoldUnit.id).where(Query.benchmark_id == bench_id)
        ).all())
        qshas = [sha for (sha,) in s.execute(sa.select(Query.query_sha256).where(Query.benchmark_id == bench_id))]
        ranks: dict[str, int] = {}
        for sha, name, rank in s.execute(
            sa.select(Answer.query_sha256, Hit.name, Hit.rank).join(Hit, Hit.answer_id == Answer.id)
            .where(Answer.config_id == config_id).order_by(Hit.rank)
        ):
            if name == gold.get(sha) and sha not in ranks:
                ranks[sha] = rank
    scored = [sha for sha in qshas if gold[sha] in present]
    ndcg = [1 / math.log2(ranks[q] + 1) if ranks.get(q, 10**9) <= 10 else 0.0 for q in scored]
    r10 = [1.0 if ranks.get(q, 10**9) <= 10 else 0.0 for q in scored]
    return {"n": len(scored), "of": len(qshas), "nDCG@10": float(np.mean(ndcg)), "R@10": float(np.mean(r10))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--fields", nargs="+", default=["rendered", "name,signature,docstring"])
    ap.add_argument("--keep", action="store_true", help="keep the temporary database and cache directory")
    args = ap.parse_args()

    from engines.local.bm25 import BM25Params, build_or_load
    from engines.local.common import load_corpus_docs
    from engines.local.runner import run_bm25
    from engines.local.tokenize import tokenize
    from scoring.results import score
    from store.benchmarks import find_benchmark, load_shipped
    from store.corpus import find_corpus, load_corpus
    from store.db import open_database
    from store.models import Query

    work = Path(tempfile.mkdtemp(prefix="perf-bm25-"))
    os.environ["ENGINES_CACHE_DIR"] = str(work / "cache")
    db = open_database(f"sqlite:///{work / 'cache.db'}")
    t = time.perf_counter()
    load_shipped(db)
    load_corpus(db, str(args.corpus), name=CORPUS)
    print(f"setup: corpus + benchmarks loaded into SQLite in {time.perf_counter() - t:.1f}s")
    corp = find_corpus(db, CORPUS)
    bench = find_benchmark(db, "mathlibqr")
    t = time.perf_counter()
    docs = load_corpus_docs(db, corp)
    print(f"corpus rows read back from SQL: {len(docs):,} in {time.perf_counter() - t:.1f}s")
    with db.session() as s:
        texts = list(dict.fromkeys(s.execute(sa.select(Query.text).where(Query.benchmark_id == bench.id)).scalars()))

    for fields in args.fields:
        print(f"\n=== BM25, fields={fields} (k1=1.5, b=0.75, lucene) ===")
        t = time.perf_counter()
        summary = run_bm25(db, bench="mathlibqr", corpus=CORPUS, fields=fields)
        total = time.perf_counter() - t
        print(f"index: built in {summary.index_seconds:.1f}s ({len(docs) / summary.index_seconds:,.0f} rows/s; "
              f"tokenise + bm25s index + save)")
        print(f"run: {summary.answered} queries searched + written in {summary.search_seconds:.1f}s; whole run {total:.1f}s")
        t = time.perf_counter()
        index = build_or_load(docs, BM25Params(fields=fields))
        print(f"cached reload (memory-mapped): {time.perf_counter() - t:.3f}s, vocab {index.meta['vocab_size']:,}, "
              f"nnz {index.meta['nnz']:,}")

        # Search speed: ours per query vs bm25s's batch retrieve on the same tokens.
        # Only queries with at least one indexed token: bm25s cannot take an empty one.
        toks = [q for q in (tokenize(x) for x in texts) if any(w in index.vocab for w in q)]
        known = [[w for w in q if w in index.vocab] for q in toks]
        for _ in range(2):  # warm
            index.search_tokens(toks[0])
        t = time.perf_counter()
        for q in toks:
            index.search_tokens(q, 200)
        ours = time.perf_counter() - t
        ids = [[index.vocab[w] for w in q] for q in known]
        t = time.perf_counter()
        index.retriever.retrieve(ids, k=200, show_progress=False, n_threads=1)
        base = time.perf_counter() - t
        print(f"search: {len(toks) / ours:,.0f} queries/s (per-query path, top 200, positive scores, tie-break); "
              f"bm25s batch retrieve {len(toks) / base:,.0f} queries/s; ratio ours/bm25s = {base / ours:.2f}")

        t = time.perf_counter()
        res = score(db, "mathlibqr", corpus=CORPUS, systems=[summary.label], resamples=200)
        sysr = res.systems[0]
        m = sysr.metrics
        print(f"score (scoring.results.score, {time.perf_counter() - t:.1f}s): n={sysr.n} dropped={sysr.dropped} "
              f"nDCG@10={m['nDCG@10']['value']:.3f} R@10={m['R@10']['value']:.3f} R@1={m['R@1']['value']:.3f} "
              f"MRR={m['MRR']['value']:.3f} p95 latency {sysr.latency_p95_ms:.1f} ms")
        inl = inline_metrics(db, summary.config_id, bench.id, corp.id)
        print(f"inline check: n={inl['n']} of {inl['of']} nDCG@10={inl['nDCG@10']:.3f} R@10={inl['R@10']:.3f}")
    db.dispose()
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
