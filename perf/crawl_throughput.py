"""Crawl throughput (issue 13, goals 1–2): `engines crawl` vs a bare httpx loop, same run.

One stand-in engine (LeanExplore's API by default) in its own process on loopback, no
latency, a limit it can sustain (1000/s). Measured in one run on the same MathlibQR texts:

- bare: an ``httpx.AsyncClient`` loop with ``--concurrency`` requests in flight, sending
  the adapter's own requests and parsing the JSON (the machine's ceiling for that server);
- floor (``--floor``, on by default): the least any archiving crawler must do, with the raw
  drivers and nothing of ours but the adapter: the same loop, the body parsed by the
  adapter, then its exchange row (request, headers, body) and its hit rows (rank, name;
  ``COPY`` on PostgreSQL, executemany on SQLite) handed to one writer thread that commits
  whatever is queued in one transaction (group commit), each loop awaiting its commit
  before it sends again (an answer counts only once it is durable; at most the in-flight
  requests are lost on ``kill -9``). No pacing, leases, answers table or parse outcomes:
  a ceiling for ``engines crawl`` on this machine, not a target;
- crawl: ``crawler.crawl.run_crawl`` with the same concurrency into a fresh SQLite file, a
  fresh PostgreSQL schema with one worker, and (``--workers 2``) two worker processes
  sharing that schema.

Printed: req/s, ÷ bare, client CPU per exchange (this process's CPU ÷ exchanges; the
server's and PostgreSQL's are other processes), and the machine's busy cores while the
loop ran (/proc/stat, every process): what one worker leaves idle bounds how far more
workers can scale. ``--profile`` prints cProfile's top functions (by own time) of the
SQLite crawl. Goals: ≥ 0.8 SQLite, ≥ 0.6 PostgreSQL, two PostgreSQL workers ≥ 1.6× one,
≤ 4 ms CPU per exchange.

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
import queue
import sqlite3
import sys
import tempfile
import threading
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
from crawler.crawl import CrawlOptions, run_crawl  # noqa: E402
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


def _busy_jiffies() -> tuple[int, int] | None:
    """(busy, total) clock ticks of every CPU since boot, or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return None
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f) - idle, sum(f)


class _MachineBusy:
    """Busy cores of the whole machine over a ``with`` block."""

    def __enter__(self) -> "_MachineBusy":
        self.cores = None
        self._j0, self._t0 = _busy_jiffies(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        j1 = _busy_jiffies()
        if self._j0 and j1:
            ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
            self.cores = (j1[0] - self._j0[0]) / ticks / max(1e-9, time.perf_counter() - self._t0)


class _FloorArchive:
    """The floor's archive: one table of exchanges and one of hits, written with the raw
    driver (sqlite3 or psycopg) by one thread that commits whatever is queued together."""

    def __init__(self, backend: str, db_url: str, create: bool = True) -> None:
        self.backend = backend
        if backend == "sqlite":
            path = db_url.removeprefix("sqlite:///")
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")  # what store.db sets
            self.p = "?"
        else:
            import psycopg
            self.conn = psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
            self.p = "%s"
        key = "integer PRIMARY KEY" if backend == "sqlite" else "bigserial PRIMARY KEY"
        blob = "blob" if backend == "sqlite" else "bytea"
        if create:
            self.conn.execute(f"CREATE TABLE floor_exchanges (id {key}, texts text, url text, request_headers text, "
                              f"status integer, response_headers text, body {blob}, sent_at double precision, "
                              f"elapsed_ms double precision)")
            self.conn.execute("CREATE TABLE floor_hits (exchange_id bigint, rank integer, name text, raw text)")
        p = self.p
        self.ins_ex = (f"INSERT INTO floor_exchanges (texts, url, request_headers, status, response_headers, body, "
                       f"sent_at, elapsed_ms) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})"
                       + (" RETURNING id" if backend != "sqlite" else ""))
        self.ins_hit = f"INSERT INTO floor_hits VALUES ({p}, {p}, {p}, {p})"
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _write(self, items: list) -> None:
        if self.backend == "sqlite":
            cur = self.conn.cursor()
            cur.execute("BEGIN")
            for row, hits, _loop, _fut in items:
                cur.execute(self.ins_ex, row)
                eid = cur.lastrowid
                cur.executemany(self.ins_hit, [(eid, *h) for h in hits])
            cur.execute("COMMIT")
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            for row, hits, _loop, _fut in items:
                eid = cur.execute(self.ins_ex, row).fetchone()[0]
                with cur.copy("COPY floor_hits FROM STDIN") as copy:  # faster than executemany here
                    for h in hits:
                        copy.write_row((eid, *h))

    def _serve(self) -> None:
        while True:
            items = [self.q.get()]
            while True:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            stop = items[-1] is None
            items = [i for i in items if i is not None]
            if items:
                self._write(items)
                for *_rest, loop, fut in items:
                    loop.call_soon_threadsafe(fut.set_result, None)
            if stop:
                return

    def close(self) -> int:
        """Stop the writer; the exchanges archived (by every process sharing the tables)."""
        self.q.put(None)
        self.thread.join()
        n = self.conn.execute("SELECT count(*) FROM floor_exchanges").fetchone()[0]
        self.conn.close()
        return n


async def floor_loop(engine: str, url: str, qs: list[str], concurrency: int, backend: str,
                     db_url: str, create: bool = True) -> tuple[float, float, int]:
    """The bare loop plus the least an archiving crawler must do (see the module docstring)."""
    adapter = get_adapter(engine, base_url=url)
    batch = adapter.batch_size
    it = iter([qs[i:i + batch] for i in range(0, len(qs), batch)])
    archive = _FloorArchive(backend, db_url, create)
    loop = asyncio.get_running_loop()
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=8)
    try:
        async with httpx.AsyncClient(limits=limits, follow_redirects=False, trust_env=False) as client:
            async def worker() -> int:
                n = 0
                for group in it:
                    request = adapter.build_request(group)
                    t_sent, t0 = time.time(), time.perf_counter()
                    resp = await client.send(request)
                    elapsed = 1e3 * (time.perf_counter() - t0)
                    hits = adapter.parse(group, resp.status_code, resp.headers, resp.content)
                    row = (json.dumps(group), str(request.url), json.dumps(dict(request.headers)), resp.status_code,
                           json.dumps(dict(resp.headers)), resp.content, t_sent, elapsed)
                    fut = loop.create_future()
                    archive.q.put((row, [(h.rank, h.name, None) for hl in hits for h in hl], loop, fut))
                    await fut
                    n += 1
                return n
            c0, t0 = time.process_time(), time.perf_counter()
            done = sum(await asyncio.gather(*(worker() for _ in range(concurrency))))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        archived = archive.close()
    assert archived >= done, (archived, done)  # every counted exchange was committed
    return wall, cpu, done


def _floor_worker(engine: str, url: str, qs: list[str], concurrency: int, db_url: str, go, out_q) -> None:
    go.wait()
    t0 = time.perf_counter()
    wall, cpu, done = asyncio.run(floor_loop(engine, url, qs, concurrency, "postgresql", db_url, create=False))
    out_q.put((t0, time.perf_counter(), cpu, done))


def floor_workers(db_url: str, engine: str, url: str, qs: list[str], concurrency: int, workers: int,
                  busy: "_MachineBusy") -> tuple[float, float, int]:
    """The floor in ``workers`` processes sharing one PostgreSQL schema, the texts split between them."""
    _FloorArchive("postgresql", db_url).close()  # the tables, once
    outs = _in_processes(_floor_worker, [(engine, url, qs[i::workers], concurrency, db_url) for i in range(workers)],
                         busy)
    return max(o[1] for o in outs) - min(o[0] for o in outs), sum(o[2] for o in outs), sum(o[3] for o in outs)


def _in_processes(target, args: list[tuple], busy: "_MachineBusy") -> list[tuple]:  # noqa: ANN001
    """``target(*a, go, out_q)`` in one spawned process per ``a``, started together once every
    one is up; what each put on ``out_q``. ``busy`` measures from the start to the last result."""
    ctx = mp.get_context("spawn")
    go, out_q = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, go, out_q)) for a in args]
    for p in procs:
        p.start()
    time.sleep(3.0)  # every process imported and connected before the clock starts
    with busy:
        go.set()
        outs = [out_q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return outs


def _options(engine: str, url: str, n: int, rate: Rate, concurrency: int) -> CrawlOptions:
    opts = CrawlOptions(engines=[engine], bench="mathlibqr", rates={"*": rate}, urls={engine: url}, limit=n,
                        all_styles=True)
    opts.concurrency = concurrency  # an older CrawlOptions without it ignores it (one in flight)
    return opts


def crawl_once(db_url: str, engine: str, url: str, n: int, rate: Rate, concurrency: int,
               profile: bool = False, busy: "_MachineBusy | None" = None) -> tuple[float, float, int, str]:
    db = open_database(db_url)
    try:
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        opts = _options(engine, url, n, rate, concurrency)
        prof = cProfile.Profile() if profile else None
        busy = busy or _MachineBusy()
        with busy:
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
                  workers: int, busy: "_MachineBusy | None" = None) -> tuple[float, float, int]:
    """``workers`` processes share one PostgreSQL schema holding exactly ``n`` due texts."""
    db = open_database(db_url)
    load_benchmark_file(db, shipped_path("MathlibQR.json"))
    bench = find_benchmark(db, "mathlibqr")
    keep = list(benchmark_texts(db, bench.id, True))[:n]
    from store.models import Query
    with db.session() as s, s.begin():  # the benchmark is cut to n texts, so "all due" is n
        s.execute(sa.delete(Query).where(Query.benchmark_id == bench.id, Query.query_sha256.not_in(keep)))
    db.dispose()
    outs = _in_processes(_worker, [(db_url, engine, url, rate, concurrency)] * workers, busy or _MachineBusy())
    answered = sum(o[3] for o in outs)
    assert answered == n, (answered, n)  # fetch once: every text answered exactly once in all
    wall = max(o[5] for o in outs) - min(o[4] for o in outs)
    return wall, sum(o[1] for o in outs), sum(o[2] for o in outs)


def _row(wall: float, cpu: float, exchanges: int, busy: _MachineBusy) -> dict:
    return {"rps": exchanges / wall, "cpu_ms": 1e3 * cpu / exchanges, "cores": busy.cores}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=945)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--engine", default="leanexplore")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--workers", type=int, default=2, help="PostgreSQL worker processes for the scaling run (0: skip)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure the floor: parse + a raw-driver archive with group commit")
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
        with _MachineBusy() as busy:
            wall, cpu, ex = asyncio.run(bare_loop(args.engine, server.url, qs, args.concurrency))
        res["bare"] = _row(wall, cpu, ex, busy)
        for backend in (["sqlite", "postgresql"] if args.backend == "both" else [args.backend]):
            if args.floor:
                time.sleep(max(1.0, rate.period))
                with scratch(backend, args.pg) as url, _MachineBusy() as busy:
                    wall, cpu, ex = asyncio.run(floor_loop(args.engine, server.url, qs, args.concurrency, backend, url))
                res[f"floor_{backend}"] = _row(wall, cpu, ex, busy)
            time.sleep(max(1.0, rate.period))
            busy = _MachineBusy()
            with scratch(backend, args.pg) as url:
                wall, cpu, ex, prof = crawl_once(url, args.engine, server.url, n, rate, args.concurrency,
                                                 args.profile and backend == "sqlite", busy)
            top = top or prof
            res[backend] = _row(wall, cpu, ex, busy)
            if backend == "postgresql" and args.workers > 1 and args.floor:
                time.sleep(max(1.0, rate.period))
                busy = _MachineBusy()
                with scratch(backend, args.pg) as url:
                    wall, cpu, ex = floor_workers(url, args.engine, server.url, qs, args.concurrency, args.workers, busy)
                res["floor_workers"] = _row(wall, cpu, ex, busy)
            if backend == "postgresql" and args.workers > 1:
                time.sleep(max(1.0, rate.period))
                busy = _MachineBusy()
                with scratch(backend, args.pg) as url:
                    wall, cpu, ex = crawl_workers(url, args.engine, server.url, n, rate, args.concurrency,
                                                  args.workers, busy)
                res["pg_workers"] = _row(wall, cpu, ex, busy)
    finally:
        server.stop()
    bare = res["bare"]["rps"]
    print(f"crawl overhead: {args.engine} stand-in in its own process, no latency, limit {rate}; "
          f"{n} MathlibQR texts, concurrency {args.concurrency}")
    print(f"  {'path':<44} {'req/s':>8} {'÷ bare':>7} {'client CPU/exchange':>20} {'machine busy':>13}")
    labels = (("bare", "bare httpx loop + JSON"),
              ("floor_sqlite", "floor: parse + raw archive, SQLite"), ("sqlite", "engines crawl, SQLite"),
              ("floor_postgresql", "floor: parse + raw archive, PostgreSQL"),
              ("postgresql", "engines crawl, PostgreSQL, 1 worker"),
              ("floor_workers", f"floor: PostgreSQL, {args.workers} processes"),
              ("pg_workers", f"engines crawl, PostgreSQL, {args.workers} workers"))
    ncpu = os.cpu_count() or 1
    for key, label in labels:
        if key in res:
            r = res[key]
            r["ratio"] = r["rps"] / bare
            cores = "" if r["cores"] is None else f"{r['cores']:.2f}/{ncpu} cores"
            print(f"  {label:<44} {r['rps']:8.1f} {r['ratio']:6.2f}x {r['cpu_ms']:17.1f} ms {cores:>13}")
    for backend in ("sqlite", "postgresql"):
        if f"floor_{backend}" in res and backend in res:
            print(f"  engines crawl ÷ floor, {backend}: {res[backend]['rps'] / res[f'floor_{backend}']['rps']:.2f}x")
    if "floor_workers" in res:
        print(f"  floor, {args.workers} PostgreSQL processes ÷ 1: "
              f"{res['floor_workers']['rps'] / res['floor_postgresql']['rps']:.2f}x")
    if "pg_workers" in res:
        print(f"  {args.workers} PostgreSQL workers ÷ 1: {res['pg_workers']['rps'] / res['postgresql']['rps']:.2f}x")
        one = res["postgresql"]["cores"]
        if one:
            print(f"  more PostgreSQL workers can reach at most {ncpu / one:.2f}x one: one worker's run kept "
                  f"{one:.2f} of {ncpu} cores busy (crawler, stand-in and PostgreSQL together)")
    print(f"  server violations: {server.stats.get('violations')} (must be 0)")
    print("  goals: SQLite >= 0.8x, PostgreSQL >= 0.6x, 2 workers >= 1.6x one, <= 4 ms CPU per exchange")
    if top:
        print(top)
    res["violations"] = server.stats.get("violations", -1)
    return res


if __name__ == "__main__":
    main()
