"""Crawl throughput at self-hosted speeds: `engines crawl` vs a bare httpx loop (issue 13, goal 1).

One stand-in engine (LeanExplore's API by default) runs in its own process on loopback
with no latency and a limit it can sustain (default 1000 requests/s), like a
self-hosted server. Measured in the same run, on the same MathlibQR texts:

- bare: an ``httpx.AsyncClient`` loop with the crawler's concurrency (one request in
  flight per engine today), sending the adapter's own requests and parsing the JSON;
  the machine's ceiling for that server;
- crawl: ``crawler.run.run_crawl`` into a fresh SQLite file, then into a fresh
  PostgreSQL schema (one worker), everything archived, parsed and written.

Printed: requests/s of each, the ratio crawl ÷ bare (goal: ≥ 0.8 on SQLite, ≥ 0.6 on
PostgreSQL), and client CPU per exchange (process CPU time ÷ exchanges; the server's
and PostgreSQL's own CPU are other processes and not counted; goal ≤ 4 ms). This round
records today's baseline; the crawler's hot path is not changed here.

    python perf/crawl_throughput.py [--queries 945] [--rate 1000] [--engine leanexplore] [--backend both]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from _scratch import DEFAULT_PG, scratch_url  # noqa: E402
from benchmarks import SLICE_CORPUS, shipped_path  # noqa: E402
from crawl_pacing import _Quiet, _Server  # noqa: E402
from crawler.plan import benchmark_texts  # noqa: E402
from crawler.run import CrawlOptions, run_crawl  # noqa: E402
from engines.base import Rate  # noqa: E402
from engines.registry import get_adapter  # noqa: E402
from store.benchmarks import find_benchmark, load_benchmark_file  # noqa: E402
from store.db import open_database  # noqa: E402


def texts(n: int, all_styles: bool = True) -> list[str]:
    """The first ``n`` of the texts a crawl of MathlibQR sends (all 945 styles by default)."""
    with scratch_url("sqlite") as url:
        db = open_database(url)
        try:
            load_benchmark_file(db, shipped_path("MathlibQR.json"))
            bench = find_benchmark(db, "mathlibqr")
            return list(benchmark_texts(db, bench.id, all_styles).values())[:n]
        finally:
            db.dispose()


async def bare_loop(engine: str, url: str, qs: list[str], concurrency: int = 1) -> tuple[float, float, int]:
    """(wall s, client CPU s, exchanges): the adapter's requests, JSON parsed, nothing stored."""
    adapter = get_adapter(engine, base_url=url)
    batch = adapter.batch_size
    groups = [qs[i:i + batch] for i in range(0, len(qs), batch)]
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=8)
    it = iter(groups)
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


def crawl_once(db_url: str, engine: str, url: str, n: int, rate: Rate) -> tuple[float, float, int]:
    """(wall s, client CPU s, exchanges) of one run_crawl of ``n`` MathlibQR texts."""
    db = open_database(db_url)
    try:
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        opts = CrawlOptions(engines=[engine], bench="mathlibqr", rates={"*": rate}, urls={engine: url}, limit=n,
                            all_styles=True)
        c0, t0 = time.process_time(), time.perf_counter()
        summary = run_crawl(db, opts, _Quiet(every=1e9))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        db.dispose()
    res = summary.results[0]
    assert res.answered_now == n, (res.answered_now, n, res.stopped)
    return wall, cpu, res.exchanges


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=945)
    ap.add_argument("--rate", type=float, default=1000.0, help="requests/s allowed by server and crawler")
    ap.add_argument("--engine", default="leanexplore")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--pg", default=os.environ.get("ENGINES_PERF_PG_URL", DEFAULT_PG))
    args = ap.parse_args(argv)
    qs = texts(args.queries)
    n = len(qs)
    rate = Rate(max(1, int(args.rate)), max(1, int(args.rate)) / args.rate)
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in itertools.islice(fh, 2000)]
    server = _Server(args.engine, rows, rate)
    results: dict[str, dict[str, float]] = {}
    try:
        wall, cpu, ex = asyncio.run(bare_loop(args.engine, server.url, qs))
        results["bare"] = {"rps": ex / wall, "cpu_ms": 1e3 * cpu / ex, "exchanges": ex, "wall": wall}
        backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
        for backend in backends:
            time.sleep(max(1.0, rate.period))  # a fresh window on the server for every run
            with scratch_url(backend, args.pg) as db_url:
                wall, cpu, ex = crawl_once(db_url, args.engine, server.url, n, rate)
            results[backend] = {"rps": ex / wall, "cpu_ms": 1e3 * cpu / ex, "exchanges": ex, "wall": wall}
    finally:
        server.stop()
    bare = results["bare"]["rps"]
    print(f"crawl throughput: {args.engine} stand-in in its own process, no latency, limit {rate}; "
          f"{n} MathlibQR texts, one request in flight")
    print(f"  {'path':<28} {'req/s':>8} {'ratio':>7} {'client CPU/exchange':>20}")
    for key, label in (("bare", "bare httpx loop + JSON"), ("sqlite", "engines crawl, SQLite"),
                       ("postgresql", "engines crawl, PostgreSQL")):
        if key in results:
            r = results[key]
            r["ratio"] = r["rps"] / bare
            print(f"  {label:<28} {r['rps']:8.1f} {r['ratio']:7.2f} {r['cpu_ms']:17.1f} ms")
    print(f"  server violations: {server.stats.get('violations')} (must be 0)")
    print("  goals (issue 13): crawl/bare >= 0.8 on SQLite, >= 0.6 on PostgreSQL; <= 4 ms CPU per exchange")
    results["violations"] = {"n": server.stats.get("violations", -1)}
    return results


if __name__ == "__main__":
    main()
