"""Crawl throughput (issue 13, goals 1–2): `engines crawl` vs a bare httpx loop, same run.

One stand-in engine (LeanExplore's API by default) in its own process on loopback, no
latency, a limit it can sustain (1000/s). Measured in one run on the same MathlibQR texts:

- bare: an ``httpx.AsyncClient`` loop with ``--concurrency`` requests in flight, sending
  the adapter's own requests and parsing the JSON (the machine's ceiling for that server);
- crawl: ``crawler.run.run_crawl`` with the same concurrency into a fresh SQLite file, a
  fresh PostgreSQL schema with one worker, and (``--workers 2``) two worker processes
  sharing that schema.

Printed: req/s, crawl ÷ bare, client CPU per exchange (this process's CPU ÷ exchanges;
the server's and PostgreSQL's are other processes). ``--profile`` prints cProfile's top
functions (by own time) of the SQLite crawl. Goals: ≥ 0.8 SQLite, ≥ 0.6 PostgreSQL,
two PostgreSQL workers ≥ 1.6× one, ≤ 4 ms CPU per exchange.

    python perf/crawl_throughput.py [--queries 945] [--rate 1000] [--concurrency 1] [--backend both] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import json
import multiprocessing as mp
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "perf"))

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from benchmarks import SLICE_CORPUS, shipped_path  # noqa: E402
from _scratch import DEFAULT_PG, scratch_url as scratch  # noqa: E402
from crawl_pacing import _Quiet, _Server  # noqa: E402
from crawler.plan import benchmark_texts  # noqa: E402
from crawler.run import CrawlOptions, run_crawl  # noqa: E402
from engines.base import Rate  # noqa: E402
from engines.registry import get_adapter  # noqa: E402
from store.benchmarks import find_benchmark, load_benchmark_file  # noqa: E402
from store.db import open_database  # noqa: E402

def texts(n: int) -> list[str]:
    with scratch("sqlite", "") as url:
        db = open_database(url)
        try:
            load_benchmark_file(db, shipped_path("MathlibQR.json"))
            bench = find_benchmark(db, "mathlibqr")
            return list(benchmark_texts(db, bench.id, True).values())[:n]
        finally:
            db.dispose()


async def bare_loop(engine: str, url: str, qs: list[str], concurrency: int) -> tuple[float, float, int]:
    adapter = get_adapter(engine, base_url=url)
    batch = adapter.batch_size
    it = iter([qs[i:i + batch] for i in range(0, len(qs), batch)])
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=8)
    async with httpx.AsyncClient(limits=limits, follow_redirects=False, trust_env=False) as client:
        async def worker() -> int:
            n = 0
            for group in it:
                resp = await client.send(adapter.build_request(group))
                resp.raise_for_status()
                json.loads(resp.content)
                n += 1
            return n
        c0, t0 = time.process_time(), time.perf_counter()
        done = sum(await asyncio.gather(*(worker() for _ in range(concurrency))))
        return time.perf_counter() - t0, time.process_time() - c0, done


def _options(engine: str, url: str, n: int, rate: Rate, concurrency: int) -> CrawlOptions:
    opts = CrawlOptions(engines=[engine], bench="mathlibqr", rates={"*": rate}, urls={engine: url}, limit=n,
                        all_styles=True)
    opts.concurrency = concurrency  # an older CrawlOptions without it ignores it (one in flight)
    return opts


def crawl_once(db_url: str, engine: str, url: str, n: int, rate: Rate, concurrency: int,
               profile: bool = False) -> tuple[float, float, int, str]:
    db = open_database(db_url)
    try:
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        opts = _options(engine, url, n, rate, concurrency)
        prof = cProfile.Profile() if profile else None
        c0, t0 = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        summary = run_crawl(db, opts, _Quiet(every=1e9))
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        db.dispose()
    res = summary.results[0]
    assert res.answered_now == n, (res.answered_now, n, res.stopped)
    top = ""
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        top = buf.getvalue()
    return wall, cpu, res.exchanges, top


def _worker(db_url: str, engine: str, url: str, rate: Rate, concurrency: int, go, out_q) -> None:
    db = open_database(db_url)
    opts = _options(engine, url, 10**9, rate, concurrency)
    opts.limit = None
    go.wait()
    c0, t0 = time.process_time(), time.perf_counter()
    summary = run_crawl(db, opts, _Quiet(every=1e9))
    out_q.put((time.perf_counter() - t0, time.process_time() - c0, summary.results[0].exchanges,
               summary.results[0].answered_now, t0, time.perf_counter()))
    db.dispose()


def crawl_workers(db_url: str, engine: str, url: str, n: int, rate: Rate, concurrency: int,
                  workers: int) -> tuple[float, float, int]:
    """``workers`` processes share one PostgreSQL schema holding exactly ``n`` due texts."""
    db = open_database(db_url)
    load_benchmark_file(db, shipped_path("MathlibQR.json"))
    bench = find_benchmark(db, "mathlibqr")
    keep = list(benchmark_texts(db, bench.id, True))[:n]
    from store.models import Query
    with db.session() as s, s.begin():  # the benchmark is cut to n texts, so "all due" is n
        s.execute(sa.delete(Query).where(Query.benchmark_id == bench.id, Query.query_sha256.not_in(keep)))
    db.dispose()
    ctx = mp.get_context("spawn")
    go, out_q = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(db_url, engine, url, rate, concurrency, go, out_q))
             for _ in range(workers)]
    for p in procs:
        p.start()
    time.sleep(3.0)  # every worker imported and connected before the clock starts
    go.set()
    outs = [out_q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    answered = sum(o[3] for o in outs)
    assert answered == n, (answered, n)  # fetch once: every text answered exactly once in all
    wall = max(o[5] for o in outs) - min(o[4] for o in outs)
    return wall, sum(o[1] for o in outs), sum(o[2] for o in outs)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=945)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--engine", default="leanexplore")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--workers", type=int, default=2, help="PostgreSQL worker processes for the scaling run (0: skip)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--pg", default=os.environ.get("ENGINES_PERF_PG_URL", DEFAULT_PG))
    args = ap.parse_args(argv)
    qs = texts(args.queries)
    n = len(qs)
    rate = Rate(max(1, int(args.rate)), max(1, int(args.rate)) / args.rate)
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in itertools.islice(fh, 2000)]
    server = _Server(args.engine, rows, rate)
    res: dict[str, dict] = {}
    top = ""
    try:
        wall, cpu, ex = asyncio.run(bare_loop(args.engine, server.url, qs, args.concurrency))
        res["bare"] = {"rps": ex / wall, "cpu_ms": 1e3 * cpu / ex}
        for backend in (["sqlite", "postgresql"] if args.backend == "both" else [args.backend]):
            time.sleep(max(1.0, rate.period))
            with scratch(backend, args.pg) as url:
                wall, cpu, ex, prof = crawl_once(url, args.engine, server.url, n, rate, args.concurrency,
                                                 args.profile and backend == "sqlite")
            top = top or prof
            res[backend] = {"rps": ex / wall, "cpu_ms": 1e3 * cpu / ex}
            if backend == "postgresql" and args.workers > 1:
                time.sleep(max(1.0, rate.period))
                with scratch(backend, args.pg) as url:
                    wall, cpu, ex = crawl_workers(url, args.engine, server.url, n, rate, args.concurrency,
                                                  args.workers)
                res["pg_workers"] = {"rps": ex / wall, "cpu_ms": 1e3 * cpu / ex}
    finally:
        server.stop()
    bare = res["bare"]["rps"]
    print(f"crawl overhead: {args.engine} stand-in in its own process, no latency, limit {rate}; "
          f"{n} MathlibQR texts, concurrency {args.concurrency}")
    print(f"  {'path':<34} {'req/s':>8} {'÷ bare':>7} {'client CPU/exchange':>20}")
    labels = (("bare", "bare httpx loop + JSON"), ("sqlite", "engines crawl, SQLite"),
              ("postgresql", "engines crawl, PostgreSQL, 1 worker"),
              ("pg_workers", f"engines crawl, PostgreSQL, {args.workers} workers"))
    for key, label in labels:
        if key in res:
            r = res[key]
            r["ratio"] = r["rps"] / bare
            print(f"  {label:<34} {r['rps']:8.1f} {r['ratio']:6.2f}x {r['cpu_ms']:17.1f} ms")
    if "pg_workers" in res:
        print(f"  {args.workers} PostgreSQL workers ÷ 1: {res['pg_workers']['rps'] / res['postgresql']['rps']:.2f}x")
    print(f"  server violations: {server.stats.get('violations')} (must be 0)")
    print("  goals: SQLite >= 0.8x, PostgreSQL >= 0.6x, 2 workers >= 1.6x one, <= 4 ms CPU per exchange")
    if top:
        print(top)
    res["violations"] = server.stats.get("violations", -1)
    return res


if __name__ == "__main__":
    main()
